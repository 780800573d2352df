/**
 * The commit group in flight, as the machine sees it: the group plan at the record (core/training/groups.ts)
 * from the step after the last commit, its split (the shares by slot, and the slots a carried group
 * lost), and the samples each slot must report. In an overlapped job (core/training/overlap.ts) the
 * group after it may be in flight too: its inner steps run while the first one's outer step does.
 * commit.ts judges reports by them, round-close.ts decides carries with them, hang.ts knows when each
 * member's next report is due.
 */
import { assignStep, groupPlan, jobDone, planOf, type GroupPlan, type PositionRange } from '../../core/training/groups';
import { overlapsNext, successorPlan, type OverlapContext } from '../../core/training/overlap';
import { recordPosition, subtractRanges } from '../../core/training/sampler';
import type { CoordinatorState } from './state';

/**
 * Whether the job's last group is committed: no group is in flight any more. The job is `done` then,
 * unless checks of its last commits are still open (commit.ts `finishIfCheckedIn`).
 */
export function allCommitted(s: CoordinatorState): boolean {
  return s.lastCommit.step > 0 && jobDone(s.lastCommit, planOf(s));
}

/**
 * The commit group in flight: the group plan at the record, from the step after the last commit (at the
 * record less a carry's deferred holes when its overlapped predecessor committed partially).
 */
export function groupInFlight(s: CoordinatorState): GroupPlan {
  const key = groupKey(s);
  if (lastGroup && sameGroupKey(lastGroup.key, key)) return lastGroup.group;
  const at = recordPosition(s.record);
  const deferred = key.deferred ?? [];
  const start = deferred.length > 0 ? { ...at, holes: subtractRanges(at.holes, deferred) } : at;
  const group = groupPlan(start, key.firstStep, planOf(s));
  lastGroup = { key, group };
  return group;
}

/**
 * What `groupInFlight` is a function of. The holes and a carry's deferred ranges are compared by
 * reference: the machine replaces them whole, never edits them in place (context.ts).
 */
type GroupKey = {
  epoch: number;
  cursor: number;
  holes: CoordinatorState['record']['holes'];
  deferred: PositionRange[] | undefined;
  firstStep: number;
  datasetSize: number;
  globalBatch: number;
  epochs: number;
  commitEvery: number;
};

function groupKey(s: CoordinatorState): GroupKey {
  const { epoch, cursor, holes } = s.record;
  const { globalBatch, epochs, commitEvery } = planOf(s);
  const deferred = s.rendezvous.carry?.deferred;
  return {
    epoch,
    cursor,
    holes,
    deferred,
    firstStep: s.lastCommit.step + 1,
    datasetSize: s.datasetSize,
    globalBatch,
    epochs,
    commitEvery,
  };
}

function sameGroupKey(a: GroupKey, b: GroupKey): boolean {
  return (
    a.epoch === b.epoch &&
    a.cursor === b.cursor &&
    a.holes === b.holes &&
    a.deferred === b.deferred &&
    a.firstStep === b.firstStep &&
    a.datasetSize === b.datasetSize &&
    a.globalBatch === b.globalBatch &&
    a.epochs === b.epochs &&
    a.commitEvery === b.commitEvery
  );
}

/**
 * The last group plan `groupInFlight` made, and from what. Every step report asked for it two to four
 * times (commit.ts checks and commits, hang.ts dates the next reports after each event), each an
 * O(steps + holes) plan, while it changes only at a commit, a rollback or a carry. A cache of a pure
 * function, as `lastSplit` below: the machine stays pure, and callers never edit a plan.
 */
let lastGroup: { key: GroupKey; group: GroupPlan } | null = null;

/** Where the open round stands with respect to the overlap rule (core/training/overlap.ts). */
export function overlapContext(s: CoordinatorState, group = groupInFlight(s)): OverlapContext {
  const rv = s.rendezvous;
  return {
    carriedThrough: rv.carry ? (rv.carry.through ?? group.lastStep) : null,
    drainedAt: rv.drainAt ?? null,
  };
}

/**
 * The groups in flight: the group at the record and, when its outer step overlaps (an overlapped job),
 * its successor, whose inner steps may be reported before the first one commits.
 */
export function groupsInFlight(s: CoordinatorState): GroupPlan[] {
  const group = groupInFlight(s);
  const plan = planOf(s);
  return overlapsNext(s.job, group, plan, overlapContext(s, group)) ? [group, successorPlan(group, plan)] : [group];
}

/** The split of the group in flight: its shares by slot, and the slots lost (a carried group's). */
export function splitInFlight(s: CoordinatorState): { shares: number[]; lost: number[] } {
  const carry = s.rendezvous.carry;
  return carry
    ? { shares: carry.shares, lost: carry.lost }
    : { shares: s.rendezvous.participants.map((p) => p.share), lost: [] };
}

/**
 * The slice sizes of the `assignStep`s the commit rule and the hang check asked for, by sample count,
 * for the last shares: every rank's report of a step asks for the same count and shares, and a split
 * keeps its shares for a round (or a carry), so one split per count serves them all (a group's steps
 * have one count but at a hole or the end of an epoch). Recomputing it per report (a sort over the
 * world) was the coordinator's hottest function once copying was fixed: O(world log world) per report,
 * O(world² log world) per step (docs/performance.md, "A coordinator for hundreds"). A cache of a pure
 * function: the machine stays pure.
 */
const lastSplit: { shares: number[]; byCount: Map<number, number[]> } = { shares: [], byCount: new Map() };

/** Counts kept per split: a group's full steps and the few short ones holes and epoch ends make. */
const SPLIT_COUNTS_KEPT = 8;

/**
 * The slice sizes of `count` samples split by the shares of the split in flight (`splitInFlight`),
 * cached. O(world) to confirm the shares: a caller asking for every member takes it once per count.
 */
export function splitSizes(s: CoordinatorState, count: number): number[] {
  const carry = s.rendezvous.carry;
  const participants = s.rendezvous.participants;
  const length = carry ? carry.shares.length : participants.length;
  const shareAt = (i: number): number => (carry ? carry.shares[i] : participants[i].share);
  let same = lastSplit.shares.length === length;
  for (let i = 0; same && i < length; i++) same = shareAt(i) === lastSplit.shares[i];
  if (!same) {
    lastSplit.shares = [...splitInFlight(s).shares];
    lastSplit.byCount.clear();
  }
  let sizes = lastSplit.byCount.get(count);
  if (!sizes) {
    if (lastSplit.byCount.size >= SPLIT_COUNTS_KEPT) lastSplit.byCount.clear();
    sizes = assignStep(0, count, lastSplit.shares).map((slice) => slice.count);
    lastSplit.byCount.set(count, sizes);
  }
  return sizes;
}

/** Samples `slot` must have processed in `step` of `group` (the group in flight by default; -1: no such step or slot). */
export function expectedSamples(s: CoordinatorState, step: number, slot: number, group = groupInFlight(s)): number {
  const span = group.steps[step - group.firstStep];
  if (!span) return -1;
  return splitSizes(s, span.count)[slot] ?? -1;
}
