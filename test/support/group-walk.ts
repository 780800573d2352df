/**
 * The commit groups of a whole run without partial commits, in order, with each commit as the
 * schedules see it: for tests that list commit, checkpoint or evaluation points of a plan.
 */
import { commitSpan, type CommitSpan } from '../../core/training/commit-schedule';
import {
  groupPlan,
  jobDone,
  positionAfterGroup,
  type GroupPlan,
  type RecordPosition,
  type StepPlan,
} from '../../core/training/groups';

export function walkGroups(plan: StepPlan): { group: GroupPlan; after: RecordPosition; span: CommitSpan }[] {
  const out: { group: GroupPlan; after: RecordPosition; span: CommitSpan }[] = [];
  let at: RecordPosition = { epoch: 0, cursor: 0, holes: [] };
  for (let step = 1; !jobDone(at, plan); ) {
    const group = groupPlan(at, step, plan);
    const after = positionAfterGroup(at, group, [], plan.datasetSize);
    out.push({ group, after, span: commitSpan(group, after, plan.epochs) });
    at = after;
    step = group.lastStep + 1;
  }
  return out;
}
