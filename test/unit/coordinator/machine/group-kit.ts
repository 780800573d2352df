/**
 * Helpers shared by the local-mode group tests (partial-commits.test.ts, overlapped-commits.test.ts):
 * members report their steps one at a time, the shares a round announced, and the positions a rank
 * computes in a run without holes (test/support/hole-free-layout.ts), independently of the group plan;
 * and the job they share.
 */
import { planOf, type PositionRange } from '../../../../core/training/groups';
import type { JobSpecInput } from '../../../../core/training/job';
import { referenceRankRanges } from '../../../support/hole-free-layout';
import type { Harness } from './coordinator-harness';

/** Members (but `except`) report their next steps up to `through`, one at a time, 1 ms apart. */
export function reportThrough(h: Harness, through: number, except: string[] = []): void {
  for (let progressed = true; progressed; ) {
    progressed = false;
    for (const member of h.members()) {
      const w = h.worker(member);
      if (except.includes(member) || !w.training || w.live >= through || h.state.rendezvous.phase !== 'training')
        continue;
      h.now += 1;
      h.report(member);
      progressed = true;
    }
  }
}

/** The round members' shares, by rank, as the round announced them. */
export function shares(h: Harness): number[] {
  return h.worker(h.members()[0]).round!.world.map((e) => e.share);
}

/** The positions `rank` computes in steps `first..last` of an epoch without holes. */
export function slices(h: Harness, first: number, last: number, split: number[], rank: number): PositionRange[] {
  return referenceRankRanges(first, last, planOf(h.state), split, rank);
}

/**
 * The local-mode job of the group tests: `globalBatch` samples a step, H = `innerSteps` (three outer steps an
 * epoch with their DATASET), two epochs, one member enough, heartbeats that never expire and no checkpoints
 * within the run; `sync` and the rest override.
 */
export function groupTestJob(
  globalBatch: number,
  maxWorkers: number,
  sync: Partial<Extract<JobSpecInput['sync'], { mode: 'local' }>> & { innerSteps: number },
  more: Partial<JobSpecInput> = {},
): JobSpecInput {
  return {
    model: 'tiny-mlp',
    globalBatch,
    epochs: 2,
    minWorkers: 1,
    maxWorkers,
    lastCallMs: 1000,
    heartbeatMs: 60_000,
    checkpointEvery: 1000,
    maxRestarts: 100,
    evalSamples: 0,
    sync: { mode: 'local', compression: 'int8', ...sync },
    ...more,
  };
}
