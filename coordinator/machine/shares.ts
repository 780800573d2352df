/**
 * Throughput shares: each rank computes a part of every step proportional to its measured speed, so a
 * fast GPU is not held to a phone's pace. Measured by the coordinator from step reports (samples / time
 * from the step's start to the rank's report; the tab's `computeMs` claim is not used), smoothed,
 * fixed for a round (so `assignStep` is the same on every tab), normalised, deterministic.
 */
import { smoothDeviation } from '../../core/training/hang';
import type { WorkerInfo } from './state';

/** Weight of the newest measurement in the moving average. */
export const THROUGHPUT_SMOOTHING = 0.3;

/** No rank gets less than this fraction of an equal share, so a slow rank still gets measured. */
export const MIN_SHARE_OF_EQUAL = 0.1;

/**
 * No rank gets more than this many equal shares: a tab that makes itself look fast (or is) cannot take
 * over the step. Throughput is measured by the coordinator (commit.ts), not claimed by the tab.
 */
export const MAX_SHARE_OF_EQUAL = 2;

/** Share decimals kept (shares travel as JSON; short numbers read better in logs and tests). */
const SHARE_DECIMALS = 1e6;

/** The smoothed throughput after `samples` took `elapsedMs`; unchanged when that is no measurement. */
export function smoothThroughput(previous: number | null, samples: number, elapsedMs: number): number | null {
  if (!(samples > 0) || !(elapsedMs > 0)) return previous;
  const measured = samples / elapsedMs;
  if (!Number.isFinite(measured)) return previous;
  return previous === null ? measured : previous + THROUGHPUT_SMOOTHING * (measured - previous);
}

/**
 * A member's step of `samples` took `elapsedMs` (coordinator clock): first how far that strayed from what
 * its throughput so far predicted (the hang check's jitter, core/training/hang.ts `smoothDeviation`),
 * then its throughput moves toward the step's.
 */
export function measureStep(
  worker: Pick<WorkerInfo, 'throughput' | 'stepDeviationMs'>,
  samples: number,
  elapsedMs: number,
): void {
  if (worker.throughput !== null && worker.throughput > 0 && samples > 0)
    worker.stepDeviationMs = smoothDeviation(worker.stepDeviationMs ?? null, samples / worker.throughput, elapsedMs);
  worker.throughput = smoothThroughput(worker.throughput, samples, elapsedMs);
}

/**
 * Shares for a world whose ranks have these throughputs (null: not measured yet, counted as the mean
 * of the measured ones). Equal shares when nothing is measured. Sums to 1 up to rounding.
 */
export function computeShares(throughputs: readonly (number | null)[]): number[] {
  const world = throughputs.length;
  if (world === 0) return [];
  const measured = throughputs.filter((t): t is number => t !== null && t > 0 && Number.isFinite(t));
  if (measured.length === 0) return throughputs.map(() => Math.round(SHARE_DECIMALS / world) / SHARE_DECIMALS);
  const mean = measured.reduce((a, b) => a + b, 0) / measured.length;
  const raw = throughputs.map((t) => (t !== null && t > 0 && Number.isFinite(t) ? t : mean));
  // Ranks below the floor get exactly the floor, ranks above the cap exactly the cap; the rest share
  // what is left in proportion. Pinning some ranks can push others past a bound, so repeat (at most
  // `world` times: each pass pins at least one more rank or stops).
  const floor = MIN_SHARE_OF_EQUAL / world;
  const cap = Math.min(1, MAX_SHARE_OF_EQUAL / world);
  const pinned = new Array<number | null>(world).fill(null);
  let shares: number[] = [];
  for (let pass = 0; pass <= world; pass++) {
    const freeTotal = raw.reduce((acc, t, i) => (pinned[i] !== null ? acc : acc + t), 0);
    const freeMass = 1 - pinned.reduce<number>((acc, p) => acc + (p ?? 0), 0);
    shares = raw.map((t, i) => pinned[i] ?? (freeTotal > 0 ? (t / freeTotal) * freeMass : 0));
    // Pin the ranks over the cap first (that frees mass for the rest), else those under the floor.
    const over = shares.map((share, i) => pinned[i] === null && share > cap);
    const under = shares.map((share, i) => pinned[i] === null && share < floor);
    const pinCap = over.some(Boolean);
    if (!pinCap && !under.some(Boolean)) break;
    shares.forEach((_, i) => {
      if (pinCap && over[i]) pinned[i] = cap;
      else if (!pinCap && under[i]) pinned[i] = floor;
    });
  }
  return shares.map((share) => Math.round(share * SHARE_DECIMALS) / SHARE_DECIMALS);
}

/** Largest relative difference between two share vectors of one world (0 when identical). */
export function sharesDrift(current: readonly number[], proposed: readonly number[]): number {
  let drift = 0;
  for (let i = 0; i < current.length; i++) {
    const base = Math.max(current[i], 1e-9);
    drift = Math.max(drift, Math.abs(proposed[i] - current[i]) / base);
  }
  return drift;
}
