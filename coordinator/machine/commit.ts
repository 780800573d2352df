/**
 * The commit rule: a step commits only when every rank of the current round reported it with the same
 * parameter hash (in local sync mode: the same committed-state hash at the outer step, the commit point). Steps between commit points (`isCommitPoint`) are committed together when the commit
 * point is reported by all. Anything else is rejected with a reason and leaves the state untouched,
 * except a hash mismatch between ranks: that is divergence, and the round closes with restore:true.
 */
import { begin, finish, log, metric, mutWorker, own, persist, reject, sendWorker, type Ctx } from './context';
import type { StepReportMessage } from '../../core/protocol/tab-messages';
import type { ErrorCode } from '../../core/protocol/coordinator-messages';
import { requestCheckpointIn } from './checkpoints';
import { admitAtBoundaryIn, afterCloseIn, closeRoundIn } from './round-close';
import { ringChecksPassIn, SUSPICION_STEPS, sketchProblem } from './verification';
import { drawChecksIn, gateOpen, uploadFieldFor } from './checks';
import {
  assignStep,
  commitStep,
  epochOrder,
  isCheckpointPoint,
  nextCommitPoint,
  planOf,
  positionAfter,
  stepPosition,
  totalSteps,
} from '../../core/training/sampler';
import { culpritOf } from './penalties';
import { smoothThroughput } from './shares';
import { recordUsageIn } from './utilization';
import type { CommitRecord, CoordinatorState, MomentClaim, Transition } from './state';

export type ReportCheck =
  | { ok: true; rank: number }
  | { ok: false; code: ErrorCode; message: string; divergence?: { step: number; hashes: Record<string, string> } };

/** Samples `rank` must have processed in `step` under the current round's shares. */
export function expectedSamples(s: CoordinatorState, step: number, rank: number): number {
  const { cursor, count } = stepPosition(step, planOf(s));
  const slice = assignStep(
    cursor,
    count,
    s.rendezvous.participants.map((p) => p.share),
  )[rank];
  return slice ? slice.count : -1;
}

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
  const limit = nextCommitPoint(s.lastCommit.step, planOf(s));
  if (msg.step !== p.lastStep + 1 || msg.step > limit) {
    return {
      ok: false,
      code: 'wrong_step',
      message: `expected step ${p.lastStep + 1} (commit point ${limit}), got ${msg.step}`,
    };
  }
  const expected = expectedSamples(s, msg.step, p.rank);
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

/** Record an accepted report; commit when every rank reported the commit point. */
function acceptReportIn(ctx: Ctx, workerId: string, msg: StepReportMessage): void {
  const s = ctx.s;
  const p = s.rendezvous.participants.find((q) => q.workerId === workerId)!;
  s.pending[msg.step] = {
    ...s.pending[msg.step],
    [msg.rank]: {
      hash: msg.hash,
      lossSum: msg.lossSum,
      samples: msg.samples,
      computeMs: msg.computeMs,
      ...(msg.sketch ? { sketch: msg.sketch } : {}),
      ...(msg.innerHash ? { innerHash: msg.innerHash } : {}),
      ...(msg.innerT !== undefined ? { innerT: msg.innerT } : {}),
    },
  };
  p.lastStep = msg.step;
  const worker = mutWorker(ctx, workerId);
  worker.lastSeen = ctx.now;
  // Throughput from time the coordinator measured (from when the step could start, or the rank's
  // previous report, to this report), never from the tab's own `computeMs` claim.
  const since = Math.max(s.rendezvous.stepStartedAt ?? ctx.now, p.lastReportAt ?? 0);
  worker.throughput = smoothThroughput(worker.throughput, msg.samples, ctx.now - since);
  recordUsageIn(ctx, worker, msg, p.lastReportAt ?? since);
  p.lastReportAt = ctx.now;
  commitReadyIn(ctx);
}

/**
 * Commit the next commit point if every rank reported it, its ring checks pass and no check holds it
 * (checks.ts `gateOpen`: a held commit is made when the check resolves: check-events.ts calls again).
 */
export function commitReadyIn(ctx: Ctx): void {
  const s = ctx.s;
  if (s.status !== 'active' || s.rendezvous.phase !== 'training') return;
  const point = nextCommitPoint(s.lastCommit.step, planOf(s));
  if (point <= s.lastCommit.step || !s.rendezvous.participants.every((q) => q.lastStep >= point)) return;
  if (!gateOpen(s)) {
    metric(ctx, 'tabswarm_commits_held_total');
    log(ctx, 'info', 'commit_held', { step: point, checks: (s.checks ?? []).map((c) => c.step) });
    return;
  }
  // A step whose sums do not add up is not committed (verification.ts handles the failure).
  if (ringChecksPassIn(ctx, point)) commitIn(ctx, point);
}

/** After the last check resolved: a job whose last step is committed is done. */
export function finishIfCheckedIn(ctx: Ctx): void {
  const s = ctx.s;
  if (s.status !== 'active' || (s.checks ?? []).length > 0) return;
  if (s.lastCommit.step !== totalSteps(planOf(s))) return;
  s.status = 'done';
  persist(ctx);
  finishJobIn(ctx, s.lastCommit.step);
}

/** Commit steps lastCommit.step+1 .. point (all reported by all ranks with agreeing hashes). */
function commitIn(ctx: Ctx, point: number): void {
  const s = ctx.s;
  const rv = s.rendezvous;
  const plan = planOf(s);
  const firstStep = s.lastCommit.step + 1;
  const start = stepPosition(firstStep, plan);
  if (s.record.epoch !== start.epoch || s.record.cursor !== start.cursor) {
    throw new Error(
      `commit: record at ${s.record.epoch}/${s.record.cursor}, step ${firstStep} starts at ${start.epoch}/${start.cursor}`,
    );
  }
  const { count, lossSum } = reportedTotals(s, firstStep, point);
  const hash = Object.values(s.pending[point])[0].hash;
  noteContributionsIn(ctx, point);
  // This commit's number first: a check drawn at it counts the commits after it (checks.ts `gateOpen`).
  s.commitSeq = (s.commitSeq ?? 0) + 1;
  drawChecksIn(ctx, point, firstStep, hash, s.lastCommit.hash);
  noteMomentClaimsIn(ctx, point);
  s.record = commitStep(s.record, epochOrder(s.job.seed, start.epoch, s.datasetSize), count);
  const after = positionAfter(point, plan);
  s.lastCommit = {
    step: point,
    epoch: after.epoch,
    cursor: after.cursor,
    hash,
    members: rv.participants.map((p) => p.workerId),
  };
  rv.stepStartedAt = ctx.now;
  // Suspects of a ring failure long ago start no intersection with a new one.
  if (s.ringSuspects && point - (s.ringSuspectsAt ?? 0) > SUSPICION_STEPS) s.ringSuspects = null;
  for (const step of Object.keys(s.pending)) if (Number(step) <= point) delete s.pending[step];
  rv.roundCommits += 1;
  for (const p of rv.participants) mutWorker(ctx, p.workerId).holds = [{ step: point, hash }];
  // The job is done with its last commit only once no check is open (else when the last one resolves).
  const finished = point === totalSteps(plan) && (s.checks ?? []).length === 0;
  if (finished) s.status = 'done';
  const commit: CommitRecord = {
    step: point,
    firstStep,
    epoch: start.epoch,
    cursorStart: start.cursor,
    count,
    hash,
    round: rv.round,
    world: rv.participants.map(({ workerId, rank, share }) => ({ workerId, rank, share })),
    loss: count > 0 ? lossSum / count : 0,
  };
  ctx.out.push({ kind: 'record_commit', commit });
  persist(ctx);
  announceCommitIn(ctx, commit, after);
  const epochEnded = after.cursor === 0;
  if (isCheckpointPoint(point, { ...plan, checkpointEvery: s.job.checkpointEvery }))
    requestCheckpointIn(ctx, rv.participants[0].workerId);
  if (finished) {
    finishJobIn(ctx, point);
    return;
  }
  if (epochEnded) log(ctx, 'info', 'epoch_end', { epoch: start.epoch, step: point });
  admitAtBoundaryIn(ctx);
}

/** The first committed step each member contributed to since the last rollback (a cheat's rollback target). */
function noteContributionsIn(ctx: Ctx, point: number): void {
  const s = ctx.s;
  s.contributions = { ...(s.contributions ?? {}) };
  for (const p of s.rendezvous.participants) if (!own(s.contributions, p.workerId)) s.contributions[p.workerId] = point;
}

/** Local mode: each member's claim of its end-of-step moments, which the next checks' uploads must continue. */
function noteMomentClaimsIn(ctx: Ctx, point: number): void {
  const s = ctx.s;
  if (!s.job.verify || s.job.sync.mode !== 'local') return;
  const byWorker: Record<string, MomentClaim> = {};
  for (const p of s.rendezvous.participants) {
    const report = s.pending[point]?.[p.rank];
    const moments = report?.sketch?.moments;
    if (moments && report.innerT !== undefined) byWorker[p.workerId] = { moments, t: report.innerT };
  }
  s.momentClaims = { step: point, world: s.rendezvous.participants.length, byWorker };
}

/** Samples in steps firstStep .. point under the plan, and the loss sum all ranks reported for them. */
function reportedTotals(s: CoordinatorState, firstStep: number, point: number): { count: number; lossSum: number } {
  const plan = planOf(s);
  let count = 0;
  let lossSum = 0;
  for (let step = firstStep; step <= point; step++) {
    count += stepPosition(step, plan).count;
    for (const r of Object.values(s.pending[step] ?? {})) lossSum += r.lossSum;
  }
  return { count, lossSum };
}

/** Metrics, the `committed` message to every rank, and the debug log line of one commit. */
function announceCommitIn(ctx: Ctx, commit: CommitRecord, after: { epoch: number; cursor: number }): void {
  const rv = ctx.s.rendezvous;
  const { step: point, firstStep, count, hash } = commit;
  metric(ctx, 'tabswarm_commits_total');
  metric(ctx, 'tabswarm_steps_total', point - firstStep + 1);
  metric(ctx, 'tabswarm_samples_total', count);
  metric(ctx, 'tabswarm_loss', commit.loss);
  for (const p of rv.participants) {
    const upload = uploadFieldFor(ctx.s, p.workerId, point);
    sendWorker(ctx, p.workerId, {
      type: 'committed',
      round: rv.round,
      step: point,
      epoch: after.epoch,
      cursor: after.cursor,
      hash,
      ...(upload ? { upload } : {}),
    });
  }
  log(ctx, 'debug', 'commit', {
    step: point,
    firstStep,
    epoch: commit.epoch,
    cursorStart: commit.cursorStart,
    count,
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
