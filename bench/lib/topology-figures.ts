/**
 * bench:topology's statistics, pure (test/unit/bench/topology-figures.test.ts checks them on hand-built
 * data): medians, the exponent of a power law fitted to sync time against world size (least squares on
 * log–log), and the goals' verdicts.
 */

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** time ≈ c·N^exponent, fitted by least squares on (log N, log time); r2 is the fit's coefficient of determination. */
export function fitExponent(points: readonly { world: number; ms: number }[]): { exponent: number; r2: number } {
  const usable = points.filter((p) => p.world > 0 && p.ms > 0);
  if (usable.length < 2) return { exponent: Number.NaN, r2: Number.NaN };
  const xs = usable.map((p) => Math.log(p.world));
  const ys = usable.map((p) => Math.log(p.ms));
  const mx = xs.reduce((a, b) => a + b, 0) / xs.length;
  const my = ys.reduce((a, b) => a + b, 0) / ys.length;
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < xs.length; i++) {
    sxy += (xs[i] - mx) * (ys[i] - my);
    sxx += (xs[i] - mx) ** 2;
    syy += (ys[i] - my) ** 2;
  }
  const exponent = sxx === 0 ? Number.NaN : sxy / sxx;
  const r2 = sxx === 0 || syy === 0 ? 1 : (sxy * sxy) / (sxx * syy);
  return { exponent, r2 };
}

/** One measured configuration: a topology at a world size on a profile. */
export interface SyncPoint {
  profile: string;
  topology: 'ring' | 'groups';
  world: number;
  /** Group sizes the planner chose (one entry: the plain ring). */
  groups: number[];
  /** Median over repeats of the time from the common start to the last rank's finish. */
  ms: number;
  /** NCCL's bus bandwidth: the ring's payload bytes per rank over `ms`, MB/s. */
  busMBps: number;
}

/** Per profile and topology, the fitted exponent; per profile, grouped/ring time at each world. */
export function summarize(points: readonly SyncPoint[]): {
  exponents: { profile: string; topology: string; exponent: number; r2: number }[];
  ratios: { profile: string; world: number; groupsOverRing: number }[];
} {
  const exponents: { profile: string; topology: string; exponent: number; r2: number }[] = [];
  const ratios: { profile: string; world: number; groupsOverRing: number }[] = [];
  const profiles = [...new Set(points.map((p) => p.profile))];
  for (const profile of profiles) {
    for (const topology of ['ring', 'groups'] as const) {
      const series = points.filter((p) => p.profile === profile && p.topology === topology);
      if (series.length >= 2) exponents.push({ profile, topology, ...fitExponent(series) });
    }
    for (const ring of points.filter((p) => p.profile === profile && p.topology === 'ring')) {
      const groups = points.find((p) => p.profile === profile && p.topology === 'groups' && p.world === ring.world);
      if (groups) ratios.push({ profile, world: ring.world, groupsOverRing: groups.ms / ring.ms });
    }
  }
  return { exponents, ratios };
}

/** The joins part: a joiner's time from its arrival to its first contribution. */
export interface JoinPoint {
  profile: string;
  source: string;
  joiners: number;
  /** Median (over joiners) ms from arrival to holding the state, and the slowest. */
  medianMs: number;
  maxMs: number;
}

/** Whether 32 joiners at once each got the state within `factor` × a single joiner's time. */
export function joinVerdict(single: JoinPoint | undefined, many: JoinPoint | undefined, factor = 2): boolean | null {
  if (!single || !many) return null;
  return many.maxMs <= factor * single.maxMs;
}
