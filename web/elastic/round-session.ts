/**
 * One round as this tab lives it: the coordinator's `round` message, the tab's rank, an AbortSignal
 * that every wait of the round is tied to (aborted by `round_closed`, a dropped socket, a newer round),
 * the `train` go-ahead and one deferred per commit the tab waits for.
 */
import type { RoundMessage, WorldEntry } from '../../core/protocol/coordinator-messages';
import { deferred, type Deferred } from './async-tools';

export class RoundSession {
  readonly controller = new AbortController();
  readonly train = deferred<void>();
  readonly commits = new Map<number, Deferred<void>>();
  /** Resolves when the session's run has unwound (successfully or not). */
  finished: Promise<void> = Promise.resolve();
  rank = -1;
  /** Keep uncommitted states when the session ends (the coordinator may have committed them while unreachable). */
  keepPending = false;

  constructor(readonly msg: RoundMessage) {}

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
  committed(step: number): Deferred<void> {
    let d = this.commits.get(step);
    if (!d) {
      d = deferred<void>();
      this.commits.set(step, d);
    }
    return d;
  }

  /** Forget the deferreds up to `step` once they are settled and awaited (a round may last thousands of commits). */
  forgetCommitsThrough(step: number): void {
    for (const s of this.commits.keys()) if (s <= step) this.commits.delete(s);
  }
}
