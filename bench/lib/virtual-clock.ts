/**
 * Virtual time for simulations of many ranks in one process (bench:topology's memory links): while
 * `inVirtualTime` runs, `setTimeout`, `clearTimeout` and `performance.now` follow a clock that jumps
 * from one timer to the next, and the microtasks each timer's callback queues run before the next timer,
 * as Node runs them. The time a simulation reports is then the link model's (delays, rates, the
 * algorithm's hops), not the CPU of a hundred ranks sharing one thread of a loaded machine.
 */

interface VirtualTimer {
  at: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

/** Run `body` under virtual time; resolves with its value and the virtual ms it took. */
export async function inVirtualTime<T>(body: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const realSetTimeout = globalThis.setTimeout;
  const realClearTimeout = globalThis.clearTimeout;
  const realNow = performance.now;
  let now = 0;
  let seq = 0;
  const timers: VirtualTimer[] = [];
  globalThis.setTimeout = ((fn: (...a: unknown[]) => void, ms = 0, ...args: unknown[]) => {
    const timer = { at: now + Math.max(0, Number(ms) || 0), seq: seq++, fn: () => fn(...args), cancelled: false };
    timers.push(timer);
    return timer;
  }) as unknown as typeof setTimeout;
  globalThis.clearTimeout = ((timer: VirtualTimer | undefined) => {
    if (timer && typeof timer === 'object' && 'cancelled' in timer) timer.cancelled = true;
  }) as unknown as typeof clearTimeout;
  performance.now = () => now;
  try {
    let outcome: { value: T } | { error: unknown } | null = null;
    body().then(
      (value) => {
        outcome = { value };
      },
      (error: unknown) => {
        outcome = { error };
      },
    );
    while (outcome === null) {
      // Let every queued microtask (promise continuation) run before the clock moves.
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (outcome !== null) break;
      const next = earliest(timers);
      if (!next) throw new Error('virtual time: nothing scheduled and the simulation has not settled');
      now = Math.max(now, next.at);
      next.fn();
    }
    const done = outcome as { value: T } | { error: unknown };
    if ('error' in done) throw done.error;
    return { value: done.value, ms: now };
  } finally {
    globalThis.setTimeout = realSetTimeout;
    globalThis.clearTimeout = realClearTimeout;
    performance.now = realNow;
  }
}

/** Remove and return the earliest live timer (ties: the one set first). */
function earliest(timers: VirtualTimer[]): VirtualTimer | null {
  let best = -1;
  for (let i = 0; i < timers.length; i++) {
    const t = timers[i];
    if (t.cancelled) continue;
    if (best < 0 || t.at < timers[best].at || (t.at === timers[best].at && t.seq < timers[best].seq)) best = i;
  }
  if (best < 0) {
    timers.length = 0;
    return null;
  }
  const [timer] = timers.splice(best, 1);
  // Drop cancelled timers now and then so the scan stays short.
  if (timers.length > 4096) for (let i = timers.length - 1; i >= 0; i--) if (timers[i].cancelled) timers.splice(i, 1);
  return timer;
}
