/**
 * The coordinator's admin feed (`GET /api/admin/feed`, Server-Sent Events) read in Node: commits, log
 * events and rollbacks as the coordinator pushes them, stamped with the server's clock, and
 * `until(check)` to wait on them (no polling). Used by bench:elastic's recovery part.
 */
import type { FeedMessage } from '../../core/protocol/admin-feed';

export interface FeedCommitSeen {
  step: number;
  /** First step of the commit (an outer step's first inner step in local sync mode). */
  firstStep: number;
  /** Samples committed (fewer than the steps' global batches when a partial commit left holes). */
  count: number;
  round: number;
  worldSize: number;
  /** Server clock (ms since the epoch). */
  at: number;
}

export interface FeedEventSeen {
  event: string;
  at: number;
  data: any;
}

export class FeedWatcher {
  readonly commits: FeedCommitSeen[] = [];
  readonly events: FeedEventSeen[] = [];
  readonly rollbacks: { afterStep: number; lastStepBefore: number }[] = [];
  private readonly abort = new AbortController();
  private waiters: (() => void)[] = [];
  private failure: Error | null = null;
  private snapshotSeen = false;

  private constructor() {}

  static async open(url: string, token: string): Promise<FeedWatcher> {
    const feed = new FeedWatcher();
    const res = await fetch(`${url}/api/admin/feed?token=${encodeURIComponent(token)}`, { signal: feed.abort.signal });
    if (!res.ok || !res.body) throw new Error(`admin feed: ${res.status} ${await res.text()}`);
    void feed.read(res.body);
    await feed.until(() => feed.snapshotSeen, 'snapshot', 30_000);
    return feed;
  }

  private async read(body: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true });
        for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = block
            .split('\n')
            .filter((line) => line.startsWith('data: '))
            .map((line) => line.slice(6))
            .join('\n');
          if (data) this.take(JSON.parse(data) as FeedMessage);
        }
        this.notify();
      }
      if (!this.abort.signal.aborted) this.failure = new Error('the admin feed ended');
    } catch (err) {
      if (!this.abort.signal.aborted) this.failure = err as Error;
    }
    this.notify();
  }

  private take(msg: FeedMessage): void {
    const commit = (c: FeedCommitSeen) =>
      this.commits.push({
        step: c.step,
        firstStep: c.firstStep,
        count: c.count,
        round: c.round,
        worldSize: c.worldSize,
        at: c.at,
      });
    const event = (e: FeedEventSeen) => this.events.push({ event: e.event, at: e.at, data: e.data });
    switch (msg.type) {
      case 'snapshot':
        this.snapshotSeen = true;
        msg.commits.forEach(commit);
        msg.events.forEach(event);
        break;
      case 'commit':
        commit(msg.commit);
        break;
      case 'event':
        event(msg.event);
        break;
      case 'rollback':
        this.rollbacks.push({ afterStep: msg.afterStep, lastStepBefore: this.commits.at(-1)?.step ?? 0 });
        break;
    }
  }

  private notify(): void {
    for (const w of [...this.waiters]) w();
  }

  /** Resolves with the first truthy `check()` (evaluated after every feed message). */
  until<T>(check: () => T | null | undefined | false, what: string, timeoutMs = 120_000): Promise<T> {
    return new Promise((resolveWait, reject) => {
      const waiter = () => {
        if (this.failure) return finish(this.failure);
        const value = check();
        if (value) finish(null, value);
      };
      const finish = (err: Error | null, value?: T) => {
        clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== waiter);
        if (err) reject(err);
        else resolveWait(value as T);
      };
      const timer = setTimeout(
        () =>
          finish(
            new Error(
              `admin feed: no ${what} within ${timeoutMs} ms (last commit ${JSON.stringify(this.commits.at(-1))})`,
            ),
          ),
        timeoutMs,
      );
      this.waiters.push(waiter);
      waiter();
    });
  }

  /** The first event named `event` after index `from` whose data matches. */
  find(event: string, from: number, match: (data: any) => boolean = () => true): FeedEventSeen | undefined {
    return this.events.slice(from).find((e) => e.event === event && match(e.data));
  }

  close(): void {
    this.abort.abort();
  }
}
