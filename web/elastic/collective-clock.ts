/**
 * How long this tab lets an allreduce run before it gives up on the round, and how long a neighbour
 * may stay silent in one before it is judged hung (`silenceMs`).
 *
 * A fixed limit (20 s) is right on a LAN and wrong on a slow, lossy access link: there one allreduce of
 * `mlp`'s 0.94 MB took longer than 20 s (reliable SCTP waiting on retransmission timeouts), every round
 * failed the same way and every-step training committed nothing — a livelock, not a slow run
 * (bench/RESULTS.md, bench:sync on the poor profile). So the limit is the largest of:
 * - the caller's minimum (the fixed floor, 10 × the last compute: a slower rank may still be computing);
 * - the payload at the floor rate (core/training/link-floor.ts, 1 Mbit/s: the slowest link a volunteer
 *   is expected to bring; every rank computes it alike from the payload and world size, so a newcomer
 *   does not start with a shorter fuse than the others);
 * - `SLACK` × the slowest of this tab's last `HISTORY` successful allreduces (what the link really does);
 * and it doubles after each of this tab's own timeouts (at most `MAX_DOUBLINGS` times, like TCP's
 * retransmission backoff) until an allreduce succeeds. A link slower than all this assumes therefore
 * costs a few failed rounds, not the job. The clock outlives rounds (it belongs to the tab, not the round).
 */

import { hangAllowanceMs } from '../../core/training/hang';
import { floorTransferMs } from '../../core/training/link-floor';
/** Margin over the slowest recent allreduce. */
export const SLACK = 4;
/** Successful allreduces remembered. */
export const HISTORY = 16;
/** Doublings after timeouts, at most (2^4 = 16× the learned limit). */
export const MAX_DOUBLINGS = 4;
/** No limit beyond this (10 minutes): a collective that slow is a hung peer, not a link. */
export const MAX_LIMIT_MS = 600_000;

export class CollectiveClock {
  private readonly recent: number[] = [];
  private doublings = 0;

  /** The limit for an allreduce that sends `busBytes` per rank, given the caller's own minimum. */
  limitMs(minimumMs: number, busBytes: number): number {
    const transferMs = floorTransferMs(busBytes);
    const learnedMs = SLACK * Math.max(0, ...this.recent);
    const base = Math.max(minimumMs, transferMs, learnedMs);
    return Math.round(Math.min(MAX_LIMIT_MS, base * 2 ** this.doublings));
  }

  /**
   * How long a ring neighbour may send nothing at all in an allreduce before this tab judges it hung
   * (core/training/hang.ts): twice the slowest recent allreduce, at least `floorMs`; null before any
   * succeeded (nothing learned: only the full limit applies).
   */
  silenceMs(floorMs: number): number | null {
    return this.recent.length > 0 ? hangAllowanceMs(Math.max(...this.recent), floorMs) : null;
  }

  /** An allreduce finished after `ms`: remember it; the backoff ends. */
  succeeded(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return;
    this.recent.push(ms);
    if (this.recent.length > HISTORY) this.recent.shift();
    this.doublings = 0;
  }

  /** This tab's allreduce hit its limit: the next limit is twice as long. */
  timedOut(): void {
    this.doublings = Math.min(MAX_DOUBLINGS, this.doublings + 1);
  }
}
