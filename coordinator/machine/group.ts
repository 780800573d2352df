/**
 * The commit group in flight, as the machine sees it: the group plan at the record (core/training/groups.ts)
 * from the step after the last commit, its split (the shares by slot, and the slots a carried group
 * lost), and the samples each slot must report. In an overlapped job (core/training/overlap.ts) the
 * group after it may be in flight too: its inner steps run while the first one's outer step does.
 * commit.ts judges reports by them, round-close.ts decides carries with them, hang.ts knows when each
 * member's next report is due.
 */
import { assignStep, groupPlan, planOf, type GroupPlan } from '../../core/training/groups';
import { overlapsNext, successorPlan, type OverlapContext } from '../../core/training/overlap';
import { recordPosition, subtractRanges } from '../../core/training/sampler';
import type { CoordinatorState } from './state';

/**
 * The commit group in flight: the group plan at the record, from the step after the last commit (at the
 * record less a carry's deferred holes when its overlapped predecessor committed partially).
 */
export function groupInFlight(s: CoordinatorState): GroupPlan {
  const at = recordPosition(s.record);
  const deferred = s.rendezvous.carry?.deferred ?? [];
  const start = deferred.length > 0 ? { ...at, holes: subtractRanges(at.holes, deferred) } : at;
  return groupPlan(start, s.lastCommit.step + 1, planOf(s));
}

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

/** Samples `slot` must have processed in `step` of `group` (the group in flight by default; -1: no such step or slot). */
export function expectedSamples(s: CoordinatorState, step: number, slot: number, group = groupInFlight(s)): number {
  const span = group.steps[step - group.firstStep];
  if (!span) return -1;
  return assignStep(0, span.count, splitInFlight(s).shares)[slot]?.count ?? -1;
}
