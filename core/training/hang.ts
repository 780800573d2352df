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

/** How long a rank may go without progress when its progress takes `learnedMs` (null: not learned yet: no limit). */
export function hangAllowanceMs(learnedMs: number | null, floorMs: number = HANG_FLOOR_MS): number | null {
  if (learnedMs === null || !Number.isFinite(learnedMs) || learnedMs < 0) return null;
  return Math.max(floorMs, HANG_FACTOR * learnedMs);
}
