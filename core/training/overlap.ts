/**
 * Overlapped outer steps (local sync mode with `sync.overlap`; docs/local-steps.md "Overlapped outer
 * steps"): which commit groups overlap their outer step with the next group's inner steps, and where that
 * next group is planned. The coordinator (which reports it accepts, what a loss carries on) and every tab
 * (when it starts the next group without waiting) evaluate the same rule on the same data.
 *
 * A group G *overlaps* when its allreduce runs in the background while the ranks compute its successor G',
 * which is then planned before G commits: from the record as G leaves it when committed whole
 * (`successorPlan`). A group does not overlap (its outer step is synchronous, as without overlap) when:
 * - committing it whole ends its epoch (or the job): the next group belongs to the next epoch, which may
 *   begin only once this one has no holes left;
 * - the coordinator asked for it (`committed.drain`): the round changes at its commit (a join, a shrink,
 *   a rebalance), and a new world cannot take over an allreduce in flight;
 * - it is the last group a carrying round carries on (`carry.through`): the survivors finish the carried
 *   groups synchronously, then the round's own groups overlap again.
 */
import type { JobPublic } from './job';
import { groupPlan, positionAfterGroup, type GroupPlan, type StepPlan } from './groups';

/** Whether `job` overlaps outer steps at all. */
export function overlapsOuterSteps(job: Pick<JobPublic, 'sync'>): boolean {
  return job.sync.mode === 'local' && job.sync.overlap === true;
}

/** Whether committing `group` whole moves the record to the next epoch (its last group, or the job's). */
export function endsEpoch(group: GroupPlan, plan: Pick<StepPlan, 'datasetSize'>): boolean {
  return positionAfterGroup(group.start, group, [], plan.datasetSize).epoch !== group.epoch;
}

/** Where the round stands with respect to the overlap rule. */
export interface OverlapContext {
  /** The last step of the groups a carrying round carries on (`carry.through`), or null (the round's own groups). */
  carriedThrough: number | null;
  /** The last step of a group whose outer step the coordinator asked to be synchronous (`committed.drain`), or null. */
  drainedAt: number | null;
}

/** Whether `group`'s outer step overlaps its successor's inner steps (the rule of this file's header). */
export function overlapsNext(
  job: Pick<JobPublic, 'sync'>,
  group: GroupPlan,
  plan: Pick<StepPlan, 'datasetSize'>,
  at: OverlapContext,
): boolean {
  if (!overlapsOuterSteps(job) || at.drainedAt === group.lastStep) return false;
  if (at.carriedThrough !== null && at.carriedThrough <= group.lastStep) return false;
  return !endsEpoch(group, plan);
}

/** The group after an overlapping `group`, planned where the record stands once `group` commits whole. */
export function successorPlan(group: GroupPlan, plan: StepPlan): GroupPlan {
  return groupPlan(positionAfterGroup(group.start, group, [], plan.datasetSize), group.lastStep + 1, plan);
}
