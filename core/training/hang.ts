/**
 * When a rank that makes no progress is judged hung, for both sides that judge it: the coordinator,
 * from each rank's inner-step reports in local sync mode (coordinator/machine/hang.ts), and a tab, from a
 * ring neighbour that sends nothing in an outer step's allreduce (web/elastic/sync-modes.ts). A hung tab
 * (its main thread stopped: a debugger, a runaway script, a frozen renderer) may still heartbeat from a
 * worker timer, and its ring neighbours cannot tell it from a slow one, so progress is what is judged:
 * a report, or a frame, later than `HANG_FACTOR` × what was learned, and later than a floor.
 */

/** A rank is hung when its next report (or frame) is this many times later than its learned time. */
export const HANG_FACTOR = 2;

/**
 * No rank is judged hung sooner than this (ms). Above the longest pause a tab may take between two
 * steps on its own (the volunteer page's GPU-use slider ends at 2 s: web/elastic/step-runner.ts
 * `MAX_STEP_PAUSE_MS`), plus a second for what a loaded machine does to a live tab: a garbage
 * collection, a hidden tab's one-second timer alignment, 16 renderers sharing 2 cores. A slow-but-alive
 * tab is never dropped for a stall shorter than this; a hung one costs at most this, not the three
 * heartbeats (6 s by default) it cost before.
 */
export const HANG_FLOOR_MS = 3000;

/**
 * Deviations past the learned time a rank's progress may take before it is judged hung, as TCP's
 * retransmission timeout allows SRTT + 4·RTTVAR (RFC 6298, after Jacobson and Karels 1988): a rank whose
 * steps jitter (8 headless workers sharing a process's event loop, a tab on a machine other work keeps
 * busy) gets the room its own jitter needs, and a steady one is judged at `HANG_FACTOR` × its time. Measured
 * (bench:scale, N = 64 headless workers on 2 cores): with the factor alone a live worker was judged hung
 * every ~20 s at the 3-s floor, and no commit ever had all 64.
 */
export const HANG_DEVIATIONS = 4;

/** Weight of the newest sample in the mean deviation (RFC 6298's β). */
export const DEVIATION_SMOOTHING = 0.25;

/**
 * How long a rank may go without progress when its progress takes `learnedMs` and strays from it by
 * `deviationMs` on average (null: not learned yet: no limit): the most of the floor, `HANG_FACTOR` ×
 * the learned time, and the learned time plus `HANG_DEVIATIONS` mean deviations.
 */
export function hangAllowanceMs(
  learnedMs: number | null,
  floorMs: number = HANG_FLOOR_MS,
  deviationMs = 0,
): number | null {
  if (learnedMs === null || !Number.isFinite(learnedMs) || learnedMs < 0) return null;
  const deviation = Number.isFinite(deviationMs) && deviationMs > 0 ? deviationMs : 0;
  return Math.max(floorMs, HANG_FACTOR * learnedMs, learnedMs + HANG_DEVIATIONS * deviation);
}

/**
 * The mean deviation after a step expected to take `expectedMs` took `tookMs` (RFC 6298:
 * RTTVAR ← (1 − β)·RTTVAR + β·|SRTT − R|); the first sample starts it at half the miss, as RFC 6298
 * starts RTTVAR at R/2.
 */
export function smoothDeviation(previous: number | null, expectedMs: number, tookMs: number): number | null {
  if (!Number.isFinite(expectedMs) || !Number.isFinite(tookMs) || expectedMs < 0 || tookMs < 0) return previous;
  const miss = Math.abs(tookMs - expectedMs);
  return previous === null ? miss / 2 : previous + DEVIATION_SMOOTHING * (miss - previous);
}
