/**
 * How a round ends, after TorchElastic's rendezvous (rendezvous.ts forms the rounds):
 *
 * - Local sync mode: a member lost inside an outer step (goodbye, kick, socket drop, late heartbeat, no
 *   progress, a failure report blaming it, not ready in a carrying round) costs only its share: the
 *   round closes with a carry (`carryFor`), the next round is the survivors alone, and they finish the
 *   group without it (docs/local-steps.md). Otherwise, and in every-step mode, the rules below.
 * - A goodbye or a kick closes the round with restore:true (the in-flight step is undone): not a restart.
 * - A failure (socket closed without goodbye, heartbeat older than 3×heartbeatMs, a failure report, a
 *   hash divergence) closes it with restore:true and counts a restart, charged to its culprits
 *   (penalties.ts); past maxRestarts the job fails. A failure report that blames a peer waits for the
 *   peer's goodbye for a grace period before it counts (`blamedRestart`).
 * - Members not ready in time are dropped (a strike each, no restart); banned workers are disconnected.
 * - At a commit boundary the round closes with restore:false and reopens at once to admit newcomers,
 *   shrink the world or rebalance shares (`admitAtBoundaryIn`).
 * - Survivors are re-enrolled first, in old-rank order, so ranks stay dense and stable where possible.
 *
 * The `…In(ctx)` functions mutate a transition's private copy (see context.ts).
 */
import { deleteWorker, log, metric, persist, sendConn, putConnection, sendWorkers, type Ctx } from './context';
import { CloseCode, type CloseReason } from '../../core/protocol/coordinator-messages';
import { holdsState, requestCheckpointIn } from './checkpoints';
import { carryFor } from './carry';
import { deferLossIn } from './outer-loss';
import { chargeIn, bannedUntil, culpritOf, refuseConnIn, type Culprit } from './penalties';
import { admissibleWaiters, evaluateGatheringIn, notifyWaitingIn, openRoundIn } from './rendezvous';
import { computeShares, sharesDrift } from './shares';
import { connectionOf, workerOf, workersOf } from './worker-table';
import type { CarriedGroup, CoordinatorState } from './state';

/** Who a close is about (`closeRoundIn`); each absent: nobody. */
export type CloseOptions = {
  /** A survivor re-enrolled at the tail of the wait list rather than the head (the one blamed). */
  demote?: string;
  /** A failure's culprits: its restart is charged to them first (`countRestartIn`, penalties.ts). */
  culprits?: Culprit[];
  /** The members this close is about: the survivors may carry the group in flight on without them. */
  lost?: readonly string[];
};

/**
 * Close the open round: `round_closed` to every remaining participant, survivors re-enrolled at the
 * head of the wait list in rank order (`demote` goes to the tail). A failure counts a restart and may
 * fail the job. `lost`: the members this close is about; when the survivors can carry the group in
 * flight on without them (`carryFor`), the next round will be theirs alone (`RendezvousState.carry`).
 * Does not open the next round: callers follow with `afterCloseIn` or `openRoundIn`.
 */
export function closeRoundIn(
  ctx: Ctx,
  reason: CloseReason,
  restore: boolean,
  failure: boolean,
  { demote, culprits = [], lost = [] }: CloseOptions = {},
): void {
  const { s, now } = ctx;
  const rv = s.rendezvous;
  if (rv.phase === 'gathering') return;
  // A grouped outer sync may finish without them: the round goes on (outer-loss.ts).
  if (lost.length > 0 && deferLossIn(ctx, lost)) {
    if (failure) countRestartIn(ctx, culprits);
    return;
  }
  const closed = rv.round;
  const carry = carryFor(s, lost);
  const survivors = rv.participants.filter((p) => workerOf(s.workers, p.workerId)).map((p) => p.workerId);
  // A loss the survivors do not carry costs the steps of the group they had reported (0: it fell before
  // the group began, and redoing costs nothing but the new round).
  const redone = !carry && lost.length > 0 ? { redoneSteps: redoneStepsOf(s, lost) } : {};
  sendWorkers(ctx, survivors, { type: 'round_closed', round: closed, reason, restore });
  rv.closedRound = { round: closed, members: rv.participants.map((p) => p.workerId) };
  const head = survivors.filter((id) => id !== demote);
  const tail = demote !== undefined && survivors.includes(demote) ? [demote] : [];
  const surviving = new Set(survivors);
  rv.waitList = [...head, ...rv.waitList.filter((id) => !surviving.has(id)), ...tail];
  rv.participants = [];
  rv.topology = null;
  rv.outerLoss = null;
  rv.phase = 'gathering';
  rv.deadline = null;
  rv.readyDeadline = null;
  rv.stepStartedAt = null;
  rv.gatheringSince = now;
  rv.roundCommits = 0;
  rv.drainAt = null;
  keepCarriedReportsIn(ctx, carry);
  metric(ctx, 'tabswarm_world_size', 0);
  log(ctx, failure ? 'warn' : 'info', 'round_closed', {
    round: closed,
    reason,
    restore,
    restart: failure,
    ...(carry
      ? {
          carry: {
            lost: carry.lost,
            members: carry.members.map((m) => m.workerId),
            ...(carry.through !== undefined ? { through: carry.through } : {}),
          },
        }
      : redone),
  });
  if (failure) countRestartIn(ctx, culprits);
}

/** The most steps of the group in flight a member still here and not in `lost` had reported. */
function redoneStepsOf(s: CoordinatorState, lost: readonly string[]): number {
  const reported = s.rendezvous.participants
    .filter((p) => !lost.includes(p.workerId) && workerOf(s.workers, p.workerId))
    .map((p) => p.lastStep - s.lastCommit.step);
  return Math.max(0, ...reported);
}

/**
 * The reports a carry keeps (the survivors' inner steps); anything else of the closed round is dropped,
 * an overlapped job's outer reports included (they hold the old world's sum: the survivors send new ones).
 */
function keepCarriedReportsIn(ctx: Ctx, carry: CarriedGroup | null): void {
  const s = ctx.s;
  s.rendezvous.carry = carry;
  if (!carry) {
    s.pending = {};
    return;
  }
  const kept = new Set(carry.members.map((m) => String(m.slot)));
  const limit = Math.max(...carry.members.map((m) => m.lastStep));
  const pending: typeof s.pending = {};
  for (const [step, reports] of Object.entries(s.pending)) {
    if (Number(step) > limit) continue;
    pending[step] = Object.fromEntries(
      Object.entries(reports)
        .filter(([slot]) => kept.has(slot))
        .map(([slot, { outer: _outer, ...report }]) => [slot, report]),
    );
  }
  s.pending = pending;
}

/**
 * How long a blamed worker has to say goodbye before its peers' failure report counts as a restart
 * (see `CoordinatorState.blamedRestart`). A closing tab's goodbye lands within milliseconds.
 */
export const GOODBYE_GRACE_MS = 1000;

/**
 * Count one failure restart (persisted); past maxRestarts the job fails. The restart is charged to its
 * culprits first (penalties.ts): when one of them is over its quota the restart is absorbed (not
 * counted against the job) and the culprit is cooled off.
 */
function countRestartIn(ctx: Ctx, culprits: Culprit[]): void {
  const s = ctx.s;
  if (culprits.length > 0 && chargeIn(ctx, culprits, 'restart').absorbed) {
    metric(ctx, 'tabswarm_restarts_absorbed_total');
    log(ctx, 'warn', 'restart_absorbed', { culprits, restarts: s.restarts });
    enforceBansIn(ctx);
    return;
  }
  s.restarts += 1;
  metric(ctx, 'tabswarm_restarts_total');
  if (s.restarts > s.job.maxRestarts) {
    failJobIn(ctx, `restart ${s.restarts} exceeds maxRestarts ${s.job.maxRestarts}`);
    return;
  }
  persist(ctx);
}

/**
 * The blamed worker did not say goodbye in time (or failed itself): the restart counts now. It is
 * charged to the blamed worker when its failure is corroborated (its socket died, its heartbeat went
 * silent, it failed again), otherwise to the reporter: an accusation nobody else confirms costs the
 * accuser.
 */
export function confirmBlamedRestartIn(ctx: Ctx, why: string, corroborated: boolean): void {
  const blamed = ctx.s.blamedRestart;
  if (!blamed) return;
  ctx.s.blamedRestart = null;
  const culprit: Culprit | undefined = corroborated
    ? { workerId: blamed.workerId, addr: blamed.addr ?? '' }
    : blamed.reporter;
  log(ctx, 'warn', 'restart_confirmed', { workerId: blamed.workerId, why, corroborated, charged: culprit ?? null });
  if (ctx.s.status === 'active' || ctx.s.status === 'paused') countRestartIn(ctx, culprit ? [culprit] : []);
}

/**
 * Close the sockets of every worker whose id or address is cooling off, and forget them (a departure,
 * not a failure: the restart that led here was already charged). An open round they were in closes.
 */
export function enforceBansIn(ctx: Ctx): void {
  const s = ctx.s;
  const bannedMembers: string[] = [];
  for (const worker of workersOf(s.workers)) {
    const until = bannedUntil(s, ctx.now, worker);
    if (until === null) continue;
    const { workerId } = worker;
    refuseConnIn(ctx, worker.conn, until);
    if (s.blamedRestart?.workerId === workerId) s.blamedRestart = null;
    if (removeWorkerIn(ctx, workerId)) bannedMembers.push(workerId);
    log(ctx, 'warn', 'worker_refused', { workerId, addr: worker.addr });
  }
  if (bannedMembers.length > 0 && s.status === 'active') {
    closeRoundIn(ctx, 'kicked', true, false, { lost: bannedMembers });
    afterCloseIn(ctx);
  }
}

/**
 * A survivor's failure report during a grouped outer sync's wait for its survivors (outer-loss.ts),
 * naming no live peer: its grouped allreduce failed over the loss the round is waiting out (a member lost
 * after its group sealed cannot be left out). The wait ends now, as at its deadline: the survivors carry
 * the outer step on without the lost members, the reporter among them and not charged (the loss was
 * counted when the wait began). What a member can do with it: end a wait that runs after a real loss, so
 * that the round carries the step as a ring's round would. Returns false (nothing done) when no wait runs.
 */
export function outerLossFailedIn(ctx: Ctx, reporter: string, reason: string): boolean {
  const rv = ctx.s.rendezvous;
  if (!rv.outerLoss) return false;
  log(ctx, 'warn', 'outer_loss_failed', { round: rv.round, lost: rv.outerLoss.workers, reporter, reason });
  closeRoundIn(ctx, 'failure', true, false, { lost: rv.outerLoss.workers });
  afterCloseIn(ctx);
  return true;
}

/** After a close that was not followed by an immediate new round: gather again and tell the waiters. */
export function afterCloseIn(ctx: Ctx): void {
  if (ctx.s.status === 'failed' || ctx.s.status === 'done') return;
  const roundBefore = ctx.s.rendezvous.round;
  evaluateGatheringIn(ctx);
  // openRoundIn already told the rest of the wait list.
  if (ctx.s.rendezvous.round === roundBefore) notifyWaitingIn(ctx);
}

/** The job failed: tell and disconnect everyone. */
export function failJobIn(ctx: Ctx, why: string): void {
  const s = ctx.s;
  s.status = 'failed';
  s.rendezvous.phase = 'gathering';
  s.rendezvous.participants = [];
  s.rendezvous.waitList = [];
  s.rendezvous.deadline = null;
  log(ctx, 'error', 'job_failed', { why, restarts: s.restarts });
  persist(ctx);
  for (const w of workersOf(s.workers)) {
    sendConn(ctx, w.conn, { type: 'error', code: 'job_failed', message: why });
    ctx.out.push({ kind: 'close', conn: w.conn, code: CloseCode.jobOver, reason: 'job failed' });
  }
}

/** Forget a worker (its socket stays open unless the caller closes it). Returns whether it was in the open round. */
export function removeWorkerIn(ctx: Ctx, workerId: string): boolean {
  const s = ctx.s;
  const worker = workerOf(s.workers, workerId);
  if (!worker) return false;
  deleteWorker(ctx, workerId);
  const conn = connectionOf(s.connections, worker.conn);
  if (conn && conn.workerId === workerId) putConnection(ctx, worker.conn, { ...conn, workerId: null });
  const rv = s.rendezvous;
  rv.waitList = rv.waitList.filter((id) => id !== workerId);
  const wasMember = rv.phase !== 'gathering' && rv.participants.some((p) => p.workerId === workerId);
  metric(ctx, 'tabswarm_leaves_total');
  return wasMember;
}

/**
 * A graceful departure (goodbye, or an admin kick): the round closes with restore:true, no restart.
 * If the leaver is the round's last member and the last commit is newer than the latest checkpoint,
 * it is asked for a checkpoint first (a tab on `pagehide` may still manage the upload).
 */
export function leaveIn(ctx: Ctx, workerId: string, reason: 'goodbye' | 'kicked'): void {
  const s = ctx.s;
  const worker = workerOf(s.workers, workerId);
  if (!worker) return;
  const rv = s.rendezvous;
  const lastMember = rv.participants.length === 1 && rv.participants[0].workerId === workerId;
  const latestCheckpoint = s.checkpoints.length ? s.checkpoints[s.checkpoints.length - 1].step : 0;
  if (reason === 'goodbye' && lastMember && s.lastCommit.step > latestCheckpoint && holdsState(worker, s.lastCommit)) {
    requestCheckpointIn(ctx, workerId);
  }
  if (s.blamedRestart?.workerId === workerId) {
    // Its peers saw its channel close before its goodbye arrived: a clean leave, not a restart.
    s.blamedRestart = null;
    log(ctx, 'info', 'restart_excused', { workerId, reason });
  }
  const wasMember = removeWorkerIn(ctx, workerId);
  log(ctx, 'info', 'leave', { workerId, reason, wasMember });
  if (wasMember && s.status === 'active') {
    closeRoundIn(ctx, reason, true, false, { lost: [workerId] });
    afterCloseIn(ctx);
  } else if (s.status === 'active' && rv.phase === 'gathering') {
    evaluateGatheringIn(ctx);
  }
}

/**
 * Failures: remove the given workers (if `remove`), count each, and close the round (one restart) if
 * one of them was a member. `blame` (a failure report's peer) is demoted to the tail of the wait list.
 */
export function failIn(
  ctx: Ctx,
  workerIds: string[],
  reason: 'failure' | 'divergence',
  detail: string,
  opts: { remove: boolean; blame?: string },
): void {
  const s = ctx.s;
  const rv = s.rendezvous;
  let memberFailed = false;
  let blamedFailed = false;
  // Addresses are read before the workers are removed. A failure report without blame is charged to
  // its reporter (it says it failed); one with blame waits for corroboration (blamedRestart).
  const culprits = workerIds.map((id) => culpritOf(s, id));
  const blamedAddr = opts.blame !== undefined ? culpritOf(s, opts.blame).addr : '';
  for (const id of workerIds) {
    const member = rv.phase !== 'gathering' && rv.participants.some((p) => p.workerId === id);
    if (opts.remove) removeWorkerIn(ctx, id);
    metric(ctx, 'tabswarm_failures_total');
    log(ctx, 'warn', 'worker_failed', { workerId: id, detail, member, round: rv.round });
    memberFailed ||= member;
    blamedFailed ||= s.blamedRestart?.workerId === id;
  }
  if (memberFailed && s.status === 'active') {
    // A blamed worker that fails inside a new round costs that round's restart only (one fault, one count).
    if (blamedFailed) s.blamedRestart = null;
    const deferred = reason === 'failure' && opts.blame !== undefined;
    // Lost: the blamed peer (its reporter lives on), else the failed members themselves.
    const lost = reason !== 'failure' ? [] : opts.blame !== undefined ? [opts.blame] : workerIds;
    closeRoundIn(ctx, reason, true, !deferred, { demote: opts.blame, culprits, lost });
    if (deferred && s.status === 'active') {
      if (s.blamedRestart)
        confirmBlamedRestartIn(ctx, 'a second blame arrived', !workerOf(s.workers, s.blamedRestart.workerId));
      s.blamedRestart = {
        workerId: opts.blame!,
        deadline: ctx.now + GOODBYE_GRACE_MS,
        addr: blamedAddr,
        reporter: culprits[0],
      };
      log(ctx, 'info', 'restart_deferred', { workerId: opts.blame!, until: ctx.now + GOODBYE_GRACE_MS });
    }
    afterCloseIn(ctx);
  } else {
    if (blamedFailed) confirmBlamedRestartIn(ctx, detail, true);
    if (s.status === 'active' && rv.phase === 'gathering') evaluateGatheringIn(ctx);
  }
}

/**
 * The round's ready deadline passed: members that are not `ready` are dropped (socket closed, a strike
 * charged to them and their address, no restart: a member that never syncs is no failure of the job),
 * and the round closes so the others regather at once.
 */
export function dropNotReadyIn(ctx: Ctx): void {
  const s = ctx.s;
  const late = s.rendezvous.participants.filter((p) => !p.ready).map((p) => p.workerId);
  const culprits = late.map((id) => culpritOf(s, id));
  log(ctx, 'warn', 'ready_timeout', { round: s.rendezvous.round, workers: late });
  for (const id of late) {
    const worker = workerOf(s.workers, id);
    if (!worker) continue;
    ctx.out.push({ kind: 'close', conn: worker.conn, code: CloseCode.notReady, reason: 'not ready in time' });
    removeWorkerIn(ctx, id);
    metric(ctx, 'tabswarm_ready_timeouts_total');
  }
  closeRoundIn(ctx, 'failure', true, false, { lost: late });
  chargeIn(ctx, culprits, 'not ready in time');
  enforceBansIn(ctx);
  afterCloseIn(ctx);
}

/** Shares are re-measured at a commit boundary only after this many commits in the round … */
export const REBALANCE_MIN_COMMITS = 50;

/** … and only if some share would change by more than this fraction. */
export const REBALANCE_DRIFT = 0.25;

/**
 * Why the training round should change at a commit boundary: newcomers can be admitted or the world must
 * shrink (max lowered): `membership`; shares drifted: `rebalance`; else null.
 */
export function boundaryReason(s: CoordinatorState): CloseReason | null {
  const rv = s.rendezvous;
  if (s.status !== 'active' || rv.phase !== 'training') return null;
  const world = rv.participants.length;
  if ((admissibleWaiters(s).length > 0 && world < s.job.maxWorkers) || world > s.job.maxWorkers) return 'membership';
  if (rv.roundCommits < REBALANCE_MIN_COMMITS || world < 2) return null;
  const proposed = computeShares(rv.participants.map((p) => workerOf(s.workers, p.workerId)!.throughput));
  const drift = sharesDrift(
    rv.participants.map((p) => p.share),
    proposed,
  );
  return drift > REBALANCE_DRIFT ? 'rebalance' : null;
}

/**
 * At a commit boundary with nothing in flight after it: a new round when `boundaryReason` says so, or
 * (`lostMembers`) when the group just committed without members the round lost (outer-loss.ts: the
 * round's ranks and shares no longer fit its members). Closes with restore:false and opens the next
 * round at once. Returns whether it did.
 */
export function admitAtBoundaryIn(ctx: Ctx, lostMembers = false): boolean {
  const s = ctx.s;
  const training = s.status === 'active' && s.rendezvous.phase === 'training';
  const reason = lostMembers && training ? 'membership' : boundaryReason(s);
  if (reason === null) return false;
  closeRoundIn(ctx, reason, false, false);
  openRoundIn(ctx);
  return true;
}

/** The last step committed: tell every worker and dissolve the round. */
export function finishJobIn(ctx: Ctx, point: number): void {
  const s = ctx.s;
  const rv = s.rendezvous;
  log(ctx, 'info', 'job_done', { step: point, epochs: s.job.epochs, restarts: s.restarts });
  sendWorkers(
    ctx,
    workersOf(s.workers).map((w) => w.workerId),
    { type: 'done', step: point },
  );
  // No round any more: later departures are no failures and nobody is waiting for anything. A round that closed
  // before (a member left while the last checks were open) stays the one that just closed.
  if (rv.phase !== 'gathering') rv.closedRound = { round: rv.round, members: rv.participants.map((p) => p.workerId) };
  rv.participants = [];
  rv.waitList = [];
  rv.phase = 'gathering';
  metric(ctx, 'tabswarm_world_size', 0);
}
