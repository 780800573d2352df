/**
 * Small promise tools for a loop that must never hang: every wait is bounded by a deadline or tied
 * to an `AbortSignal` (the round's), and calls into the training worker run one at a time.
 */

export class TimeoutError extends Error {
  override readonly name = 'TimeoutError';
}

/** The reason a signal was aborted with, as an Error. */
export function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new Error(String(reason ?? 'aborted'));
}

/**
 * `promise`, or a rejection when `signal` aborts or `timeoutMs` passes (whichever first). The
 * underlying work is not cancelled; callers that must not lose its effects keep them inside it.
 */
export function bounded<T>(
  promise: Promise<T>,
  opts: { signal?: AbortSignal; timeoutMs?: number; what: string },
): Promise<T> {
  const { signal, timeoutMs, what } = opts;
  if (signal?.aborted) {
    promise.catch(() => {});
    return Promise.reject(abortReason(signal));
  }
  return new Promise<T>((resolve, reject) => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const onAbort = () => finish(() => reject(abortReason(signal!)));
    const finish = (settle: () => void) => {
      if (timer !== undefined) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      settle();
    };
    if (timeoutMs !== undefined && Number.isFinite(timeoutMs)) {
      timer = setTimeout(
        () => finish(() => reject(new TimeoutError(`${what} timed out after ${timeoutMs} ms`))),
        timeoutMs,
      );
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => finish(() => resolve(value)),
      (err) => finish(() => reject(err)),
    );
  });
}

export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {});
  return { promise, resolve, reject };
}

/**
 * Runs async tasks strictly one after another. The training worker's methods await the GPU, so two
 * calls in flight could interleave inside the worker (a hash read between an apply's write and its
 * optimizer step); queuing them here keeps each task atomic. A task that exceeds `timeoutMs` rejects
 * its caller and the queue moves on, flagging the worker as wedged (`stuck`).
 */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();
  private pending = 0;
  stuck: string | null = null;

  constructor(private readonly timeoutMs: number) {}

  get busy(): boolean {
    return this.pending > 0;
  }

  run<T>(what: string, task: () => Promise<T>): Promise<T> {
    this.pending++;
    const result = this.tail.then(() => {
      if (this.stuck) throw new Error(`training worker is not responding (${this.stuck})`);
      return bounded(task(), { timeoutMs: this.timeoutMs, what: `worker ${what}` }).catch((err: unknown) => {
        if (err instanceof TimeoutError) this.stuck = err.message;
        throw err;
      });
    });
    const settled = result.then(
      () => undefined,
      () => undefined,
    );
    this.tail = settled.then(() => {
      this.pending--;
    });
    return result;
  }

  /** Resolves once every task queued so far has settled. */
  idle(): Promise<void> {
    return this.tail.then(() => undefined);
  }
}
