/**
 * The commit group in flight, as the machine sees it: the group plan at the record (core/training/groups.ts)
 * from the step after the last commit, its split (the shares by slot, and the slots a carried group
 * lost), and the samples each slot must report. commit.ts judges reports by it, round-close.ts
 * decides carries with it, hang.ts knows when each member's next report is due.
 */
import { assignStep, planOf, type GroupPlan } from '../../core/training/groups';
import { groupAt } from '../../core/training/sampler';
import type { CoordinatorState } from './state';

/** The commit group in flight: the group plan at the record, from the step after the last commit. */
export function groupInFlight(s: CoordinatorState): GroupPlan {
  return groupAt(s.record, s.lastCommit.step + 1, planOf(s));
}

/** The split of the group in flight: its shares by slot, and the slots lost (a carried group's). */
export function splitInFlight(s: CoordinatorState): { shares: number[]; lost: number[] } {
  const carry = s.rendezvous.carry;
  return carry
    ? { shares: carry.shares, lost: carry.lost }
    : { shares: s.rendezvous.participants.map((p) => p.share), lost: [] };
}

/** Samples `slot` must have processed in `step` of the group in flight (-1: no such step or slot). */
export function expectedSamples(s: CoordinatorState, step: number, slot: number, group = groupInFlight(s)): number {
  const span = group.steps[step - group.firstStep];
  if (!span) return -1;
  return assignStep(0, span.count, splitInFlight(s).shares)[slot]?.count ?? -1;
}
