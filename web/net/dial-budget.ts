/**
 * How long one dial attempt may wait for its connection to open, learned from this mesh's own dials.
 *
 * Why: on a loaded machine about one dial in twelve never opens (bench:scale at N = 32, headless workers
 * on loopback: 14 of 174 attempts; the callee accepted the offer and the peer connection then stayed
 * silent), while every attempt that opened did so within 1.1 s (median 0.16 s). With a fixed 6 s per
 * attempt, each such dial held the whole new round 6 s before its retry opened in about a second, and a
 * failure round at N = 32 took 6.3–7.3 s to start training instead of under one.
 *
 * The rule: the first attempt to a peer waits twice the slowest of this mesh's recent connections
 * (dialed here, from the dial to the open, or accepted, from the offer to the open), at least
 * `MIN_FIRST_ATTEMPT_MS` and at most `DIAL_ATTEMPT_MS`; until `MIN_SAMPLES` connections have opened it
 * waits `DIAL_ATTEMPT_MS`, as does every attempt after one that got no answer. A worker dials only its
 * higher-id neighbours, so counting the calls it answers too is what lets it learn within its first
 * round. So a slow network (TURN, long
 * RTTs) teaches a longer first bound, a sudden slowdown costs at most one short attempt, and a retry
 * always gets the full time. The same idea as learning the hang bound from the measured step time.
 *
 * ```ts
 * const budget = new DialBudget();
 * budget.attemptMs(0);       // 6000 until a connection opened
 * budget.opened(900); budget.opened(400);
 * budget.attemptMs(0);       // 2000 (2 × 900, floored); attemptMs(1) stays 6000
 * ```
 */

/** Every attempt's bound until the mesh has learned, and every retry's. */
export const DIAL_ATTEMPT_MS = 6000;
/** The first attempt never waits less: below it a load spike on a quiet start would kill good dials. */
export const MIN_FIRST_ATTEMPT_MS = 2000;
/** How many recent successful attempts are remembered (a sliding window: the load changes). */
export const DIAL_HISTORY = 16;
/** Successful attempts needed before the first attempt's bound is learned. */
export const MIN_SAMPLES = 1;

export class DialBudget {
  private readonly recent: number[] = [];

  /** A connection opened `ms` after it was dialed (or its offer arrived). */
  opened(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return;
    this.recent.push(ms);
    if (this.recent.length > DIAL_HISTORY) this.recent.shift();
  }

  /** The bound of attempt `attempt` (0: the first) to one peer. */
  attemptMs(attempt: number): number {
    if (attempt > 0 || this.recent.length < MIN_SAMPLES) return DIAL_ATTEMPT_MS;
    const learned = 2 * Math.max(...this.recent);
    return Math.min(DIAL_ATTEMPT_MS, Math.max(MIN_FIRST_ATTEMPT_MS, learned));
  }
}
