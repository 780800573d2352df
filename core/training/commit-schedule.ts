/**
 * What happens after a commit: whether rank 0 is asked for a durable checkpoint of it, and whether rank
 * 0 evaluates it on the test set. Both are decided per commit group (groups.ts), from the group's steps
 * and whether it ended the epoch or the job, so tabs (web/elastic/step-runner.ts) and the coordinator's
 * machine (coordinator/machine/commit.ts, evaluation.ts) agree without history: the tabs know each
 * group from the record they were sent, the machine from its own record.
 */

/** One commit as the schedules see it. */
export interface CommitSpan {
  /** First and last step of the commit group. */
  firstStep: number;
  step: number;
  /** The commit moved the record into the next epoch (its tail and holes were all processed). */
  endsEpoch: boolean;
  /** The commit moved the record past the job's last epoch: the job is done. */
  endsJob: boolean;
}

/** Whether the commit's steps firstStep..step contain a multiple of `every` (checkpoints and evaluations follow it). */
export function passesMultiple(commit: Pick<CommitSpan, 'firstStep' | 'step'>, every: number): boolean {
  return Math.floor(commit.step / every) > Math.floor((commit.firstStep - 1) / every);
}

/**
 * Commits after which rank 0 is asked for a durable checkpoint: the first commit at or after each
 * multiple of `checkpointEvery` steps (with commits every step: exactly the multiples), each epoch's
 * last commit and the job's last.
 */
export function isCheckpointCommit(commit: CommitSpan, checkpointEvery: number): boolean {
  return commit.endsEpoch || commit.endsJob || passesMultiple(commit, checkpointEvery);
}

/** What fixes the evaluation points (a `JobPublic` satisfies it). */
export interface EvaluationPlan {
  /** Committed steps between evaluations, or null: at each epoch end. */
  evalEvery: number | null;
  /** Test images per evaluation; 0: never evaluate. */
  evalSamples: number;
}

/**
 * Whether rank 0 evaluates the state of this commit (tabs hold a committed state only at commits):
 * always at the job's end, and otherwise at epoch ends (`evalEvery` null) or at the first commit at or
 * after each multiple of `evalEvery`. Never when `evalSamples` is 0.
 */
export function isEvaluationCommit(commit: CommitSpan, plan: EvaluationPlan): boolean {
  if (plan.evalSamples <= 0) return false;
  if (commit.endsJob) return true;
  if (plan.evalEvery === null) return commit.endsEpoch;
  return passesMultiple(commit, plan.evalEvery);
}

/** The commit of a group that started in epoch `group.epoch` and left the record at `after`. */
export function commitSpan(
  group: { firstStep: number; lastStep: number; epoch: number },
  after: { epoch: number },
  epochs: number,
): CommitSpan {
  return {
    firstStep: group.firstStep,
    step: group.lastStep,
    endsEpoch: after.epoch > group.epoch,
    endsJob: after.epoch >= epochs,
  };
}
