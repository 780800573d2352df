/**
 * Test-set evaluations: how the machine takes an `evaluation` report (`reportEvaluation`). When ranks
 * 0 and 1 evaluate (`isEvaluationCommit`) is the tabs' schedule too: core/training/commit-schedule.ts.
 *
 * A number the coordinator can trust is one two ranks agree on: both evaluate the same committed state
 * (the same bytes), so their counts must be equal up to a rank's ties at the arg-max and their losses
 * up to GPU rounding (`EVALUATION_AGREEMENT`). The first report of a step is logged `verified: false`;
 * a second rank's that agrees is logged again with `verified: true` (readers keep a step's verified
 * row); one that disagrees is an `evaluation_disputed` warning and the step stays unverified. A world of
 * one has no second opinion: its numbers are shown as unverified (admin page, `GET /api/evaluations`).
 *
 * An evaluation measures a COMMITTED state (right after its commit point, before the next step), so
 * every rank would get the same number and the figure belongs to exactly one step of the commit log.
 * The machine keeps no state for it: an accepted report becomes one `evaluation` event in the log (the
 * admin page's accuracy chart and `GET /api/evaluations` read it there) plus two metrics.
 */
import { begin, finish, log, metric, mutWorker, reject } from './context';
import type { EvaluationMessage } from '../../core/protocol/tab-messages';
import type { ErrorCode } from '../../core/protocol/coordinator-messages';
import { type CommitSpan, isEvaluationCommit } from '../../core/training/commit-schedule';
import type { CoordinatorState, LastCommit, Transition } from './state';
import { workerOf } from './worker-table';

/** The last commit as the schedules see it, and the epoch its group trained on. */
export function lastCommitSpan(last: LastCommit, epochs: number): CommitSpan & { epoch: number } {
  // A commit leaves the cursor at 0 only when it ended its epoch (a group never spans two).
  const endsEpoch = last.step > 0 && last.cursor === 0;
  return {
    firstStep: last.firstStep ?? last.step,
    step: last.step,
    endsEpoch,
    endsJob: last.epoch >= epochs,
    epoch: endsEpoch ? last.epoch - 1 : last.epoch,
  };
}

export type EvaluationCheck = { ok: true } | { ok: false; code: ErrorCode; message: string };

/**
 * Decide whether a (schema-valid) evaluation from `workerId` is acceptable: the job still runs (or just
 * finished), the sender is rank 0 or 1 of the round that made the last commit, of the current round, or
 * of the round that just closed (`roundMembers`: the report of a round's last commit may arrive after
 * the close), the step is the last commit (ranks 0 and 1
 * evaluate a commit before they apply the next step, so their reports arrive before any later commit), that
 * commit is an evaluation point, the epoch is the one it trained on, and the counts are consistent.
 */
export function checkEvaluation(s: CoordinatorState, workerId: string, msg: EvaluationMessage): EvaluationCheck {
  const rv = s.rendezvous;
  if (msg.runId !== s.runId)
    return { ok: false, code: 'wrong_run', message: `run ${msg.runId} is not the current run` };
  if (s.status === 'failed') return { ok: false, code: 'job_failed', message: 'the job failed' };
  const members = roundMembers(s, msg.round);
  if (!members) {
    return {
      ok: false,
      code: 'stale_round',
      message: `round ${msg.round} is neither the current round (${rv.round}, ${rv.phase}), nor the one that just closed, nor the one that made the last commit`,
    };
  }
  if (!members.includes(workerId))
    return { ok: false, code: 'not_member', message: `worker ${workerId} is not in round ${msg.round}` };
  // Only the ranks asked: ranks 0 and 1 of that round (members are listed in rank order).
  if (!members.slice(0, 2).includes(workerId))
    return { ok: false, code: 'not_evaluator', message: `only ranks 0 and 1 of round ${msg.round} evaluate` };
  if ((s.evaluationClaims ?? []).some((c) => c.step === msg.step && c.workerId === workerId))
    return { ok: false, code: 'duplicate_report', message: `step ${msg.step} already evaluated by ${workerId}` };
  if (msg.step !== s.lastCommit.step)
    return {
      ok: false,
      code: 'wrong_step',
      message: `step ${msg.step} is not the last commit (${s.lastCommit.step})`,
    };
  const span = lastCommitSpan(s.lastCommit, s.job.epochs);
  if (!isEvaluationCommit(span, s.job))
    return { ok: false, code: 'wrong_step', message: `step ${msg.step} is not an evaluation point` };
  const epoch = span.epoch;
  if (msg.epoch !== epoch)
    return { ok: false, code: 'wrong_step', message: `step ${msg.step} is in epoch ${epoch}, not ${msg.epoch}` };
  // The schema refuses these already; the machine also takes typed messages that never went through it.
  if (msg.correct > msg.testSamples)
    return { ok: false, code: 'bad_samples', message: `${msg.correct} correct out of ${msg.testSamples} test images` };
  if (!(msg.testSamples >= 1) || !Number.isFinite(msg.lossSum) || msg.lossSum < 0) {
    return {
      ok: false,
      code: 'bad_samples',
      message: `bad evaluation counts (${msg.testSamples} images, loss sum ${msg.lossSum})`,
    };
  }
  return { ok: true };
}

/**
 * The members, in rank order, of `round` if a report of it may still arrive: the round that made the
 * last commit (its ranks 0 and 1 evaluate that commit, and their reports may land after the round
 * closed at the commit's boundary and a check's verdict then ended the job: the hostile-tabs browser
 * test lost the job's final evaluation so once), the current round, or the one that just closed.
 * Null for any other round.
 */
function roundMembers(s: CoordinatorState, round: number): readonly string[] | null {
  const rv = s.rendezvous;
  const last = s.lastCommit;
  if (last.round === round && last.members) return last.members;
  if (rv.phase !== 'gathering' && round === rv.round) return rv.participants.map((p) => p.workerId);
  if (rv.closedRound !== null && round === rv.closedRound.round) return rv.closedRound.members;
  return null;
}

/**
 * Apply an evaluation that arrived on `conn`, welcomed as `workerId`: an `evaluation` log event
 * `{step, epoch, accuracy, loss, testSamples, workerId, round}` and the accuracy gauge; or a rejection
 * (error, counted metric, log line) with the state untouched.
 */
export function reportEvaluation(
  state: CoordinatorState,
  now: number,
  conn: string,
  workerId: string,
  msg: EvaluationMessage,
): Transition {
  const check = checkEvaluation(state, workerId, msg);
  if (!check.ok) return reject(state, conn, check.code, check.message, { workerId, round: msg.round, step: msg.step });
  const ctx = begin(state, now);
  if (workerOf(ctx.s.workers, workerId)) mutWorker(ctx, workerId).lastSeen = now;
  const claim = { step: msg.step, workerId, correct: msg.correct, testSamples: msg.testSamples, lossSum: msg.lossSum };
  const other = (ctx.s.evaluationClaims ?? []).find((c) => c.step === msg.step && c.workerId !== workerId);
  ctx.s.evaluationClaims = [...(ctx.s.evaluationClaims ?? []), claim].slice(-MAX_EVALUATION_CLAIMS);
  if (other && !agree(other, claim)) {
    log(ctx, 'warn', 'evaluation_disputed', { step: msg.step, reports: [other, claim] });
    return finish(ctx);
  }
  const accuracy = msg.correct / msg.testSamples;
  const loss = msg.lossSum / msg.testSamples;
  metric(ctx, 'tabswarm_evaluations_total');
  metric(ctx, 'tabswarm_test_accuracy', accuracy);
  log(ctx, 'info', 'evaluation', {
    step: msg.step,
    epoch: msg.epoch,
    accuracy,
    loss,
    testSamples: msg.testSamples,
    workerId,
    round: msg.round,
    verified: !!other,
    ...(other ? { agreedBy: [other.workerId, workerId] } : {}),
  });
  return finish(ctx);
}

/** Evaluation reports remembered for the second rank's (they arrive within a step or two of each other). */
export const MAX_EVALUATION_CLAIMS = 8;

/**
 * How far two honest ranks' evaluations of the same bytes may differ: a few arg-max ties that round
 * the other way on another GPU (0.1 % of the images, at least one), and float32 rounding of the loss sum.
 */
export const EVALUATION_AGREEMENT = { correct: 0.001, loss: 1e-3 } as const;

function agree(
  a: { correct: number; testSamples: number; lossSum: number },
  b: { correct: number; testSamples: number; lossSum: number },
): boolean {
  const ties = Math.max(1, EVALUATION_AGREEMENT.correct * a.testSamples);
  const loss = EVALUATION_AGREEMENT.loss * Math.max(1, Math.abs(a.lossSum));
  return (
    a.testSamples === b.testSamples &&
    Math.abs(a.correct - b.correct) <= ties &&
    Math.abs(a.lossSum - b.lossSum) <= loss
  );
}
