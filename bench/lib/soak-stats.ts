/**
 * bench:soak's statistics (pure): steps and CPU ticks interpolated between samples, the late/early step
 * rate (wall clock and with the machine's other load taken out), memory growth after warm-up, one
 * configuration's summary, the per-sample timeline, and samples/s over solo by round. The soak test in
 * `npm test` (test/browser/soak.test.ts) passes or fails on these numbers; test/unit/bench/soak-stats.test.ts
 * checks them on runs built by hand.
 */

/** Samples per step of the soak job (the coordinator's job and the solo page's batch). */
export const GLOBAL_BATCH = 128;

export interface Sample {
  /** Seconds since the configuration started training (first step seen). */
  t: number;
  steps: number;
  /** RSS in MB: coordinator, each renderer (sorted by pid), GPU process. */
  coordinatorMb: number;
  renderersMb: number[];
  gpuMb: number;
  /**
   * CPU clock ticks (USER_HZ), cumulative: `ours`, this process and every descendant (coordinator,
   * Chromium and all its processes; reaped children through their parents' cutime/cstime);
   * `machineBusy` and `machineTotal`, every CPU of the machine from /proc/stat (busy = all but idle
   * and iowait; steal counts as busy: another guest had the core). Optional: a sample without them
   * leaves the load-adjusted ratio equal to the wall-clock one.
   */
  cpu?: CpuTicks;
}

export interface CpuTicks {
  ours: number;
  machineBusy: number;
  machineTotal: number;
}

export interface ConfigResult {
  name: string;
  tabs: number;
  seconds: number;
  steps: number;
  samplesPerSec: number;
  stepsPerMinute: number[];
  /** Steps in the last third of the run over steps in the first third (wall clock). */
  lateEarly: number;
  /**
   * The same ratio for steps per CPU tick the rest of the machine left free (`loadAdjustedLateEarly`):
   * equal to `lateEarly` on a quiet machine, and not fooled by another job's burst in one third.
   */
  lateEarlyAdjusted: number;
  /** Share of the machine's CPU time other processes took in the first and the last third. */
  othersShare: { early: number; late: number };
  /** MB per 1,000 steps (after warm-up: `growth`). */
  mbPer1kSteps: { coordinator: number; renderers: number[]; gpu: number };
  /** The same growth in MB, over `growthSteps` steps (middle third to last third of the run). */
  growthMb: { coordinator: number; renderers: number[]; gpu: number };
  growthSteps: number;
  /**
   * `trend` of each process after warm-up: MB per 1,000 steps with one jump allowed (`leak`), that jump
   * (`jumpMb`), and the steps the fit spans (`overSteps`). The soak test bounds these.
   */
  trend: {
    coordinator: { leak: number; jumpMb: number };
    renderers: { leak: number; jumpMb: number }[];
    overSteps: number;
  };
  rssStartMb: { coordinator: number; renderers: number[]; gpu: number };
  rssEndMb: { coordinator: number; renderers: number[]; gpu: number };
}

/** `pick` (a cumulative count) at time t, linearly interpolated between samples. */
function valueAt(samples: readonly Sample[], t: number, pick: (s: Sample) => number): number {
  if (t <= samples[0].t) return pick(samples[0]);
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1];
    const b = samples[i];
    if (t <= b.t) return pick(a) + ((pick(b) - pick(a)) * (t - a.t)) / (b.t - a.t || 1);
  }
  return pick(samples[samples.length - 1]);
}

/** Steps at time t, linearly interpolated between samples. */
export function stepsAt(samples: readonly Sample[], t: number): number {
  return valueAt(samples, t, (s) => s.steps);
}

/** CPU ticks at time t, each counter interpolated like `stepsAt`; undefined if a sample has none. */
function cpuAt(samples: readonly Sample[], t: number): CpuTicks | undefined {
  if (!samples.every((s) => s.cpu)) return undefined;
  const at = (pick: (c: CpuTicks) => number) => valueAt(samples, t, (s) => pick(s.cpu!));
  return { ours: at((c) => c.ours), machineBusy: at((c) => c.machineBusy), machineTotal: at((c) => c.machineTotal) };
}

/**
 * Between two readings: the machine's CPU ticks (`total`, every core) and the busy ticks that were not
 * ours (`others`, at least 0).
 */
function cpuBetween(from: CpuTicks, to: CpuTicks): { total: number; others: number } {
  const total = to.machineTotal - from.machineTotal;
  const others = Math.max(0, to.machineBusy - from.machineBusy - (to.ours - from.ours));
  return { total, others };
}

/**
 * Late/early step rate with the machine's other load taken out. A shared machine (a CI runner, a
 * laptop compiling something) can take a core away for the last third of a run and halve the wall
 * step rate of a run that did not slow down at all; the speed defect this guards against (work per
 * step that grows with the run, or waits that do) needs no other process to show.
 *
 * For each third, the CPU the run could have had is the machine's CPU time (every core, the whole
 * third) less what other processes used (busy ticks that were not ours). The rate is steps per tick
 * of that, and the ratio is late over early:
 * - a quiet machine (others ≈ 0 in both thirds) gives the wall-clock ratio exactly, so a run that
 *   waits longer per step, or computes longer, still fails;
 * - another job that takes a share x of the machine in the last third only divides the late
 *   capacity by (1 − x), which is what it cost a CPU-bound run.
 * Samples without CPU ticks give the wall-clock ratio. `wall` is the plain ratio of the same thirds'
 * steps (`ConfigResult.lateEarly`).
 */
export function loadAdjustedLateEarly(samples: readonly Sample[]): {
  ratio: number;
  wall: number;
  othersEarly: number;
  othersLate: number;
} {
  const end = samples[samples.length - 1].t;
  const third = end / 3;
  const window = (a: number, b: number) => {
    const steps = stepsAt(samples, b) - stepsAt(samples, a);
    const from = cpuAt(samples, a);
    const to = cpuAt(samples, b);
    const cpu = from && to ? cpuBetween(from, to) : null;
    if (!cpu || !(cpu.total > 0)) return { steps, free: b - a, others: 0 };
    return { steps, free: cpu.total - cpu.others, others: cpu.others / cpu.total };
  };
  const early = window(0, third);
  const late = window(end - third, end);
  const rate = (w: { steps: number; free: number }) => (w.free > 0 ? w.steps / w.free : 0);
  return {
    ratio: rate(early) > 0 ? rate(late) / rate(early) : 0,
    wall: early.steps > 0 ? late.steps / early.steps : 0,
    othersEarly: early.others,
    othersLate: late.others,
  };
}

const median = (xs: readonly number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

/**
 * Memory growth after warm-up: the median RSS of the last third of the run minus the median of the
 * middle third (`mb`), and that over the steps between the two thirds' medians (`per1k`, MB per 1,000
 * steps). Medians rather than a least-squares slope, because a garbage-collected heap's RSS is a
 * sawtooth (tens of MB) whose phase would otherwise dominate a few minutes' slope; the first third
 * (page load, shader compilation, JIT, first allocations of every buffer) is warm-up and not counted.
 */
export function growth(
  samples: readonly Sample[],
  pick: (s: Sample) => number,
): { mb: number; per1k: number; steps: number } {
  const t = samples[samples.length - 1].t;
  const middle = samples.filter((s) => s.t >= t / 3 && s.t < (2 * t) / 3);
  const last = samples.filter((s) => s.t >= (2 * t) / 3);
  if (middle.length < 2 || last.length < 2) return { mb: 0, per1k: 0, steps: 0 };
  const steps = median(last.map((s) => s.steps)) - median(middle.map((s) => s.steps));
  const mb = median(last.map(pick)) - median(middle.map(pick));
  return { mb, per1k: steps > 0 ? (1000 * mb) / steps : 0, steps };
}

/**
 * Memory trend after warm-up, robust to one jump: over the samples of the last two thirds, a least-
 * squares line of RSS against steps that may step once (`leak`: the slope, MB per 1,000 steps; `jumpMb`:
 * the one step; `overSteps`: the steps the line spans). Every split with at least MIN_SEGMENT samples on
 * each side is tried (one common slope, an intercept per side: the pooled within-side slope) along with
 * no split, and the fit with the least squared error is kept.
 *
 * Why: a renderer's RSS steps up once and stays flat (an allocator or the heap growing its reserve:
 * +23 MB at 85 s in a CI run of 846 steps, +30 MB at 80 s in another here), and `growth` (medians of the
 * last third against the middle) takes that step for a leak over the ~300 steps between the medians. A
 * leak is a slope: memory kept per step, or per checkpoint (a staircase of many small steps, which one
 * allowed jump cannot absorb). The jump is reported, so a caller can bound it on its own.
 */
export function trend(
  samples: readonly Sample[],
  pick: (s: Sample) => number,
): { leak: number; jumpMb: number; overSteps: number } {
  const pts = afterWarmup(samples).map((s) => ({ x: s.steps, y: pick(s) }));
  const overSteps = stepsAfterWarmup(samples);
  if (pts.length < 2 || !(overSteps > 0)) return { leak: 0, jumpMb: 0, overSteps: 0 };
  let best = { sse: Number.POSITIVE_INFINITY, slope: 0, jump: 0 };
  const splits = [0];
  for (let k = MIN_SEGMENT; k <= pts.length - MIN_SEGMENT; k++) splits.push(k);
  for (const k of splits) {
    const fit = pooledLine(k === 0 ? [pts] : [pts.slice(0, k), pts.slice(k)]);
    if (fit && fit.sse < best.sse) best = fit;
  }
  return { leak: 1000 * best.slope, jumpMb: best.jump, overSteps };
}

/** The samples of the run's last two thirds: the first third is warm-up (`growth` says what it holds). */
const afterWarmup = (samples: readonly Sample[]) => samples.filter((s) => s.t >= samples[samples.length - 1].t / 3);

/** The steps `trend`'s line spans: from the first sample after warm-up to the last. */
function stepsAfterWarmup(samples: readonly Sample[]): number {
  const warm = afterWarmup(samples);
  return warm.length > 1 ? warm[warm.length - 1].steps - warm[0].steps : 0;
}

/** Samples each side of `trend`'s jump: fewer lets two noisy samples pass for a step. */
const MIN_SEGMENT = 3;

type Pt = { x: number; y: number };

/**
 * One slope through every segment, each with its own intercept (least squares); `jump` is the second
 * intercept less the first (0 for one segment). Null when the steps within every segment are all equal.
 */
function pooledLine(segments: readonly Pt[][]): { sse: number; slope: number; jump: number } | null {
  const mean = (ps: readonly Pt[], f: (p: Pt) => number) => ps.reduce((a, p) => a + f(p), 0) / ps.length;
  const stats = segments.map((ps) => ({ ps, mx: mean(ps, (p) => p.x), my: mean(ps, (p) => p.y) }));
  let sxy = 0;
  let sxx = 0;
  for (const { ps, mx, my } of stats)
    for (const p of ps) {
      sxy += (p.x - mx) * (p.y - my);
      sxx += (p.x - mx) ** 2;
    }
  if (!(sxx > 0)) return null;
  const slope = sxy / sxx;
  let sse = 0;
  for (const { ps, mx, my } of stats) for (const p of ps) sse += (p.y - my - slope * (p.x - mx)) ** 2;
  const icept = (i: number) => stats[i].my - slope * stats[i].mx;
  return { sse, slope, jump: stats.length > 1 ? icept(1) - icept(0) : 0 };
}

export function summarise(name: string, tabs: number, samples: readonly Sample[]): ConfigResult {
  const last = samples[samples.length - 1];
  const seconds = last.t;
  const stepsPerMinute: number[] = [];
  for (let m = 1; m * 60 <= seconds + 1e-6; m++)
    stepsPerMinute.push(stepsAt(samples, m * 60) - stepsAt(samples, (m - 1) * 60));
  const load = loadAdjustedLateEarly(samples);
  const per1k = (pick: (s: Sample) => number) => growth(samples, pick).per1k;
  const mb = (pick: (s: Sample) => number) => round1(growth(samples, pick).mb);
  const trendOf = (pick: (s: Sample) => number) => {
    const t = trend(samples, pick);
    return { leak: round3(t.leak), jumpMb: round1(t.jumpMb) };
  };
  const rendererCount = Math.min(...samples.map((s) => s.renderersMb.length));
  const rendererIdx = Array.from({ length: rendererCount }, (_, i) => i);
  const rss = (s: Sample) => ({
    coordinator: round1(s.coordinatorMb),
    renderers: rendererIdx.map((i) => round1(s.renderersMb[i])),
    gpu: round1(s.gpuMb),
  });
  return {
    name,
    tabs,
    seconds: round1(seconds),
    steps: last.steps,
    samplesPerSec: round1((last.steps * GLOBAL_BATCH) / seconds),
    stepsPerMinute: stepsPerMinute.map(Math.round),
    lateEarly: round3(load.wall),
    lateEarlyAdjusted: round3(load.ratio),
    othersShare: { early: round3(load.othersEarly), late: round3(load.othersLate) },
    mbPer1kSteps: {
      coordinator: round3(per1k((s) => s.coordinatorMb)),
      renderers: rendererIdx.map((i) => round3(per1k((s) => s.renderersMb[i] ?? 0))),
      gpu: round3(per1k((s) => s.gpuMb)),
    },
    growthMb: {
      coordinator: mb((s) => s.coordinatorMb),
      renderers: rendererIdx.map((i) => mb((s) => s.renderersMb[i] ?? 0)),
      gpu: mb((s) => s.gpuMb),
    },
    growthSteps: Math.round(growth(samples, (s) => s.gpuMb).steps),
    trend: {
      coordinator: trendOf((s) => s.coordinatorMb),
      renderers: rendererIdx.map((i) => trendOf((s) => s.renderersMb[i] ?? 0)),
      overSteps: Math.round(stepsAfterWarmup(samples)),
    },
    rssStartMb: rss(samples[0]),
    rssEndMb: rss(last),
  };
}

/**
 * One entry per sample for a reader hunting a slow stretch or a growing process: seconds, steps since
 * the last sample, the share of the machine other processes took since then (when the sample has CPU
 * ticks), and each tab renderer's RSS.
 */
export function timeline(samples: readonly Sample[]): string {
  return samples
    .slice(1)
    .map((s, i) => {
      const a = samples[i];
      const cpu = s.cpu && a.cpu ? cpuBetween(a.cpu, s.cpu) : null;
      const others = cpu && cpu.total > 0 ? ` others ${Math.round((100 * cpu.others) / cpu.total)}%` : '';
      return `${s.t.toFixed(0)}s +${s.steps - a.steps}${others} renderer MB ${s.renderersMb.map(Math.round).join('/')}`;
    })
    .join(', ');
}

const round1 = (x: number) => Math.round(x * 10) / 10;
export const round3 = (x: number) => Math.round(x * 1000) / 1000;

export type RoundResult = ConfigResult & { round: number };

/** The solo result of `r`'s round, if that round ran one. */
export const soloOf = (results: readonly RoundResult[], r: RoundResult) =>
  results.find((x) => x.name === 'solo' && x.round === r.round);

/**
 * Samples/s of every non-solo result over the solo result of the same round, and the median of those
 * ratios per configuration. Rounds without a solo result give no ratio.
 */
export function overSoloByRound(results: readonly RoundResult[]): Record<string, { ratios: number[]; median: number }> {
  const out: Record<string, { ratios: number[]; median: number }> = {};
  for (const r of results) {
    if (r.name === 'solo') continue;
    const solo = soloOf(results, r);
    if (!solo || !(solo.samplesPerSec > 0)) continue;
    out[r.name] ??= { ratios: [], median: 0 };
    out[r.name].ratios.push(round3(r.samplesPerSec / solo.samplesPerSec));
  }
  for (const v of Object.values(out)) v.median = round3(median(v.ratios));
  return out;
}
