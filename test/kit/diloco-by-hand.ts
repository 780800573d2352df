/**
 * DiLoCo driven by hand for the local-mode loop tests (local-steps-loop.test.ts, overlap-loop.test.ts):
 * `world` CPU trainers built from the job, each group's inner steps taken on every rank's slice of the
 * epoch order, and pseudo-gradients summed in rank order (two ranks: the ring's sum is the same float32
 * addition). The outer step itself stays in each test, since that is what the tests tell apart.
 */
import { indicesAt, rankRanges, type GroupPlan } from '../../core/training/groups';
import type { JobSpec } from '../../core/training/job';
import { epochOrder } from '../../core/training/sampler';
import { CpuTrainer, SIM_MODEL } from './simulation';

/** `world` trainers built from `job` with its outer optimizer, each with its backup saved. */
export async function handTrainers(job: JobSpec, world: number): Promise<CpuTrainer[]> {
  const trainers = Array.from({ length: world }, () => new CpuTrainer());
  const sync = job.sync as Extract<JobSpec['sync'], { mode: 'local' }>;
  for (const t of trainers) {
    await t.buildModel({ model: SIM_MODEL, optimizer: job.optimizer, maxBatch: 16, seed: job.seed, outer: sync.outer });
    await t.saveBackup();
  }
  return trainers;
}

/** Every rank takes `group`'s inner steps on its slices under `shares`; returns the samples each took. */
export async function innerSteps(
  trainers: CpuTrainer[],
  job: JobSpec,
  datasetSize: number,
  group: GroupPlan,
  shares: number[],
): Promise<number[]> {
  const own = new Array<number>(trainers.length).fill(0);
  for (const span of group.steps) {
    for (let r = 0; r < trainers.length; r++) {
      const indices = indicesAt(epochOrder(job.seed, group.epoch, datasetSize), rankRanges(span, shares, r));
      own[r] += indices.length;
      if (indices.length === 0) continue;
      await trainers[r].computeGradients(indices, true);
      await trainers[r].applyAndHash(null, indices.length, null, { hash: false });
    }
  }
  return own;
}

/** The float32 sum of `parts` in rank order. */
export function sumInRankOrder(parts: ArrayBuffer[]): Float32Array {
  const out = new Float32Array(parts[0]);
  for (const p of parts.slice(1)) {
    const part = new Float32Array(p);
    for (let i = 0; i < out.length; i++) out[i] += part[i];
  }
  return out;
}
