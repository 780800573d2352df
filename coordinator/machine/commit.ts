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
 *
 * An overlapped job (core/training/overlap.ts) reports every step as an inner one and the outer step
 * apart (`outer_report`, once the rank's allreduce finished): the group commits when every rank reported
 * its steps and its outer step with the same hash. Meanwhile the ranks report the inner steps of the
 * group after it, which commits next.
 */
import {
  begin,
  finish,
  log,
  metric,
  mutParticipant,
  mutWorker,
  persist,
  reject,
  sendWorker,
  sendWorkers,
  type Ctx,
} from './context';
import type { OuterReportMessage, StepReportMessage } from '../../core/protocol/tab-messages';
import type { ErrorCode } from '../../core/protocol/coordinator-messages';
import { requestCheckpointIn } from './checkpoints';
import { admitAtBoundaryIn, afterCloseIn, boundaryReason, closeRoundIn, finishJobIn } from './round-close';
import { ringChecksPassIn, SUSPICION_STEPS, sketchProblem } from './verification';
import { afterCommitIn, gateOpen, uploadFieldFor } from './checks';
import {
  mergeRanges,
  planOf,
  rangesCount,
  slotsRanges,
  type GroupPlan,
  type PositionRange,
} from '../../core/training/groups';
import { overlapsNext, overlapsOuterSteps, successorPlan } from '../../core/training/overlap';
import { commitGroup, epochOrder, recordPosition, subtractRanges } from '../../core/training/sampler';
import { allCommitted, expectedSamples, groupInFlight, groupsInFlight, overlapContext, splitInFlight } from './group';
import { excludedByReportIn, misplacedExclusion, namesOuterLoss } from './outer-loss';
import { commitSpan, isCheckpointCommit } from '../../core/training/commit-schedule';
import { culpritOf } from './penalties';
import { measureStep } from './shares';
import { recordUsageIn } from './utilization';
import type { CommitRecord, CoordinatorState, Participant, PendingReport, Transition } from './state';

export type ReportCheck =
  | { ok: true; rank: number }
  | { ok: false; code: ErrorCode; message: string; divergence?: { step: number; hashes: Record<string, string> } };

/** The member of the training round a report comes from (run, round, membership, rank checked), or why not. */
function reporter(
  s: CoordinatorState,
  workerId: string,
  msg: { runId: string; round: number; rank: number },
): { ok: true; p: Participant } | Extract<ReportCheck, { ok: false }> {
  const rv = s.rendezvous;
  if (msg.runId !== s.runId)
    return { ok: false, code: 'wrong_run', message: `run ${msg.runId} is not the current run` };
  if (s.status === 'done' || allCommitted(s)) return { ok: false, code: 'job_done', message: 'the job is done' };
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
  return { ok: true, p };
}

/**
 * Decide whether a (schema-valid) step report from `workerId` (the worker its socket was welcomed as)
 * is acceptable. Checks, in order: run, round, membership, rank, step (duplicate, stale, out of order
 * or past the commit point; in an overlapped job past the commit point of the group after it), sample
 * count, hash agreement.
 */
export function checkReport(s: CoordinatorState, workerId: string, msg: StepReportMessage): ReportCheck {
  const who = reporter(s, workerId, msg);
  if (!who.ok) return who;
  const { p } = who;
  if (msg.step === p.lastStep)
    return { ok: false, code: 'duplicate_report', message: `step ${msg.step} already reported` };
  if (msg.step <= s.lastCommit.step)
    return { ok: false, code: 'stale_step', message: `step ${msg.step} is already committed` };
  const groups = groupsInFlight(s);
  const limit = groups[groups.length - 1].lastStep;
  if (msg.step !== p.lastStep + 1 || msg.step > limit) {
    return {
      ok: false,
      code: 'wrong_step',
      message: `expected step ${p.lastStep + 1} (last step in flight ${limit}), got ${msg.step}`,
    };
  }
  const misplaced = misplacedExclusion(s, msg);
  if (misplaced) return { ok: false, code: 'bad_message', message: misplaced };
  const group = groups.find((g) => msg.step <= g.lastStep)!;
  const expected = expectedSamples(s, msg.step, p.slot, group);
  if (msg.samples !== expected)
    return {
      ok: false,
      code: 'bad_samples',
      message: `rank ${p.rank} has ${expected} samples in step ${msg.step}, reported ${msg.samples}`,
    };
  // Local sync mode: between outer steps every rank trains its own copy, so only the outer step's
  // (the commit point's) hash is agreed; inner steps carry NO_HASH and are not compared. An overlapped
  // job's commit point is an inner step too: its outer step comes apart (`checkOuterReport`).
  if (s.job.sync.mode === 'local' && (msg.step !== group.lastStep || overlapsOuterSteps(s.job)))
    return { ok: true, rank: p.rank };
  const others = s.pending[msg.step] ?? {};
  // The reports already in agree with each other (a disagreement closed the round), so the first one
  // stands for all: comparing with every one made each report O(world), each step O(world²).
  const first = firstReport(others, s.rendezvous.carry?.shares.length ?? s.rendezvous.participants.length);
  const sketch = sketchProblem(s.job, s.rendezvous.participants.length, msg, first ? [first] : []);
  if (sketch && !sketch.disagrees)
    return { ok: false, code: 'bad_sketch', message: `step ${msg.step}: ${sketch.message}` };
  // Sketches of the same bytes that differ between ranks are a divergence, as differing hashes are.
  if (sketch?.disagrees || (first && first.hash !== msg.hash)) {
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

/**
 * The report of the lowest slot in `reports` (by slot, not `for…in`: enumerating a record of 256 is
 * O(world)). `slots`: the slots of the split in flight (a carried group's keep the planning round's).
 */
function firstReport(reports: Record<string, PendingReport>, slots: number): PendingReport | undefined {
  for (let slot = 0; slot < slots; slot++) if (Object.hasOwn(reports, slot)) return reports[slot];
  return undefined;
}

/** Record an accepted report; commit when every rank reported the commit point. */
function acceptReportIn(ctx: Ctx, workerId: string, msg: StepReportMessage): void {
  const s = ctx.s;
  if (namesOuterLoss(s, msg.step)) {
    const problem = excludedByReportIn(ctx, msg.excluded ?? [], workerId);
    if (problem) {
      // The survivors did not agree on who is out: they take the outer step again in a carried round.
      log(ctx, 'warn', 'outer_loss_mismatch', { workerId, step: msg.step, problem });
      const namedBy = s.rendezvous.outerLoss?.namedBy;
      const culprits = namedBy !== undefined ? [culpritOf(s, namedBy)] : [];
      closeRoundIn(ctx, 'failure', true, true, { culprits, lost: s.rendezvous.outerLoss?.workers ?? [] });
      afterCloseIn(ctx);
      return;
    }
  }
  const p = mutParticipant(ctx, workerId)!;
  s.pending[msg.step] = {
    ...s.pending[msg.step],
    [p.slot]: {
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
  // previous report, to this report), never from the tab's own `computeMs` claim. Not while a group is
  // carried on: its first reports are re-sent ones, computed before the round began. Not the first step
  // of a group in an overlapped job: the time before it holds the outer step's boundary (hang.ts).
  const since = Math.max(s.rendezvous.stepStartedAt ?? ctx.now, p.lastReportAt ?? 0);
  const boundary = overlapsOuterSteps(s.job) && groupsInFlight(s).some((g) => g.firstStep === msg.step);
  if (!s.rendezvous.carry && !boundary) measureStep(worker, msg.samples, ctx.now - since);
  recordUsageIn(ctx, worker, msg, p.lastReportAt ?? since);
  p.lastReportAt = ctx.now;
  commitReadyIn(ctx);
}

/**
 * Commit the group in flight once every rank reported its commit point (overlapped: and its outer step)
 * and no check holds it (checks.ts `gateOpen`; check-events.ts calls again when one resolves). A step
 * whose sums do not add up is not committed (verification.ts handles the failure).
 */
export function commitReadyIn(ctx: Ctx): void {
  const s = ctx.s;
  if (s.status !== 'active' || s.rendezvous.phase !== 'training' || allCommitted(s)) return;
  const point = groupInFlight(s).lastStep;
  const members = s.rendezvous.participants;
  if (!members.every((q) => q.lastStep >= point)) return;
  if (overlapsOuterSteps(s.job) && !members.every((q) => s.pending[point]?.[q.slot]?.outer !== undefined)) return;
  if (!gateOpen(s)) {
    metric(ctx, 'tabswarm_commits_held_total');
    log(ctx, 'info', 'commit_held', { step: point, checks: (s.checks ?? []).map((c) => c.step) });
    return;
  }
  if (ringChecksPassIn(ctx, point)) commitIn(ctx, point);
}

/** After the last check resolved: a job whose last group is committed is done. */
export function finishIfCheckedIn(ctx: Ctx): void {
  const s = ctx.s;
  if (s.status !== 'active' || (s.checks ?? []).length > 0) return;
  if (!allCommitted(s)) return;
  s.status = 'done';
  persist(ctx);
  finishJobIn(ctx, s.lastCommit.step);
}

/**
 * Decide whether an outer report (an overlapped job's outer step, `outer_report`) from `workerId` is
 * acceptable: from a member of the training round, for the commit point of the group in flight, after
 * the member's report of that step, once, and with the hash the others reported (else divergence).
 */
export function checkOuterReport(s: CoordinatorState, workerId: string, msg: OuterReportMessage): ReportCheck {
  const who = reporter(s, workerId, msg);
  if (!who.ok) return who;
  const { p } = who;
  if (!overlapsOuterSteps(s.job))
    return { ok: false, code: 'bad_message', message: 'this job does not overlap outer steps: no outer_report' };
  if (msg.step <= s.lastCommit.step)
    return { ok: false, code: 'stale_step', message: `step ${msg.step} is already committed` };
  const point = groupInFlight(s).lastStep;
  if (msg.step !== point || p.lastStep < point)
    return {
      ok: false,
      code: 'wrong_step',
      message: `the outer step in flight ends at step ${point} (reported through ${p.lastStep}), got ${msg.step}`,
    };
  const others = s.pending[point] ?? {};
  if (!others[p.slot])
    return {
      ok: false,
      code: 'wrong_step',
      message: `no report of step ${point} from this rank in round ${msg.round}`,
    };
  if (others[p.slot].outer !== undefined)
    return { ok: false, code: 'duplicate_report', message: `the outer step of ${point} already reported` };
  const agreed = Object.entries(others).filter(([, r]) => r.outer !== undefined);
  if (agreed.some(([, r]) => r.outer !== msg.hash)) {
    const hashes: Record<string, string> = { [msg.rank]: msg.hash };
    for (const [slot, r] of agreed) hashes[slot] = r.outer!;
    return {
      ok: false,
      code: 'hash_mismatch',
      message: `step ${point}: ranks disagree on the committed state after the outer step`,
      divergence: { step: point, hashes },
    };
  }
  return { ok: true, rank: p.rank };
}

/** Record an accepted outer report (its bytes in the usage); commit when it completes the group. */
function acceptOuterIn(ctx: Ctx, workerId: string, msg: OuterReportMessage): void {
  const s = ctx.s;
  const p = s.rendezvous.participants.find((q) => q.workerId === workerId)!;
  const reports = s.pending[msg.step];
  s.pending[msg.step] = { ...reports, [p.slot]: { ...reports[p.slot], outer: msg.hash } };
  const worker = mutWorker(ctx, workerId);
  worker.lastSeen = ctx.now;
  // Bytes only: the time of the outer step is inside the inner steps' reports.
  recordUsageIn(ctx, worker, { samples: 0, computeMs: 0, wireBytes: msg.wireBytes }, ctx.now);
  commitReadyIn(ctx);
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
  // Read before the carry and the drain change: whether the next group's inner steps already run.
  const overlapped = overlapsNext(s.job, group, planOf(s), overlapContext(s, group));
  const split = splitInFlight(s);
  const lost = split.lost.length > 0 ? slotsRanges(group, split.shares, split.lost) : [];
  const reports = Object.values(s.pending[point]);
  const hash = overlapsOuterSteps(s.job) ? reports[0].outer! : reports[0].hash;
  const lostMembers = !!rv.outerLoss;
  rv.outerLoss = null;
  // Before the record moves: the checks keep where the group started.
  afterCommitIn(ctx, group, hash, s.lastCommit.hash);
  const order = epochOrder(s.job.seed, group.epoch, s.datasetSize);
  s.record = commitGroup(s.record, order, group, lost, rv.carry?.deferred ?? []);
  const after = recordPosition(s.record);
  s.lastCommit = {
    step: point,
    epoch: after.epoch,
    cursor: after.cursor,
    holes: [...after.holes],
    firstStep: group.firstStep,
    hash,
    members: rv.participants.map((p) => p.workerId),
    round: rv.round,
  };
  // An overlapped group's successor runs already: its time does not start now.
  if (!overlapped) rv.stepStartedAt = ctx.now;
  const drain = nextGroupAfterCommitIn(ctx, group, lost, overlapped);
  // Suspects of a ring failure long ago start no intersection with a new one.
  if (s.ringSuspects && point - (s.ringSuspectsAt ?? 0) > SUSPICION_STEPS) s.ringSuspects = null;
  const commit = commitRecordOf(s, group, lost, hash);
  for (const step of Object.keys(s.pending)) if (Number(step) <= point) delete s.pending[step];
  rv.roundCommits += 1;
  for (const p of rv.participants) mutWorker(ctx, p.workerId).holds = [{ step: point, hash }];
  const span = commitSpan(group, after, s.job.epochs);
  // Done with its last commit only once no check is open (else when the last one resolves).
  const finished = span.endsJob && (s.checks ?? []).length === 0;
  if (finished) s.status = 'done';
  ctx.out.push({ kind: 'record_commit', commit });
  persist(ctx);
  announceCommitIn(ctx, commit, drain);
  if (isCheckpointCommit(span, s.job.checkpointEvery)) requestCheckpointIn(ctx, rv.participants[0].workerId);
  if (finished) {
    finishJobIn(ctx, point);
    return;
  }
  if (span.endsEpoch) log(ctx, 'info', 'epoch_end', { epoch: group.epoch, step: point });
  // An overlapped group's successor is in flight: the round changes at a later commit (the drain). After the
  // job's last group nothing is left to train while its checks are open (a rollback re-forms the round itself).
  if (!overlapped && !span.endsJob) admitAtBoundaryIn(ctx, lostMembers);
}

/**
 * Who computes the group after `group`, just committed (less `lost`): this round's own split again,
 * unless the round carries the successor on too (an overlapped job's carry: the same split, with
 * `lost` as the holes it was planned without). Returns whether the successor's outer step must be
 * synchronous because the round should change (`committed.drain`: a join, a shrink, a rebalance),
 * which an overlapped group's successor, already running, can only do at its own commit.
 */
function nextGroupAfterCommitIn(ctx: Ctx, group: GroupPlan, lost: PositionRange[], overlapped: boolean): boolean {
  const s = ctx.s;
  const rv = s.rendezvous;
  if (rv.drainAt === group.lastStep) rv.drainAt = null;
  if (rv.carry && overlapped) {
    rv.carry = { ...rv.carry, deferred: lost };
    return false;
  }
  rv.carry = null;
  // Replaced, not edited: the participants may be the input state's (context.ts `cloneState`).
  if (rv.participants.some((p) => p.slot !== p.rank))
    rv.participants = rv.participants.map((p) => (p.slot === p.rank ? p : { ...p, slot: p.rank }));
  if (!overlapped || boundaryReason(s) === null) return false;
  rv.drainAt = successorPlan(group, planOf(s)).lastStep;
  return true;
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

/** Metrics, the `committed` message to every rank (with `drain`: see `nextGroupAfterCommitIn`), and the debug log line of one commit. */
function announceCommitIn(ctx: Ctx, commit: CommitRecord, drain: boolean): void {
  const rv = ctx.s.rendezvous;
  const after = ctx.s.lastCommit;
  const { step: point, firstStep, count, hash } = commit;
  metric(ctx, 'tabswarm_commits_total');
  metric(ctx, 'tabswarm_steps_total', point - firstStep + 1);
  metric(ctx, 'tabswarm_samples_total', count);
  metric(ctx, 'tabswarm_loss', commit.loss);
  const committed = {
    type: 'committed',
    round: rv.round,
    step: point,
    epoch: after.epoch,
    cursor: after.cursor,
    ...(after.holes && after.holes.length > 0 ? { holes: after.holes } : {}),
    hash,
    ...(drain ? { drain: true as const } : {}),
  } as const;
  // One message object for every rank but the checks' uploaders (serialised once: context.ts `sendWorkers`).
  let rest: string[] = [];
  for (const p of rv.participants) {
    const upload = uploadFieldFor(ctx.s, p.workerId, point);
    if (!upload) {
      rest.push(p.workerId);
      continue;
    }
    sendWorkers(ctx, rest, committed);
    rest = [];
    sendWorker(ctx, p.workerId, { ...committed, upload });
  }
  sendWorkers(ctx, rest, committed);
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
    ...(drain ? { drain } : {}),
  });
}

/**
 * Divergence: reject the report and close the round with restore:true; a failure (counts a restart),
 * charged to the rank whose report disagreed with those already in (it cannot know which is right).
 */
function divergeIn(ctx: Ctx, divergence: { step: number; hashes: Record<string, string> }, workerId: string): void {
  metric(ctx, 'tabswarm_failures_total');
  log(ctx, 'error', 'divergence', { round: ctx.s.rendezvous.round, ...divergence, charged: workerId });
  closeRoundIn(ctx, 'divergence', true, true, { culprits: [culpritOf(ctx.s, workerId)] });
  afterCloseIn(ctx);
}

/**
 * Apply an outer report (an overlapped job's outer step) that arrived on `conn`: rejections answer
 * `error` and change nothing; a hash that differs from the others' closes the round (divergence).
 */
export function reportOuter(
  state: CoordinatorState,
  now: number,
  conn: string,
  workerId: string,
  msg: OuterReportMessage,
): Transition {
  const check = checkOuterReport(state, workerId, msg);
  if (!check.ok) return rejectReport(state, now, conn, workerId, msg, check);
  const ctx = begin(state, now);
  acceptOuterIn(ctx, workerId, msg);
  return finish(ctx);
}

/** A rejected report: an `error` answer, and with a divergence the round closes. */
function rejectReport(
  state: CoordinatorState,
  now: number,
  conn: string,
  workerId: string,
  msg: { round: number; step: number; rank: number },
  check: Extract<ReportCheck, { ok: false }>,
): Transition {
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
  if (!check.ok) return rejectReport(state, now, conn, workerId, msg, check);
  const ctx = begin(state, now);
  acceptReportIn(ctx, workerId, msg);
  return finish(ctx);
}
