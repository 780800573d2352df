/**
 * A test client of the admin feed: reads a Server-Sent Events response message by message and lets a
 * test wait for the first message after the ones it already took that matches a predicate. Like the
 * page, it keeps the workers' rows: the snapshot's, then every delta applied in order (a gap in the
 * deltas' numbers is counted in `gaps`).
 */
import {
  applyWorkersDelta,
  byRankThenPosition,
  type FeedMessage,
  type FeedWorker,
} from '../../core/protocol/admin-feed';

/** Deltas whose rows a reader keeps (`rowsAt`). */
const KEEP_ROWS_OF = 200;

/** Reads an SSE response message by message. */
export class FeedReader {
  readonly messages: FeedMessage[] = [];
  /** The workers' rows as of the last message read. */
  readonly workers = new Map<string, FeedWorker>();
  /** Deltas whose number did not follow the one before. */
  gaps = 0;
  /** The rows after each delta (and the snapshot), by number: the newest `KEEP_ROWS_OF` kept. */
  readonly rowsAt = new Map<number, FeedWorker[]>();
  private seq = -1;
  private buffer = '';
  private waiters: { test: (m: FeedMessage) => boolean; resolve: (m: FeedMessage) => void }[] = [];
  private readonly controller = new AbortController();
  private seen = 0;
  private markEnded: () => void = () => {};
  /** Resolves when the server ended the stream (or it was aborted). */
  readonly ended = new Promise<void>((resolve) => (this.markEnded = resolve));

  static async open(url: string, init: RequestInit = {}): Promise<{ res: Response; feed: FeedReader }> {
    const feed = new FeedReader();
    const res = await fetch(url, { ...init, signal: feed.controller.signal });
    if (res.ok) void feed.pump(res.body!);
    else feed.markEnded();
    return { res, feed };
  }

  private async pump(body: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    try {
      const reader = body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        this.buffer += decoder.decode(value, { stream: true });
        for (let end = this.buffer.indexOf('\n\n'); end >= 0; end = this.buffer.indexOf('\n\n')) {
          const block = this.buffer.slice(0, end);
          this.buffer = this.buffer.slice(end + 2);
          const data = block
            .split('\n')
            .filter((line) => line.startsWith('data: '))
            .map((line) => line.slice(6))
            .join('\n');
          if (!data) continue;
          const msg = JSON.parse(data) as FeedMessage;
          this.track(msg);
          this.messages.push(msg);
          for (const w of [...this.waiters]) {
            if (w.test(msg)) {
              this.waiters = this.waiters.filter((x) => x !== w);
              w.resolve(msg);
            }
          }
        }
      }
    } catch {
      // aborted
    }
    this.markEnded();
  }

  private track(msg: FeedMessage): void {
    if (msg.type === 'snapshot') {
      this.workers.clear();
      for (const row of msg.workers) this.workers.set(row.id, row);
      this.seq = msg.seq;
    } else if (msg.type === 'delta') {
      if (msg.seq !== this.seq + 1) this.gaps += 1;
      this.seq = msg.seq;
      applyWorkersDelta(this.workers, msg);
    } else return;
    this.rowsAt.set(this.seq, [...this.workers.values()]);
    if (this.rowsAt.size > KEEP_ROWS_OF) this.rowsAt.delete(this.rowsAt.keys().next().value!);
  }

  /** The members of the round as the rows say, by rank. */
  members(): FeedWorker[] {
    return [...this.workers.values()].filter((w) => w.rank !== null).sort(byRankThenPosition);
  }

  /** The first message after the ones already taken that passes `test` (waits for it). */
  next<T extends FeedMessage>(test: (m: FeedMessage) => m is T, what: string, timeoutMs = 10_000): Promise<T> {
    const found = this.messages.slice(this.seen).findIndex(test);
    if (found >= 0) {
      this.seen += found + 1;
      return Promise.resolve(this.messages[this.seen - 1] as T);
    }
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(
              `feed: no ${what} within ${timeoutMs} ms; last: ${JSON.stringify(this.messages.slice(-3)).slice(0, 600)}`,
            ),
          ),
        timeoutMs,
      );
      this.waiters.push({
        test,
        resolve: (m) => {
          clearTimeout(timer);
          this.seen = this.messages.length;
          resolve(m as T);
        },
      });
    });
  }

  close(): void {
    this.controller.abort();
  }
}

export const is =
  <K extends FeedMessage['type']>(type: K, where: (m: Extract<FeedMessage, { type: K }>) => boolean = () => true) =>
  (m: FeedMessage): m is Extract<FeedMessage, { type: K }> =>
    m.type === type && where(m as Extract<FeedMessage, { type: K }>);
