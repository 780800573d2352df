/**
 * How long one dial attempt may wait for its connection to open, learned from this mesh's own dials, and
 * the loop that dials until an attempt opens (`dialUntil`, for web/net/peer-mesh.ts).
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
 * always gets the full time. The bound is the hang bound's rule (core/training/hang.ts `hangAllowanceMs`)
 * applied to connection times.
 *
 * ```ts
 * const budget = new DialBudget();
 * budget.attemptMs(0);       // 6000 until a connection opened
 * budget.opened(900); budget.opened(400);
 * budget.attemptMs(0);       // 2000 (2 × 900, floored); attemptMs(1) stays 6000
 * ```
 */
import { hangAllowanceMs } from '../../core/training/hang';

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
    // The project's one rule for "twice the slowest learned, at least a floor" (core/training/hang.ts).
    const learned = hangAllowanceMs(Math.max(...this.recent), MIN_FIRST_ATTEMPT_MS) ?? DIAL_ATTEMPT_MS;
    return Math.min(DIAL_ATTEMPT_MS, learned);
  }
}

/** Between two attempts to one peer. */
const DIAL_RETRY_MS = 200;

/** A dial attempt whose connection did not open in its time (not a refusal or an unknown peer). */
export class NoAnswer extends Error {}

/**
 * Attempts until one opens, `established` finds a link, `stopped` says so, or `deadline` (a
 * `performance.now()` time) passes. Each attempt's bound comes from `budget`, which learns from the
 * attempts that open; an attempt that rejects with `NoAnswer` makes the next ones wait the full bound.
 */
export async function dialUntil<T>(o: {
  what: string;
  deadline: number;
  budget: DialBudget;
  stopped: () => boolean;
  established: () => T | undefined;
  attempt: (timeoutMs: number) => Promise<T>;
}): Promise<T> {
  let lastError = 'no attempt';
  let unanswered = 0;
  while (!o.stopped()) {
    const left = o.deadline - performance.now();
    if (left <= 0) break;
    const established = o.established();
    if (established) return established;
    try {
      const started = performance.now();
      const result = await o.attempt(Math.min(left, o.budget.attemptMs(unanswered)));
      o.budget.opened(performance.now() - started);
      return result;
    } catch (err) {
      if (err instanceof NoAnswer) unanswered++;
      lastError = (err as Error).message;
    }
    const pause = Math.min(DIAL_RETRY_MS, o.deadline - performance.now());
    if (pause > 0) await new Promise((resolve) => setTimeout(resolve, pause));
  }
  throw new Error(`could not connect ${o.what}: ${lastError}`);
}
