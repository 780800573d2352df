/**
 * Rendezvous after TorchElastic's DynamicRendezvousHandler, as pure decisions over the coordinator
 * state, run inside one `handle(state, event, now)` transition of machine.ts.
 *
 * - Enrolled workers wait on `waitList`. A round completes when minWorkers are enrolled and the
 *   last-call window (lastCallMs) has passed, or at once when maxWorkers are enrolled.
 * - A round is announced (`round`), every participant syncs and sends `ready`, then `train`.
 * - Newcomers during a round wait and are admitted at the next commit boundary: the round closes with
 *   restore:false and a new one opens at once (state from a peer). Not a restart.
 * - A goodbye, a kick, a failure or a divergence closes the round; its survivors are re-enrolled first,
 *   in old-rank order, so ranks stay dense and stable where possible (round-close.ts).
 *
 * This file forms rounds: the wait list, gathering and the last call, opening a round (ranks, shares,
 * where the state comes from) and `ready` → `train`. How a round ends (failures, leaves, restarts,
 * bans, the boundary re-formation) is round-close.ts; where the committed state lives (holders,
 * checkpoints, rollback) is checkpoints.ts.
 *
 * The `…In(ctx)` functions mutate a transition's private copy (see context.ts); machine.ts is the only
 * entry point (`handle`, and its tick: timeouts and deadlines), so every op is reached, and tested, through it.
 */
import { log, metric, mutParticipant, mutWorker, persist, sendWorker, sendWorkers, type Ctx } from './context';
import { checkpointPath, type StateSource, type WaitReason } from '../../core/protocol/coordinator-messages';
import { readyAllowanceMs } from '../../core/training/link-floor';
import { longestRelayChain, MAX_PLANNED_RELAY_CHAIN, spreadNonHolders } from '../../core/training/state-route';
import type { Topology } from '../../core/training/topology';
import { holdsState, latestCheckpoint, rollbackIn } from './checkpoints';
import { computeShares } from './shares';
import { workerOf } from './worker-table';
import { carriedGroup } from './carry';
import { roundTopology } from './topology';
import { separateSuspects } from './ring-suspects';
import type { CarriedGroup, CoordinatorState, Participant } from './state';

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
  if (!rv.waitList.includes(workerId)) rv.waitList = [...rv.waitList, workerId];
  const roundBefore = rv.round;
  evaluateGatheringIn(ctx);
  // If a round opened, openRoundIn already told the rest of the wait list where they stand.
  if (rv.round === roundBefore) {
    const position = rv.waitList.indexOf(workerId);
    if (position >= 0) sendWorker(ctx, workerId, { type: 'wait', reason: waitReason(ctx.s), position });
    metric(ctx, 'tabswarm_waiting_workers', rv.waitList.length);
  }
}

/**
 * The wait list minus a worker whose restart is on probation (`blamedRestart`): its peers just saw its
 * channel close, so it is most likely leaving; putting it in the next round would only break that round.
 * It becomes admissible again when its grace period ends (and it is still connected).
 */
export function admissibleWaiters(s: CoordinatorState): string[] {
  const blamed = s.blamedRestart?.workerId;
  return blamed === undefined ? s.rendezvous.waitList : s.rendezvous.waitList.filter((id) => id !== blamed);
}

/** While gathering: start or keep the last-call deadline, and open the round when it is due. */
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
  // Survivors carrying a group on start at once: nobody else may join before its commit.
  if (rv.carry) {
    openRoundIn(ctx);
    return;
  }
  if (enrolled >= s.job.maxWorkers) {
    openRoundIn(ctx);
  } else if (enrolled >= s.job.minWorkers) {
    // Re-forming after a closed round, its survivors are already re-enrolled and any newcomer is on the
    // wait list: there is nobody to wait for. The last call only helps a fresh rendezvous (the first
    // round, or after a coordinator restart) gather the tabs that are still arriving. Skipping it here
    // takes lastCallMs off every recovery.
    const waiting = new Set(rv.waitList);
    if (rv.closedRound?.members.some((id) => waiting.has(id))) {
      openRoundIn(ctx);
      return;
    }
    if (rv.deadline === null) rv.deadline = now + s.job.lastCallMs;
    if (now >= rv.deadline) openRoundIn(ctx);
  } else {
    rv.deadline = null;
  }
}

/** Where the new round's participants get the committed state; rolls the record back if nobody holds it. */
function chooseStateSource(ctx: Ctx, participants: Participant[]): StateSource {
  const s = ctx.s;
  if (s.lastCommit.step === 0) return { kind: 'fresh' };
  // Every holder feeds the members after it that lack the state (core/training/state-route.ts).
  const holders = participants.filter((p) => holdsState(workerOf(s.workers, p.workerId), s.lastCommit));
  if (holders.length === participants.length) return { kind: 'held' };
  if (holders.length === 1) return { kind: 'peer', rank: holders[0].rank };
  if (holders.length > 1) return { kind: 'peers', ranks: holders.map((p) => p.rank) };
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

/**
 * The members of a carried group still here to carry it on (in their old rank order), with the carry
 * narrowed to them; null (and the carry given up: the group will be redone) when none are left, fewer
 * than minWorkers, or the holes of the members gone since would not fit.
 */
function carryingMembersIn(ctx: Ctx): CarriedGroup | null {
  const s = ctx.s;
  const carry = s.rendezvous.carry;
  if (!carry) return null;
  const admissible = new Set(admissibleWaiters(s));
  const here = carry.members.filter((m) => admissible.has(m.workerId));
  const gone = carry.members.filter((m) => !admissible.has(m.workerId)).map((m) => m.slot);
  const narrowed =
    here.length > 0 && here.length >= s.job.minWorkers
      ? gone.length === 0
        ? carry
        : carriedGroup(s, carry.shares, [...carry.lost, ...gone], here)
      : null;
  if (!narrowed) {
    log(ctx, 'warn', 'carry_given_up', { lost: carry.lost, gone });
    s.rendezvous.carry = null;
    s.pending = {};
    return null;
  }
  s.rendezvous.carry = narrowed;
  return narrowed;
}

/**
 * The ring order of a round (`Topology.order` over `admitted`), with the members lacking the committed
 * state spread behind the holders (`spreadNonHolders`) when the planned order would make a relay chain
 * deeper than MAX_PLANNED_RELAY_CHAIN, in one plain ring that syncs the state (not a carried round).
 */
function joiningOrder(
  s: CoordinatorState,
  admitted: readonly string[],
  topology: Topology,
  carried: boolean,
): number[] {
  if (carried || topology.groups.length > 1 || s.lastCommit.step === 0) return topology.order;
  const lacks = (i: number) => !holdsState(workerOf(s.workers, admitted[i]), s.lastCommit);
  const holderRanks = topology.order.flatMap((i, rank) => (lacks(i) ? [] : [rank]));
  if (holderRanks.length === 0 || longestRelayChain(admitted.length, holderRanks) <= MAX_PLANNED_RELAY_CHAIN)
    return topology.order;
  return spreadNonHolders(topology.order, lacks);
}

/**
 * Open a round with the head of the wait list (up to maxWorkers), ranks in wait-list order; or, when a
 * group is carried (`RendezvousState.carry`), with its survivors alone, each on its old slot.
 */
export function openRoundIn(ctx: Ctx): void {
  const { s } = ctx;
  const rv = s.rendezvous;
  const carry = carryingMembersIn(ctx);
  const admitted = carry ? carry.members.map((m) => m.workerId) : admissibleWaiters(s).slice(0, s.job.maxWorkers);
  if (admitted.length === 0) return;
  const admittedSet = new Set(admitted);
  rv.waitList = rv.waitList.filter((id) => !admittedSet.has(id));
  rv.round += 1;
  // Ranks follow the planned ring order (measured link costs; without any, the admission order). In
  // one plain ring where many members lack the committed state (joiners), they go behind different
  // holders, so no holder feeds a long chain of them (core/training/state-route.ts); a carried round sends nothing.
  const topology = roundTopology(s, admitted);
  const order = joiningOrder(s, admitted, topology, carry !== null);
  // Two ring suspects of a failed check are not neighbours again (ring-suspects.ts; a carried round keeps its order).
  const planned = order.map((i) => admitted[i]);
  const members = carry ? planned : separateSuspects(planned, s.ringSuspects);
  const carried = new Map(carry?.members.map((m) => [m.workerId, m]));
  const shares = computeShares(members.map((id) => workerOf(s.workers, id)!.throughput));
  const participants: Participant[] = members.map((workerId, rank) => ({
    workerId,
    peerId: workerOf(s.workers, workerId)!.peerId,
    rank,
    slot: carried.get(workerId)?.slot ?? rank,
    share: shares[rank],
    ready: false,
    lastStep: 0,
  }));
  // A carried group's members all hold the last commit (carryFor checked): nothing is sent.
  const stateFrom: StateSource = carry ? { kind: 'held' } : chooseStateSource(ctx, participants);
  for (const p of participants) p.lastStep = carried.get(p.workerId)?.lastStep ?? s.lastCommit.step;
  rv.participants = participants;
  rv.topology = topology.groups.length > 1 ? topology.groups : null;
  rv.phase = 'syncing';
  rv.deadline = null;
  rv.baseStep = s.lastCommit.step;
  rv.roundCommits = 0;
  rv.drainAt = null;
  // A member on a slow link may have the whole state to receive first (core/training/link-floor.ts).
  rv.readyDeadline = ctx.now + s.policy.readyTimeoutMs + readyAllowanceMs(stateFrom, s.job.model, participants.length);
  rv.stepStartedAt = null;
  if (!carry) s.pending = {};
  metric(ctx, 'tabswarm_rounds_total');
  metric(ctx, 'tabswarm_world_size', participants.length);
  persist(ctx);
  log(ctx, 'info', 'round_open', {
    round: rv.round,
    world: participants.map((p) => ({ workerId: p.workerId, rank: p.rank, share: p.share, slot: p.slot })),
    step: s.lastCommit.step + 1,
    stateFrom,
    carried: carry !== null,
  });
  announceRoundIn(ctx, stateFrom, carry);
}

/** The `round` message to every participant of the round just opened, then the waiters' `wait`. */
function announceRoundIn(ctx: Ctx, stateFrom: StateSource, carry: CarriedGroup | null): void {
  const { s } = ctx;
  const rv = s.rendezvous;
  const participants = rv.participants;
  const world = participants.map(({ workerId, peerId, rank, share }) => ({ workerId, peerId, rank, share }));
  const holes = s.record.holes;
  // One message object for every member: the executor serialises it once (context.ts `sendWorkers`).
  sendWorkers(
    ctx,
    participants.map((p) => p.workerId),
    {
      type: 'round',
      runId: s.runId,
      round: rv.round,
      world,
      step: s.lastCommit.step + 1,
      epoch: s.record.epoch,
      cursor: s.record.cursor,
      ...(holes.length > 0 ? { holes } : {}),
      committedHash: s.lastCommit.hash,
      stateFrom,
      ...(carry
        ? {
            carry: {
              shares: carry.shares,
              slots: participants.map((q) => q.slot),
              reported: participants.map((q) => q.lastStep),
              ...(carry.through !== undefined ? { through: carry.through } : {}),
              ...(carry.deferred && carry.deferred.length > 0 ? { deferred: carry.deferred } : {}),
            },
          }
        : {}),
      ...(rv.topology ? { topology: { groups: rv.topology } } : {}),
    },
  );
  notifyWaitingIn(ctx);
}

/** A participant sent `ready`: it holds the round's base state. Starts training once all are ready. */
export function markReadyIn(ctx: Ctx, workerId: string): void {
  const { s, now } = ctx;
  const rv = s.rendezvous;
  const member = rv.participants.find((q) => q.workerId === workerId);
  if (!member || member.ready || rv.phase !== 'syncing') return;
  mutParticipant(ctx, workerId)!.ready = true;
  const worker = workerOf(s.workers, workerId);
  if (worker && !holdsState(worker, s.lastCommit))
    mutWorker(ctx, workerId).holds = [{ step: s.lastCommit.step, hash: s.lastCommit.hash }];
  if (rv.participants.every((q) => q.ready)) {
    rv.phase = 'training';
    rv.readyDeadline = null;
    rv.stepStartedAt = now;
    if (rv.gatheringSince !== null) metric(ctx, 'tabswarm_rendezvous_duration_ms', now - rv.gatheringSince);
    rv.gatheringSince = null;
    log(ctx, 'info', 'round_train', { round: rv.round, step: s.lastCommit.step + 1 });
    sendWorkers(
      ctx,
      rv.participants.map((q) => q.workerId),
      { type: 'train', round: rv.round },
    );
  }
}
