/**
 * One round as this tab lives it: the coordinator's `round` message, the tab's rank, an AbortSignal
 * that every wait of the round is tied to (aborted by `round_closed`, a dropped socket, a newer round),
 * the `train` go-ahead, one deferred per commit the tab waits for (resolved with the record position
 * the commit left), where a carried group goes on (set by the state sync), and the ranks the coordinator
 * reported lost (`members_lost`), which a grouped outer allreduce leaves out at once.
 */
import type { RoundMessage, WorldEntry } from '../../core/protocol/coordinator-messages';
import type { RecordPosition } from '../../core/training/groups';
import type { LostRanks } from '../net/group-support';
import { deferred, type Deferred } from './async-tools';

/** The ranks a round lost as the coordinator reports them (`members_lost`), for the collectives in flight. */
export class LostRanksFeed implements LostRanks {
  private readonly lost = new Set<number>();
  private readonly listeners = new Set<(ranks: readonly number[]) => void>();

  get ranks(): readonly number[] {
    return [...this.lost].sort((a, b) => a - b);
  }

  onLost(listener: (ranks: readonly number[]) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Record `ranks`; listeners hear the ones not known before. */
  add(ranks: readonly number[]): void {
    const fresh = ranks.filter((r) => !this.lost.has(r));
    if (fresh.length === 0) return;
    for (const r of fresh) this.lost.add(r);
    for (const listener of [...this.listeners]) listener(fresh);
  }
}

export class RoundSession {
  readonly controller = new AbortController();
  readonly train = deferred<void>();
  readonly commits = new Map<number, Deferred<RecordPosition>>();
  /** Resolves when the session's run has unwound (successfully or not). */
  finished: Promise<void> = Promise.resolve();
  rank = -1;
  /** Keep uncommitted states when the session ends (the coordinator may have committed them while unreachable). */
  keepPending = false;
  /** The first step to compute: the round's step, or later when a carried group goes on from an inner step. */
  resume: number;
  /** Steps up to this one the coordinator has reports of (a carried group's `reported`): not reported again. */
  reportedThrough: number;
  /** Commits whose next group's outer step is synchronous (`committed.drain`, core/training/overlap.ts). */
  readonly drains = new Set<number>();
  /** Ranks of this round the coordinator reported lost. */
  readonly lost = new LostRanksFeed();

  constructor(readonly msg: RoundMessage) {
    this.resume = msg.step;
    this.reportedThrough = msg.step - 1;
  }

  get round(): number {
    return this.msg.round;
  }

  get world(): WorldEntry[] {
    return this.msg.world;
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  abort(reason: string): void {
    if (!this.signal.aborted) this.controller.abort(new Error(reason));
  }

  /** The deferred of the commit of `step`; commits the tab no longer waits for are dropped. */
  committed(step: number): Deferred<RecordPosition> {
    let d = this.commits.get(step);
    if (!d) {
      d = deferred<RecordPosition>();
      this.commits.set(step, d);
    }
    return d;
  }

  /** Forget the deferreds up to `step` once they are settled and awaited (a round may last thousands of commits). */
  forgetCommitsThrough(step: number): void {
    for (const s of this.commits.keys()) if (s <= step) this.commits.delete(s);
  }
}
