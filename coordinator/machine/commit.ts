/**
 * The commit rule: a commit group (core/training/groups.ts: the steps from the last commit to the
 * group's last step, its commit point) commits only when every rank of the current round reported
 * every step of it with its slice's sample count, and the commit point with the same parameter hash (in
 * local sync mode: the same committed-state hash after the outer step). Anything else is rejected
 * with a reason and leaves the state untouched, except a hash mismatch between ranks: that is
 * divergence, and the round closes with restore:true.
 *
 * A group that survivors carry on (round-close.ts `carryIn`) commits partially: the lost slots'
 * slices become holes of the record, the survivors' slices are processed.
 */
import { begin, finish, log, metric, mutWorker, persist, reject, sendWorker, type Ctx } from './context';
import type { StepReportMessage } from '../../core/protocol/tab-messages';
import type { ErrorCode } from '../../core/protocol/coordinator-messages';
import { requestCheckpointIn } from './checkpoints';
import { admitAtBoundaryIn, afterCloseIn, closeRoundIn } from './round-close';
import { afterCommitIn, ringChecksPassIn, SUSPICION_STEPS, sketchProblem, uploadField } from './verification';
import { mergeRanges, rangesCount, slotsRanges, type GroupPlan, type PositionRange } from '../../core/training/groups';
import { commitGroup, epochOrder, recordPosition, subtractRanges } from '../../core/training/sampler';
import { expectedSamples, groupInFlight, splitInFlight } from './group';
import { excludedByReportIn } from './outer-loss';
import { commitSpan, isCheckpointCommit } from '../../core/training/commit-schedule';
import { culpritOf } from './penalties';
import { smoothThroughput } from './shares';
import { recordUsageIn } from './utilization';
import type { CommitRecord, CoordinatorState, Transition } from './state';

export type ReportCheck =
  | { ok: true; rank: number }
  | { ok: false; code: ErrorCode; message: string; divergence?: { step: number; hashes: Record<string, string> } };

/**
 * Decide whether a (schema-valid) step report from `workerId` (the worker its socket was welcomed as)
 * is acceptable. Checks, in order: run, round, membership, rank, step (duplicate, stale, out of order
 * or past the commit point), sample count, hash agreement.
 */
export function checkReport(s: CoordinatorState, workerId: string, msg: StepReportMessage): ReportCheck {
  const rv = s.rendezvous;
  if (msg.runId !== s.runId)
    return { ok: false, code: 'wrong_run', message: `run ${msg.runId} is not the current run` };
  if (s.status === 'done') return { ok: false, code: 'job_done', message: 'the job is done' };
  if (s.status !== 'active' || rv.phase !== 'training' || msg.round !== rv.round) {
    return {
      ok: false,
      code: 'stale_round',
      message: `round ${msg.round} is not training (current round ${rv.round}, ${rv.phase})`,
    };
  }
  const p = rv.participants.find((q) => q.workerId === workerId);
  if (!p) return { ok: false, code: 'not_member', message: `worker ${workerId} is not in round ${rv.round}` };
  if (p.rank !== msg.rank)
    return { ok: false, code: 'forged_rank', message: `worker ${workerId} has rank ${p.rank}, not ${msg.rank}` };
  if (msg.step === p.lastStep)
    return { ok: false, code: 'duplicate_report', message: `step ${msg.step} already reported` };
  if (msg.step <= s.lastCommit.step)
    return { ok: false, code: 'stale_step', message: `step ${msg.step} is already committed` };
  const group = groupInFlight(s);
  const limit = group.lastStep;
  if (msg.step !== p.lastStep + 1 || msg.step > limit) {
    return {
      ok: false,
      code: 'wrong_step',
      message: `expected step ${p.lastStep + 1} (commit point ${limit}), got ${msg.step}`,
    };
  }
  const misplaced = misplacedExclusion(s, msg, limit);
  if (misplaced) return misplaced;
  const expected = expectedSamples(s, msg.step, p.slot, group);
  if (msg.samples !== expected)
    return {
      ok: false,
      code: 'bad_samples',
      message: `rank ${p.rank} has ${expected} samples in step ${msg.step}, reported ${msg.samples}`,
    };
  // Local sync mode: between outer steps every rank trains its own copy, so only the outer step's
  // (the commit point's) hash is agreed; inner steps carry NO_HASH and are not compared.
  if (s.job.sync.mode === 'local' && msg.step !== limit) return { ok: true, rank: p.rank };
  const others = s.pending[msg.step] ?? {};
  const sketch = sketchProblem(s.job, rv.participants.length, msg, Object.values(others));
  if (sketch && !sketch.disagrees)
    return { ok: false, code: 'bad_sketch', message: `step ${msg.step}: ${sketch.message}` };
  // Sketches of the same bytes that differ between ranks are a divergence, as differing hashes are.
  if (sketch?.disagrees || Object.values(others).some((r) => r.hash !== msg.hash)) {
    const hashes: Record<string, string> = { [msg.rank]: msg.hash };
    for (const [rank, r] of Object.entries(others)) hashes[rank] = r.hash;
    return {
      ok: false,
      code: 'hash_mismatch',
      message: `step ${msg.step}: ${sketch?.message ?? 'ranks disagree on the parameter hash'}`,
      divergence: { step: msg.step, hashes },
    };
  }
  return { ok: true, rank: p.rank };
}

/** A report naming ranks an outer sum left out (outer-loss.ts) anywhere but at a local-mode commit point. */
function misplacedExclusion(s: CoordinatorState, msg: StepReportMessage, limit: number): ReportCheck | null {
  if (!msg.excluded?.length || (s.job.sync.mode === 'local' && msg.step === limit)) return null;
  const message = `step ${msg.step}: only a local-mode commit point may name ranks its outer sum left out`;
  return { ok: false, code: 'bad_message', message };
}

/** Record an accepted report; commit when every rank reported the commit point. */
function acceptReportIn(ctx: Ctx, workerId: string, msg: StepReportMessage): void {
  const s = ctx.s;
  if (s.job.sync.mode === 'local' && msg.step === groupInFlight(s).lastStep) {
    const problem = excludedByReportIn(ctx, msg.excluded ?? [], workerId);
    if (problem) {
      // The survivors did not agree on who is out: they take the outer step again in a carried round.
      log(ctx, 'warn', 'outer_loss_mismatch', { workerId, step: msg.step, problem });
      const namedBy = s.rendezvous.outerLoss?.namedBy;
      const culprits = namedBy !== undefined ? [culpritOf(s, namedBy)] : [];
      closeRoundIn(ctx, 'failure', true, true, undefined, culprits, s.rendezvous.outerLoss?.workers ?? []);
      afterCloseIn(ctx);
      return;
    }
  }
  const p = s.rendezvous.participants.find((q) => q.workerId === workerId)!;
  s.pending[msg.step] = {
    ...s.pending[msg.step],
    [p.slot]: {
      hash: msg.hash,
      lossSum: msg.lossSum,
      samples: msg.samples,
      computeMs: msg.computeMs,
      ...(msg.sketch ? { sketch: msg.sketch } : {}),
    },
  };
  p.lastStep = msg.step;
  const worker = mutWorker(ctx, workerId);
  worker.lastSeen = ctx.now;
  // Throughput from time the coordinator measured (from when the step could start, or the rank's
  // previous report, to this report), never from the tab's own `computeMs` claim. Not while a group is
  // carried on: its first reports are re-sent ones, computed before the round began.
  const since = Math.max(s.rendezvous.stepStartedAt ?? ctx.now, p.lastReportAt ?? 0);
  if (!s.rendezvous.carry) worker.throughput = smoothThroughput(worker.throughput, msg.samples, ctx.now - since);
  recordUsageIn(ctx, worker, msg, p.lastReportAt ?? since);
  p.lastReportAt = ctx.now;
  const point = groupInFlight(s).lastStep;
  if (!s.rendezvous.participants.every((q) => q.lastStep >= point)) return;
  // A step whose sums do not add up is not committed (verification.ts handles the failure).
  if (ringChecksPassIn(ctx, point)) commitIn(ctx, point);
}

/**
 * Commit the group in flight (every rank reported its commit point `point` with agreeing hashes): the
 * survivors' slices are processed, a carried group's lost slices become holes.
 */
function commitIn(ctx: Ctx, point: number): void {
  const s = ctx.s;
  const rv = s.rendezvous;
  const group = groupInFlight(s);
  if (group.lastStep !== point) throw new Error(`commit: the group in flight ends at ${group.lastStep}, not ${point}`);
  const split = splitInFlight(s);
  const lost = split.lost.length > 0 ? slotsRanges(group, split.shares, split.lost) : [];
  const hash = Object.values(s.pending[point])[0].hash;
  const lostMembers = !!rv.outerLoss;
  rv.outerLoss = null;
  const uploader = afterCommitIn(ctx, point, hash, s.lastCommit.hash);
  s.record = commitGroup(s.record, epochOrder(s.job.seed, group.epoch, s.datasetSize), group, lost);
  const after = recordPosition(s.record);
  s.lastCommit = {
    step: point,
    epoch: after.epoch,
    cursor: after.cursor,
    holes: [...after.holes],
    firstStep: group.firstStep,
    hash,
    members: rv.participants.map((p) => p.workerId),
  };
  rv.stepStartedAt = ctx.now;
  // The next group is this round's own: every slot is its rank again.
  rv.carry = null;
  for (const p of rv.participants) p.slot = p.rank;
  // Suspects of a ring failure long ago start no intersection with a new one.
  if (s.ringSuspects && point - (s.ringSuspectsAt ?? 0) > SUSPICION_STEPS) s.ringSuspects = null;
  const commit = commitRecordOf(s, group, lost, hash);
  for (const step of Object.keys(s.pending)) if (Number(step) <= point) delete s.pending[step];
  rv.roundCommits += 1;
  for (const p of rv.participants) mutWorker(ctx, p.workerId).holds = [{ step: point, hash }];
  const span = commitSpan(group, after, s.job.epochs);
  if (span.endsJob) s.status = 'done';
  ctx.out.push({ kind: 'record_commit', commit });
  persist(ctx);
  announceCommitIn(ctx, commit, uploader);
  if (isCheckpointCommit(span, s.job.checkpointEvery)) requestCheckpointIn(ctx, rv.participants[0].workerId);
  if (span.endsJob) {
    finishJobIn(ctx, point);
    return;
  }
  if (span.endsEpoch) log(ctx, 'info', 'epoch_end', { epoch: group.epoch, step: point });
  admitAtBoundaryIn(ctx, lostMembers);
}

/** The commit log's row of `group` committed less the `lost` positions (read before `pending` is cleared). */
function commitRecordOf(s: CoordinatorState, group: GroupPlan, lost: PositionRange[], hash: string): CommitRecord {
  const rv = s.rendezvous;
  const committed = subtractRanges(mergeRanges(group.steps.flatMap((step) => step.ranges)), lost);
  const count = rangesCount(committed);
  const cursorStart = group.start.cursor;
  const contiguous = committed.length === 1 && committed[0][0] === cursorStart;
  let lossSum = 0;
  for (let step = group.firstStep; step <= group.lastStep; step++)
    for (const r of Object.values(s.pending[step] ?? {})) lossSum += r.lossSum;
  return {
    step: group.lastStep,
    firstStep: group.firstStep,
    epoch: group.epoch,
    cursorStart,
    count,
    ...(contiguous || count === 0 ? {} : { ranges: committed }),
    ...(lost.length > 0 ? { skipped: lost } : {}),
    hash,
    round: rv.round,
    world: rv.participants.map(({ workerId, rank, share }) => ({ workerId, rank, share })),
    loss: count > 0 ? lossSum / count : 0,
  };
}

/** Metrics, the `committed` message to every rank, and the debug log line of one commit. */
function announceCommitIn(ctx: Ctx, commit: CommitRecord, uploader: string | null): void {
  const rv = ctx.s.rendezvous;
  const after = ctx.s.lastCommit;
  const { step: point, firstStep, count, hash } = commit;
  metric(ctx, 'tabswarm_commits_total');
  metric(ctx, 'tabswarm_steps_total', point - firstStep + 1);
  metric(ctx, 'tabswarm_samples_total', count);
  metric(ctx, 'tabswarm_loss', commit.loss);
  for (const p of rv.participants) {
    sendWorker(ctx, p.workerId, {
      type: 'committed',
      round: rv.round,
      step: point,
      epoch: after.epoch,
      cursor: after.cursor,
      ...(after.holes && after.holes.length > 0 ? { holes: after.holes } : {}),
      hash,
      ...(p.workerId === uploader ? { upload: uploadField(ctx.s, p.workerId) } : {}),
    });
  }
  log(ctx, 'debug', 'commit', {
    step: point,
    firstStep,
    epoch: commit.epoch,
    cursorStart: commit.cursorStart,
    count,
    ...(commit.skipped ? { skipped: commit.skipped } : {}),
    hash,
    round: rv.round,
    loss: commit.loss,
  });
}

/** The last step committed: tell every worker and dissolve the round. */
function finishJobIn(ctx: Ctx, point: number): void {
  const s = ctx.s;
  const rv = s.rendezvous;
  log(ctx, 'info', 'job_done', { step: point, epochs: s.job.epochs, restarts: s.restarts });
  for (const w of Object.values(s.workers)) sendWorker(ctx, w.workerId, { type: 'done', step: point });
  // No round any more: later departures are no failures and nobody is waiting for anything.
  rv.closedRound = { round: rv.round, members: rv.participants.map((p) => p.workerId) };
  rv.participants = [];
  rv.waitList = [];
  rv.phase = 'gathering';
  metric(ctx, 'tabswarm_world_size', 0);
}

/**
 * Divergence: reject the report and close the round with restore:true; a failure (counts a restart),
 * charged to the rank whose report disagreed with those already in (it cannot know which is right).
 */
function divergeIn(ctx: Ctx, divergence: { step: number; hashes: Record<string, string> }, workerId: string): void {
  metric(ctx, 'tabswarm_failures_total');
  log(ctx, 'error', 'divergence', { round: ctx.s.rendezvous.round, ...divergence, charged: workerId });
  closeRoundIn(ctx, 'divergence', true, true, undefined, [culpritOf(ctx.s, workerId)]);
  afterCloseIn(ctx);
}

/**
 * Apply a step report that arrived on `conn`, welcomed as `workerId`. Rejections answer `error` and
 * leave the state untouched; a hash mismatch also closes the round (divergence).
 */
export function reportStep(
  state: CoordinatorState,
  now: number,
  conn: string,
  workerId: string,
  msg: StepReportMessage,
): Transition {
  const check = checkReport(state, workerId, msg);
  if (!check.ok) {
    const rejected = reject(state, conn, check.code, check.message, {
      workerId,
      round: msg.round,
      step: msg.step,
      rank: msg.rank,
    });
    if (!check.divergence) return rejected;
    const ctx = begin(state, now);
    ctx.out.push(...rejected.actions);
    divergeIn(ctx, check.divergence, workerId);
    return finish(ctx);
  }
  const ctx = begin(state, now);
  acceptReportIn(ctx, workerId, msg);
  return finish(ctx);
}
