/**
 * The time a rank spends computing between two of its step reports, which is what it reports as
 * `computeMs` and what the coordinator's compute utilization is made of: the wall time since its
 * previous report (or the round's start) less the waits it names (the allreduce, the commit, its own
 * GPU-use pause). Intervals never overlap, whatever the pipelining: a prefetched step's gradients
 * were computed inside an earlier interval and counted there.
 */
export class BusyClock {
  private since: number;
  private waited = 0;

  constructor(private readonly now: () => number) {
    this.since = now();
  }

  /** A new round: the first interval starts now. */
  reset(): void {
    this.since = this.now();
    this.waited = 0;
  }

  /** Time spent waiting (not computing) inside the current interval. */
  wait(ms: number): void {
    if (ms > 0) this.waited += ms;
  }

  /** Run `fn` and count its whole duration as waiting. */
  async waiting<T>(fn: () => Promise<T>): Promise<T> {
    const start = this.now();
    try {
      return await fn();
    } finally {
      this.wait(this.now() - start);
    }
  }

  /** The busy time of the interval ending now, and the next interval starts. */
  lap(): number {
    const t = this.now();
    const busy = Math.max(0, t - this.since - this.waited);
    this.since = t;
    this.waited = 0;
    return busy;
  }
}
