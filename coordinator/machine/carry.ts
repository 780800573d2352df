/**
 * Carrying a commit group on without lost members (local sync mode, docs/local-steps.md): whether the
 * survivors of a round can finish its group alone, and the carry they take into the next round (the
 * group's split by slot, the slots lost, each survivor's slot and last report). round-close.ts decides
 * it when a round closes over a loss, rendezvous.ts narrows it when the carrying round opens, commit.ts
 * commits the group with the lost slots' slices as holes.
 *
 * In an overlapped job (core/training/overlap.ts) the successor of an overlapping group in flight is
 * carried too (`through`): its inner steps began with the same split before the loss.
 */
import { planOf, positionAfterGroup, slotsRanges, type GroupPlan } from '../../core/training/groups';
import { overlapsOuterSteps, successorPlan } from '../../core/training/overlap';
import { holdsState } from './checkpoints';
import { groupInFlight, groupsInFlight } from './group';
import type { CarriedGroup, CoordinatorState } from './state';
import { workerOf } from './worker-table';

/**
 * Whether the survivors of the open round can carry its commit group on without `lost`, and the carry
 * if so. Local sync mode only (every-step mode redoes its one step: invariant 6 needs the fixed global
 * batch), while the job is active, when some survivor has reported a step of the group (or the group
 * is carried already: redoing it would throw away their inner steps), every survivor holds the last
 * commit, there are at least minWorkers of them, and the lost slices fit in the record's holes
 * (`MAX_HOLES`). Otherwise null: the round closes with restore and the group is redone.
 */
export function carryFor(s: CoordinatorState, lost: readonly string[]): CarriedGroup | null {
  const rv = s.rendezvous;
  if (lost.length === 0 || s.status !== 'active' || s.job.sync.mode !== 'local') return null;
  if (rv.phase === 'gathering' || (rv.phase === 'syncing' && !rv.carry)) return null;
  const survivors = rv.participants.filter((p) => !lost.includes(p.workerId) && workerOf(s.workers, p.workerId));
  if (survivors.length === 0 || survivors.length < s.job.minWorkers) return null;
  if (!rv.carry && !survivors.some((p) => p.lastStep > s.lastCommit.step)) return null;
  if (!survivors.every((p) => holdsState(workerOf(s.workers, p.workerId), s.lastCommit))) return null;
  const kept = new Set(survivors.map((p) => p.slot));
  const gone = rv.participants.map((p) => p.slot).filter((slot) => !kept.has(slot));
  const shares = rv.carry?.shares ?? rv.participants.map((p) => p.share);
  return carriedGroup(
    s,
    shares,
    [...(rv.carry?.lost ?? []), ...gone],
    survivors.map((p) => ({ ...p })),
  );
}

/**
 * The carry of the groups in flight (`groupsInFlight`: an overlapped job's successor too, unless the
 * carry already covers fewer) with `lostSlots` gone, or null when their holes would not fit the record.
 */
export function carriedGroup(
  s: CoordinatorState,
  shares: number[],
  lostSlots: number[],
  members: { workerId: string; slot: number; lastStep: number }[],
): CarriedGroup | null {
  const lost = [...new Set(lostSlots)].sort((a, b) => a - b);
  const group = groupInFlight(s);
  const through = s.rendezvous.carry?.through ?? groupsInFlight(s).at(-1)!.lastStep;
  if (!holesFit(s, group, shares, lost, through)) return null; // too many holes: redo instead
  const deferred = s.rendezvous.carry?.deferred;
  return {
    shares: [...shares],
    lost,
    // A commit point reported before the loss carried the old world's sum: it is reported again (an
    // overlapped job reports its outer steps apart: those are dropped, the inner reports stand).
    members: members.map((m) => ({
      workerId: m.workerId,
      slot: m.slot,
      lastStep: overlapsOuterSteps(s.job) ? m.lastStep : Math.min(m.lastStep, group.lastStep - 1),
    })),
    ...(overlapsOuterSteps(s.job) ? { through } : {}),
    ...(deferred ? { deferred } : {}),
  };
}

/**
 * Whether the holes the carried groups leave fit the record (`MAX_HOLES`): the group in flight's lost
 * slices, and when its successor is carried too (`through` past it), the successor's with them.
 */
function holesFit(s: CoordinatorState, group: GroupPlan, shares: number[], lost: number[], through: number): boolean {
  const n = s.datasetSize;
  const deferred = s.rendezvous.carry?.deferred ?? [];
  try {
    const lostHere = slotsRanges(group, shares, lost);
    positionAfterGroup(group.start, group, [...lostHere, ...deferred], n);
    if (through <= group.lastStep) return true;
    const next = successorPlan(group, planOf(s));
    positionAfterGroup(next.start, next, [...slotsRanges(next, shares, lost), ...lostHere], n);
    return true;
  } catch {
    return false;
  }
}
