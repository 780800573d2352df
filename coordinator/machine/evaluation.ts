/**
 * Test-set evaluations: how the machine takes an `evaluation` report (`reportEvaluation`). When rank 0
 * evaluates (`isEvaluationCommit`) is the tabs' schedule too: core/training/commit-schedule.ts.
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
 * finished), the sender is a member of the current round or of the round that just closed (the report
 * of a round's last commit may arrive after the close), the step is the last commit (rank 0 evaluates
 * a commit before it applies the next step, so its report arrives before any later commit), that
 * commit is an evaluation point, the epoch is the one it trained on, and the counts are consistent.
 */
export function checkEvaluation(s: CoordinatorState, workerId: string, msg: EvaluationMessage): EvaluationCheck {
  const rv = s.rendezvous;
  if (msg.runId !== s.runId)
    return { ok: false, code: 'wrong_run', message: `run ${msg.runId} is not the current run` };
  if (s.status === 'failed') return { ok: false, code: 'job_failed', message: 'the job failed' };
  const current = rv.phase !== 'gathering' && msg.round === rv.round;
  const closed = rv.closedRound !== null && msg.round === rv.closedRound.round;
  if (!current && !closed) {
    return {
      ok: false,
      code: 'stale_round',
      message: `round ${msg.round} is neither the current round (${rv.round}, ${rv.phase}) nor the one that just closed`,
    };
  }
  const member = current
    ? rv.participants.some((p) => p.workerId === workerId)
    : rv.closedRound!.members.includes(workerId);
  if (!member) return { ok: false, code: 'not_member', message: `worker ${workerId} is not in round ${msg.round}` };
  // Only the rank asked: rank 0 of that round (members are listed in rank order).
  const evaluator = current ? rv.participants[0]?.workerId : rv.closedRound!.members[0];
  if (workerId !== evaluator)
    return { ok: false, code: 'not_evaluator', message: `only rank 0 of round ${msg.round} evaluates` };
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
  });
  return finish(ctx);
}
