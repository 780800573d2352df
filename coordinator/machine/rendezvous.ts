/**
 * Rendezvous after TorchElastic's DynamicRendezvousHandler, as pure decisions over the coordinator
 * state, run inside one `handle(state, event, now)` transition of machine.ts.
 *
 * - Enrolled workers wait on `waitList`. A round completes when minWorkers are enrolled and the
 *   last-call window (lastCallMs) has passed, or at once when maxWorkers are enrolled.
 * - A round is announced (`round`), every participant syncs and sends `ready`, then `train`.
 * - Newcomers during a round wait and are admitted at the next commit boundary: the round closes with
 *   restore:false and a new one opens at once (state from a peer). Not a restart.
 * - A goodbye or a kick closes the round with restore:true (the in-flight step is undone): not a restart.
 * - A failure (socket closed without goodbye, heartbeat older than 3×heartbeatMs, a failure report, a
 *   hash divergence) closes it with restore:true and counts a restart; past maxRestarts the job fails.
 * - Survivors are re-enrolled first, in old-rank order, so ranks stay dense and stable where possible.
 *
 * The `…In(ctx)` functions mutate a transition's private copy (see context.ts); machine.ts is the only
 * entry point (`handle`, and its tick: timeouts and deadlines), so every op is reached, and tested, through it.
 */
import {
  log,
  metric,
  mutWorker,
  own,
  persist,
  sendConn,
  sendWorker,
  writableConnections,
  writableWorkers,
  type Ctx,
} from './context';
import {
  checkpointPath,
  CloseCode,
  type CloseReason,
  type StateSource,
  type WaitReason,
} from '../../core/protocol/control';
import { readyAllowanceMs } from '../../core/training/link-floor';
import { emptyRecord, epochOrder, rollbackTo } from '../../core/training/sampler';
import { chargeIn, bannedUntil, culpritOf, refuseConnIn, type Culprit } from './penalties';
import { computeShares, sharesDrift } from './shares';
import type { CoordinatorState, HeldState, Participant, WorkerInfo } from './state';

/** Shares are re-measured at a commit boundary only after this many commits in the round … */
export const REBALANCE_MIN_COMMITS = 50;
/** … and only if some share would change by more than this fraction. */
export const REBALANCE_DRIFT = 0.25;

export function holdsState(worker: WorkerInfo | undefined, state: HeldState): boolean {
  return !!worker && worker.holds.some((h) => h.step === state.step && h.hash === state.hash);
}

function waitReason(s: CoordinatorState): WaitReason {
  if (s.status === 'paused') return 'paused';
  if (s.rendezvous.phase === 'gathering') return 'gathering';
  return s.rendezvous.participants.length >= s.job.maxWorkers ? 'full' : 'round_running';
}

/** Tell every waiting worker where it stands. */
export function notifyWaitingIn(ctx: Ctx): void {
  const reason = waitReason(ctx.s);
  ctx.s.rendezvous.waitList.forEach((id, position) => {
    sendWorker(ctx, id, { type: 'wait', reason, position });
  });
  metric(ctx, 'tabswarm_waiting_workers', ctx.s.rendezvous.waitList.length);
}

/** Put a welcomed worker on the wait list; may complete a round. */
export function enrollIn(ctx: Ctx, workerId: string): void {
  const rv = ctx.s.rendezvous;
  if (!rv.waitList.includes(workerId)) rv.waitList.push(workerId);
  const roundBefore = rv.round;
  evaluateGatheringIn(ctx);
  // If a round opened, openRoundIn already told the rest of the wait list where they stand.
  if (rv.round === roundBefore) {
    const position = rv.waitList.indexOf(workerId);
    if (position >= 0) sendWorker(ctx, workerId, { type: 'wait', reason: waitReason(ctx.s), position });
    metric(ctx, 'tabswarm_waiting_workers', rv.waitList.length);
  }
}

/** While gathering: start or keep the last-call deadline, and open the round when it is due. */
/**
 * The wait list minus a worker whose restart is on probation (`blamedRestart`): its peers just saw its
 * channel close, so it is most likely leaving; putting it in the next round would only break that round.
 * It becomes admissible again when its grace period ends (and it is still connected).
 */
export function admissibleWaiters(s: CoordinatorState): string[] {
  const blamed = s.blamedRestart?.workerId;
  return blamed === undefined ? s.rendezvous.waitList : s.rendezvous.waitList.filter((id) => id !== blamed);
}

export function evaluateGatheringIn(ctx: Ctx): void {
  const { s, now } = ctx;
  const rv = s.rendezvous;
  if (s.status !== 'active' || rv.phase !== 'gathering') return;
  const enrolled = admissibleWaiters(s).length;
  if (enrolled === 0) {
    rv.deadline = null;
    rv.gatheringSince = null;
    return;
  }
  if (rv.gatheringSince === null) rv.gatheringSince = now;
  if (enrolled >= s.job.maxWorkers) {
    openRoundIn(ctx);
  } else if (enrolled >= s.job.minWorkers) {
    // Re-forming after a closed round, its survivors are already re-enrolled and any newcomer is on the
    // wait list: there is nobody to wait for. The last call only helps a fresh rendezvous (the first
    // round, or after a coordinator restart) gather the tabs that are still arriving. Skipping it here
    // takes lastCallMs off every recovery.
    if (rv.closedRound?.members.some((id) => rv.waitList.includes(id))) {
      openRoundIn(ctx);
      return;
    }
    if (rv.deadline === null) rv.deadline = now + s.job.lastCallMs;
    if (now >= rv.deadline) openRoundIn(ctx);
  } else {
    rv.deadline = null;
  }
}

/** The latest stored checkpoint at or before the last commit, if any: where a rollback goes. */
export function latestCheckpoint(s: CoordinatorState): CoordinatorState['checkpoints'][number] | undefined {
  return s.checkpoints.filter((c) => c.step <= s.lastCommit.step).pop();
}

/** The first member of the round that holds the last commit (the one asked for a checkpoint of it), if any. */
export function checkpointHolder(s: CoordinatorState): string | undefined {
  return s.rendezvous.participants.find((p) => holdsState(own(s.workers, p.workerId), s.lastCommit))?.workerId;
}

/** Rewind the record and the last commit to an earlier committed step (a checkpoint, or 0). */
export function rollbackIn(
  ctx: Ctx,
  target: { step: number; epoch: number; cursor: number; hash: string | null },
  reason: string,
): void {
  const s = ctx.s;
  const from = s.lastCommit.step;
  s.record =
    target.step === 0
      ? emptyRecord(s.datasetSize)
      : rollbackTo(target.epoch, target.cursor, epochOrder(s.job.seed, target.epoch, s.datasetSize));
  s.lastCommit = { step: target.step, epoch: target.epoch, cursor: target.cursor, hash: target.hash };
  s.checkpointRequests = s.checkpointRequests.filter((r) => r.step <= target.step);
  // Contributions and a check of steps that no longer count are forgotten with them.
  if (s.contributions)
    s.contributions = Object.fromEntries(Object.entries(s.contributions).filter(([, step]) => step <= target.step));
  if (s.verification && s.verification.step > target.step) s.verification = null;
  s.ringSuspects = null;
  ctx.out.push({ kind: 'rollback_commits', afterStep: target.step });
  log(ctx, 'warn', 'record_rolled_back', {
    from,
    to: target.step,
    reason,
  });
}

/** Where the new round's participants get the committed state; rolls the record back if nobody holds it. */
function chooseStateSource(ctx: Ctx, participants: Participant[]): StateSource {
  const s = ctx.s;
  if (s.lastCommit.step === 0) return { kind: 'fresh' };
  // Prefer a worker that reported the committed hash itself over one that only synced it in a round.
  const members = s.lastCommit.members ?? [];
  const holders = participants.filter((p) => holdsState(own(s.workers, p.workerId), s.lastCommit));
  if (holders.length === participants.length) return { kind: 'held' };
  const holder = holders.find((p) => members.includes(p.workerId)) ?? holders[0];
  if (holder) return { kind: 'peer', rank: holder.rank };
  const checkpoint = latestCheckpoint(s);
  const reason = 'no participant holds the last committed state';
  if (checkpoint) {
    rollbackIn(ctx, checkpoint, reason);
    return {
      kind: 'checkpoint',
      step: checkpoint.step,
      url: checkpointPath(s.runId, checkpoint.step),
      sha256: checkpoint.sha256,
    };
  }
  rollbackIn(ctx, { step: 0, epoch: 0, cursor: 0, hash: null }, reason);
  return { kind: 'fresh' };
}

/** Open a round with the head of the wait list (up to maxWorkers), ranks in wait-list order. */
export function openRoundIn(ctx: Ctx): void {
  const { s } = ctx;
  const rv = s.rendezvous;
  const members = admissibleWaiters(s).slice(0, s.job.maxWorkers);
  if (members.length === 0) return;
  rv.waitList = rv.waitList.filter((id) => !members.includes(id));
  rv.round += 1;
  const shares = computeShares(members.map((id) => s.workers[id].throughput));
  const participants: Participant[] = members.map((workerId, rank) => ({
    workerId,
    peerId: s.workers[workerId].peerId,
    rank,
    share: shares[rank],
    ready: false,
    lastStep: 0,
  }));
  const stateFrom = chooseStateSource(ctx, participants);
  for (const p of participants) p.lastStep = s.lastCommit.step;
  rv.participants = participants;
  rv.phase = 'syncing';
  rv.deadline = null;
  rv.baseStep = s.lastCommit.step;
  rv.roundCommits = 0;
  // A member on a slow link may have the whole state to receive first (core/link-floor.ts).
  rv.readyDeadline = ctx.now + s.policy.readyTimeoutMs + readyAllowanceMs(stateFrom, s.job.model, participants.length);
  rv.stepStartedAt = null;
  s.pending = {};
  metric(ctx, 'tabswarm_rounds_total');
  metric(ctx, 'tabswarm_world_size', participants.length);
  persist(ctx);
  log(ctx, 'info', 'round_open', {
    round: rv.round,
    world: participants.map((p) => ({ workerId: p.workerId, rank: p.rank, share: p.share })),
    step: s.lastCommit.step + 1,
    stateFrom,
  });
  const world = participants.map(({ workerId, peerId, rank, share }) => ({ workerId, peerId, rank, share }));
  for (const p of participants) {
    sendWorker(ctx, p.workerId, {
      type: 'round',
      runId: s.runId,
      round: rv.round,
      world,
      step: s.lastCommit.step + 1,
      epoch: s.lastCommit.epoch,
      cursor: s.lastCommit.cursor,
      committedHash: s.lastCommit.hash,
      stateFrom,
    });
  }
  notifyWaitingIn(ctx);
}

/** A participant sent `ready`: it holds the round's base state. Starts training once all are ready. */
export function markReadyIn(ctx: Ctx, workerId: string): void {
  const { s, now } = ctx;
  const rv = s.rendezvous;
  const p = rv.participants.find((q) => q.workerId === workerId);
  if (!p || p.ready || rv.phase !== 'syncing') return;
  p.ready = true;
  const worker = s.workers[workerId];
  if (worker && !holdsState(worker, s.lastCommit))
    mutWorker(ctx, workerId).holds = [{ step: s.lastCommit.step, hash: s.lastCommit.hash }];
  if (rv.participants.every((q) => q.ready)) {
    rv.phase = 'training';
    rv.readyDeadline = null;
    rv.stepStartedAt = now;
    if (rv.gatheringSince !== null) metric(ctx, 'tabswarm_rendezvous_duration_ms', now - rv.gatheringSince);
    rv.gatheringSince = null;
    log(ctx, 'info', 'round_train', { round: rv.round, step: s.lastCommit.step + 1 });
    for (const q of rv.participants) sendWorker(ctx, q.workerId, { type: 'train', round: rv.round });
  }
}

/**
 * Close the open round: `round_closed` to every remaining participant, survivors re-enrolled at the
 * head of the wait list in rank order (`demote` goes to the tail). A failure counts a restart and may
 * fail the job. Does not open the next round: callers follow with `afterCloseIn` or `openRoundIn`.
 */
export function closeRoundIn(
  ctx: Ctx,
  reason: CloseReason,
  restore: boolean,
  failure: boolean,
  demote?: string,
  culprits: Culprit[] = [],
): void {
  const { s, now } = ctx;
  const rv = s.rendezvous;
  if (rv.phase === 'gathering') return;
  const closed = rv.round;
  const survivors = rv.participants.filter((p) => s.workers[p.workerId]).map((p) => p.workerId);
  for (const id of survivors) sendWorker(ctx, id, { type: 'round_closed', round: closed, reason, restore });
  rv.closedRound = { round: closed, members: rv.participants.map((p) => p.workerId) };
  const head = survivors.filter((id) => id !== demote);
  const tail = demote !== undefined && survivors.includes(demote) ? [demote] : [];
  rv.waitList = [...head, ...rv.waitList.filter((id) => !survivors.includes(id)), ...tail];
  rv.participants = [];
  rv.phase = 'gathering';
  rv.deadline = null;
  rv.readyDeadline = null;
  rv.stepStartedAt = null;
  rv.gatheringSince = now;
  rv.roundCommits = 0;
  s.pending = {};
  metric(ctx, 'tabswarm_world_size', 0);
  log(ctx, failure ? 'warn' : 'info', 'round_closed', { round: closed, reason, restore, restart: failure });
  if (failure) countRestartIn(ctx, culprits);
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
  let memberBanned = false;
  for (const worker of Object.values(s.workers)) {
    const until = bannedUntil(s, ctx.now, worker);
    if (until === null) continue;
    const { workerId } = worker;
    refuseConnIn(ctx, worker.conn, until);
    if (s.blamedRestart?.workerId === workerId) s.blamedRestart = null;
    memberBanned = removeWorkerIn(ctx, workerId) || memberBanned;
    log(ctx, 'warn', 'worker_refused', { workerId, addr: worker.addr });
  }
  if (memberBanned && s.status === 'active') {
    closeRoundIn(ctx, 'kicked', true, false);
    afterCloseIn(ctx);
  }
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
  for (const w of Object.values(s.workers)) {
    sendConn(ctx, w.conn, { type: 'error', code: 'job_failed', message: why });
    ctx.out.push({ kind: 'close', conn: w.conn, code: CloseCode.jobOver, reason: 'job failed' });
  }
}

/** Forget a worker (its socket stays open unless the caller closes it). Returns whether it was in the open round. */
export function removeWorkerIn(ctx: Ctx, workerId: string): boolean {
  const s = ctx.s;
  const worker = s.workers[workerId];
  if (!worker) return false;
  delete writableWorkers(ctx)[workerId];
  const conn = s.connections[worker.conn];
  if (conn && conn.workerId === workerId) writableConnections(ctx)[worker.conn] = { ...conn, workerId: null };
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
  const worker = s.workers[workerId];
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
    closeRoundIn(ctx, reason, true, false);
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
    closeRoundIn(ctx, reason, true, !deferred, opts.blame, culprits);
    if (deferred && s.status === 'active') {
      if (s.blamedRestart)
        confirmBlamedRestartIn(ctx, 'a second blame arrived', !own(s.workers, s.blamedRestart.workerId));
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
 * Ask `workerId` (default: `checkpointHolder`) to upload the last committed state; nothing when no one
 * holds it or nothing is committed (`adminRefusal` tells an admin so).
 */
export function requestCheckpointIn(ctx: Ctx, workerId?: string): void {
  const s = ctx.s;
  const target = workerId ?? checkpointHolder(s);
  if (target === undefined || s.lastCommit.step === 0) return;
  const step = s.lastCommit.step;
  if (!s.checkpointRequests.some((r) => r.step === step)) s.checkpointRequests.push({ step, hash: s.lastCommit.hash });
  sendWorker(ctx, target, { type: 'checkpoint_request', step, url: checkpointPath(s.runId, step) });
  log(ctx, 'info', 'checkpoint_requested', { step, workerId: target });
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
    const worker = own(s.workers, id);
    if (!worker) continue;
    ctx.out.push({ kind: 'close', conn: worker.conn, code: CloseCode.notReady, reason: 'not ready in time' });
    removeWorkerIn(ctx, id);
    metric(ctx, 'tabswarm_ready_timeouts_total');
  }
  closeRoundIn(ctx, 'failure', true, false);
  chargeIn(ctx, culprits, 'not ready in time');
  enforceBansIn(ctx);
  afterCloseIn(ctx);
}

/**
 * At a commit boundary: a new round if newcomers can be admitted, the world must shrink (max lowered)
 * or shares drifted. Closes with restore:false and opens the next round at once. Returns whether it did.
 */
export function admitAtBoundaryIn(ctx: Ctx): boolean {
  const s = ctx.s;
  const rv = s.rendezvous;
  if (s.status !== 'active' || rv.phase !== 'training') return false;
  const world = rv.participants.length;
  let reason: CloseReason | null = null;
  if ((admissibleWaiters(s).length > 0 && world < s.job.maxWorkers) || world > s.job.maxWorkers) reason = 'membership';
  else if (rv.roundCommits >= REBALANCE_MIN_COMMITS && world > 1) {
    const proposed = computeShares(rv.participants.map((p) => s.workers[p.workerId].throughput));
    if (
      sharesDrift(
        rv.participants.map((p) => p.share),
        proposed,
      ) > REBALANCE_DRIFT
    )
      reason = 'rebalance';
  }
  if (reason === null) return false;
  closeRoundIn(ctx, reason, false, false);
  openRoundIn(ctx);
  return true;
}
