/**
 * When rank 0 evaluates the committed model on the test set: `isEvaluationPoint`, a function of the
 * step and the job's plan, like `isCommitPoint` (sampler.ts). The tabs (web/elastic/step-runner.ts)
 * and the coordinator's machine (coordinator/machine/evaluation.ts, which accepts the reports) both
 * evaluate it, so the schedule lives in the pure core both may import.
 */
import { isCommitPoint, passesMultiple, stepsPerEpoch, totalSteps, type StepPlan } from './sampler';

/** What fixes the evaluation points (a `JobPublic` satisfies it). */
export interface EvaluationPlan extends StepPlan {
  /** Committed steps between evaluations, or null: at each epoch end. */
  evalEvery: number | null;
  /** Test images per evaluation; 0: never evaluate. */
  evalSamples: number;
}

/**
 * Whether rank 0 evaluates after committing `step`: only at commit points (tabs hold a committed state
 * only there), always at the job's last step, and otherwise at epoch ends (`evalEvery` null) or at the
 * first commit point at or after each multiple of `evalEvery`. A function of the step, like `isCommitPoint`.
 */
export function isEvaluationPoint(step: number, plan: EvaluationPlan): boolean {
  if (plan.evalSamples <= 0 || !Number.isInteger(step) || step < 1 || step > totalSteps(plan)) return false;
  if (!isCommitPoint(step, plan)) return false;
  if (step === totalSteps(plan)) return true;
  if (plan.evalEvery === null) return step % stepsPerEpoch(plan) === 0;
  return passesMultiple(step, plan.evalEvery, plan);
}
