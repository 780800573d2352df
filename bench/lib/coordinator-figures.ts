/**
 * bench:coordinator's pure statistics: quantiles of latencies, the least-squares slope of the
 * coordinator's RSS against its worker count (memory per worker), and the median and spread of a
 * figure over repeated runs. No I/O; test/unit/bench/coordinator-figures.test.ts checks them on
 * hand-built data.
 */

/** The q-quantile of `values` (nearest rank, the value at floor(q·n) of the sorted list); NaN when empty. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/** `quantile` rounded to `digits` decimals (for the JSON line and the table). */
export function ms(values: readonly number[], q: number, digits = 2): number {
  return Number(quantile(values, q).toFixed(digits));
}

/** One reading of the coordinator's memory: its worker count and RSS. */
export interface MemoryPoint {
  workers: number;
  rssMb: number;
}

/** A straight line fitted to memory readings: MB at no worker, and kB per worker. */
export interface MemoryFit {
  interceptMb: number;
  kbPerWorker: number;
  /** Coefficient of determination of the fit, in [0, 1] (1: every reading on the line). */
  r2: number;
  points: MemoryPoint[];
}

/** Ordinary least squares of RSS on workers; null with fewer than two distinct worker counts. */
export function fitMemory(points: readonly MemoryPoint[]): MemoryFit | null {
  const n = points.length;
  if (new Set(points.map((p) => p.workers)).size < 2) return null;
  const mx = points.reduce((s, p) => s + p.workers, 0) / n;
  const my = points.reduce((s, p) => s + p.rssMb, 0) / n;
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (const p of points) {
    sxy += (p.workers - mx) * (p.rssMb - my);
    sxx += (p.workers - mx) ** 2;
    syy += (p.rssMb - my) ** 2;
  }
  const slope = sxy / sxx;
  return {
    interceptMb: Number((my - slope * mx).toFixed(1)),
    kbPerWorker: Number((slope * 1024).toFixed(1)),
    r2: Number((syy === 0 ? 1 : (sxy * sxy) / (sxx * syy)).toFixed(3)),
    points: [...points],
  };
}

/** The median of some runs' values and their spread (min, max). */
export interface Spread {
  median: number;
  min: number;
  max: number;
}

export function spread(values: readonly number[]): Spread {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  return { median: Number(median.toFixed(2)), min: sorted[0], max: sorted[sorted.length - 1] };
}

/**
 * How many observations of a Prometheus histogram in `metrics` (the text of /metrics) took longer than
 * each bucket bound, as the difference between two scrapes: `{ '0.005': n, … }` (seconds → count above).
 */
export function slowerThan(before: string, after: string, name: string): Record<string, number> {
  const read = (text: string) => {
    const buckets = new Map<string, number>();
    let count = 0;
    for (const line of text.split('\n')) {
      const bucket = new RegExp(`^${name}_bucket\\{le="([^"]+)"\\} (\\d+)`).exec(line);
      if (bucket) buckets.set(bucket[1], Number(bucket[2]));
      if (line.startsWith(`${name}_count `)) count = Number(line.slice(name.length + 7));
    }
    return { buckets, count };
  };
  const a = read(before);
  const b = read(after);
  const total = b.count - a.count;
  const out: Record<string, number> = {};
  for (const [le, n] of b.buckets) if (le !== '+Inf') out[le] = total - (n - (a.buckets.get(le) ?? 0));
  return out;
}

/** CPU ticks of the whole machine and of the bench's own processes, read at two moments. */
export interface TickReading {
  machineBusy: number;
  machineTotal: number;
  ours: number;
}

/**
 * The share of the machine's CPU that other processes (not the bench nor its coordinator) took between
 * two readings, in [0, 1]: what else was running while the run measured.
 */
export function othersShare(before: TickReading, after: TickReading): number {
  const total = after.machineTotal - before.machineTotal;
  if (total <= 0) return 0;
  const others = after.machineBusy - before.machineBusy - (after.ours - before.ours);
  return Number(Math.min(1, Math.max(0, others / total)).toFixed(3));
}
