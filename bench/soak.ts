/**
 * `npm run bench:soak`: does training keep its speed and its memory over a long run?
 *
 * For each configuration (solo, and elastic with 1, 2, 3 local tabs) it starts a real coordinator
 * (`coordinator/cli.ts coordinator --port 0`, the default `mlp` job with many epochs, the real
 * Fashion-MNIST), opens headless Chromium tabs (the swarm's flags: WebGPU on SwiftShader; elastic tabs
 * in a Chromium no DevTools client is attached to, see `openBareTabs`), lets them
 * train for `--minutes`, and samples every `--sample-every` seconds:
 * - steps: elastic, the coordinator's last committed step (`/api/status`); solo, the page's step;
 * - RSS of the coordinator, of each renderer (`--type=renderer`, which also runs the training worker)
 *   and of Chromium's GPU process (`--type=gpu-process`), found through /proc among this process's
 *   descendants.
 *
 * It prints steps per minute for every minute of the run, the late/early step-rate ratio (last
 * third of the training time vs the first third), the same ratio with the machine's other load taken
 * out (`loadAdjustedLateEarly`, from CPU ticks in /proc), MB per 1,000 steps per process (`growth`:
 * median RSS of the last third of the run against the middle third, i.e. after warm-up),
 * samples/s of each configuration over solo's, a table, and one JSON line starting `{"bench":"soak"`.
 *
 *   npm run bench:soak -- --minutes 4 --configs solo,1,2,3 [--nice -10] [--timeline] [--rounds 3]
 *
 * The machine's other load shows up in the numbers; the ratios within one run are what to compare.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { resolveDatasetDir } from '../coordinator/config/startup-config';
import { launchSwarmChromium } from '../tools/swarm/chromium';
import { fetchStatus } from '../tools/swarm/coordinator-api';
import { type CoordinatorProcess, spawnCoordinator } from '../test/support/coordinator-process';
import { openBareTabs } from './lib/bare-tabs';

const GLOBAL_BATCH = 128;

export interface SoakOptions {
  minutes: number;
  configs: Config[];
  sampleEverySec: number;
  dataset: string;
  /** The built web app the coordinator serves (default dist/); another build compares two versions. */
  dist: string | null;
  /** Print every sample's steps, other load and renderer RSS (`timeline`) after each configuration. */
  timeline?: boolean;
  /**
   * Nice value for the run's processes (coordinator, Chromium): they inherit it from this process,
   * which holds it for the configuration and then returns to its own, and the sampler puts back any a
   * process changed (`renice`). Below 0 needs root; without
   * the permission the run goes on at the inherited priority and says so. A run that hands every
   * step between four processes loses far more than its fair share to a busy loop at the same
   * priority (one tab, 2 cores, two busy loops: 12× slower, where the CPU left free was 7× less), so
   * the soak test asks for −10 where it may: it measures tabswarm's decay, not the machine's other jobs.
   */
  nice?: number;
  /**
   * Run the configurations this many times in turn (solo, 1, solo, 1, …), so that each ratio over solo
   * compares runs minutes apart rather than a whole run apart: a shared machine's speed drifts
   * (one 10-minute solo run here fell from 1,030 to 520 steps per minute with flat memory).
   */
  rounds?: number;
}

export type Config = { kind: 'solo' } | { kind: 'elastic'; tabs: number };

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
  rssStartMb: { coordinator: number; renderers: number[]; gpu: number };
  rssEndMb: { coordinator: number; renderers: number[]; gpu: number };
}

function parseOptions(argv: string[]): SoakOptions {
  const opts: SoakOptions = {
    minutes: 10,
    configs: [
      { kind: 'solo' },
      { kind: 'elastic', tabs: 1 },
      { kind: 'elastic', tabs: 2 },
      { kind: 'elastic', tabs: 3 },
    ],
    sampleEverySec: 5,
    dataset: '',
    dist: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const value = argv[i + 1];
    switch (argv[i]) {
      case '--minutes':
        opts.minutes = Number(value);
        if (!(opts.minutes > 0)) throw new Error(`--minutes ${value}: expected a positive number`);
        i++;
        break;
      case '--sample-every':
        opts.sampleEverySec = Number(value);
        if (!(opts.sampleEverySec >= 1)) throw new Error(`--sample-every ${value}: expected seconds >= 1`);
        i++;
        break;
      case '--configs':
        opts.configs = value.split(',').map(parseConfig);
        i++;
        break;
      case '--dataset':
        opts.dataset = value;
        i++;
        break;
      case '--dist':
        opts.dist = resolve(value);
        i++;
        break;
      case '--timeline':
        opts.timeline = true;
        break;
      case '--rounds':
        opts.rounds = Number(value);
        if (!Number.isInteger(opts.rounds) || opts.rounds < 1)
          throw new Error(`--rounds ${value}: expected an integer >= 1`);
        i++;
        break;
      case '--nice':
        opts.nice = Number(value);
        if (!Number.isInteger(opts.nice) || opts.nice < -20 || opts.nice > 19)
          throw new Error(`--nice ${value}: expected an integer from -20 to 19`);
        i++;
        break;
      default:
        throw new Error(
          `unknown option ${argv[i]} (--minutes M --configs solo,1,2,3 --sample-every S --dataset DIR --dist DIR --timeline --nice N --rounds R)`,
        );
    }
  }
  // Found as `npm start` finds it: $TABSWARM_DATASET, Debian's package, then the copy in data/fashion-mnist/.
  opts.dataset ||= resolveDatasetDir(undefined, process.env);
  return opts;
}

function parseConfig(text: string): Config {
  if (text === 'solo') return { kind: 'solo' };
  const tabs = Number(text);
  if (!Number.isInteger(tabs) || tabs < 1 || tabs > 8) throw new Error(`--configs: ${text} is not solo or 1..8 tabs`);
  return { kind: 'elastic', tabs };
}

// ---------------------------------------------------------------- processes

interface ProcInfo {
  pid: number;
  ppid: number;
  cmdline: string;
  rssMb: number;
  /** utime + stime + cutime + cstime, in USER_HZ ticks. */
  cpuTicks: number;
}

/** utime, stime, cutime, cstime: fields 14–17 of /proc/PID/stat, i.e. 11–14 after the state field. */
function cpuTicksOf(fieldsAfterName: readonly string[]): number {
  return [11, 12, 13, 14].reduce((sum, i) => sum + Number(fieldsAfterName[i] ?? 0), 0);
}

function readProc(pid: number): ProcInfo | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ppid = Number(fields[1]);
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
    return { pid, ppid, cmdline, rssMb: rssKb / 1024, cpuTicks: cpuTicksOf(fields) };
  } catch {
    return null; // exited while we looked
  }
}

/** Every live descendant of `root`. */
export function descendants(root: number): ProcInfo[] {
  const all = readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map((d) => readProc(Number(d)))
    .filter((p): p is ProcInfo => p !== null);
  const children = new Map<number, ProcInfo[]>();
  for (const p of all) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const out: ProcInfo[] = [];
  const stack = [root];
  while (stack.length > 0) {
    for (const c of children.get(stack.pop()!) ?? []) {
      out.push(c);
      stack.push(c.pid);
    }
  }
  return out;
}

/**
 * RSS and CPU ticks now, of `procs` (this process's descendants, read once per sample). Renderers started
 * before the tabs opened (`ignore`: Chromium's own pages) are left out, and of the rest the `tabs` largest
 * are taken (a browser context also starts an idle renderer or two of ~75-160 MB; a training tab's
 * renderer, which also runs its worker, is well above them), by pid.
 */
function rssNow(
  procs: readonly ProcInfo[],
  coordinatorPid: number,
  ignore: ReadonlySet<number>,
  tabs: number,
): Omit<Sample, 't' | 'steps'> {
  const self = readProc(process.pid);
  const renderers = procs
    .filter((p) => p.cmdline.includes('--type=renderer') && !ignore.has(p.pid))
    .sort((a, b) => b.rssMb - a.rssMb)
    .slice(0, tabs)
    .sort((a, b) => a.pid - b.pid);
  const gpu = procs.find((p) => p.cmdline.includes('--type=gpu-process'));
  const coordinator = procs.find((p) => p.pid === coordinatorPid);
  return {
    coordinatorMb: coordinator?.rssMb ?? 0,
    renderersMb: renderers.map((r) => r.rssMb),
    gpuMb: gpu?.rssMb ?? 0,
    cpu: machineTicks((self?.cpuTicks ?? 0) + procs.reduce((sum, p) => sum + p.cpuTicks, 0)),
  };
}

/** The machine's CPU ticks from /proc/stat's `cpu` line: user nice system idle iowait irq softirq steal. */
function machineTicks(ours: number): CpuTicks | undefined {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
    const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
    const busy = user + nice + system + irq + softirq + (steal || 0);
    return { ours, machineBusy: busy, machineTotal: busy + idle + (iowait || 0) };
  } catch {
    return undefined; // not Linux: the wall-clock ratio stands alone
  }
}

// ---------------------------------------------------------------- coordinator

/** The real coordinator (test/support's spawner): the default `mlp` job with `epochs`, this dataset and build. */
function startCoordinator(dataset: string, epochs: number, dist: string | null): Promise<CoordinatorProcess> {
  return spawnCoordinator({
    job: { epochs, globalBatch: GLOBAL_BATCH, maxWorkers: 8 },
    datasetDir: dataset,
    adminToken: 'soak',
    extraArgs: dist ? ['--dist', dist] : [],
    startTimeoutMs: 60_000,
  });
}

// ---------------------------------------------------------------- one configuration

async function openTabs(browser: Browser, url: string, count: number): Promise<Page[]> {
  const pages: Page[] = [];
  for (let i = 0; i < count; i++) {
    const context = await browser.newContext({ viewport: { width: 900, height: 700 } });
    const page = await context.newPage();
    page.on('pageerror', (err) => console.error(`tab ${i + 1}: ${err.message}`));
    await page.goto(url, { waitUntil: 'load', timeout: 60_000 });
    pages.push(page);
  }
  return pages;
}

async function readSteps(config: Config, url: string, pages: Page[]): Promise<number> {
  if (config.kind === 'elastic') return (await fetchStatus(url, 10_000)).step;
  return pages[0].evaluate(() => window.tabswarm.step);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runConfig(config: Config, opts: SoakOptions): Promise<ConfigResult> {
  return (await runConfigSampled(config, opts)).result;
}

/** `runConfig`, with the samples behind the result (the soak test prints them when it fails). */
export async function runConfigSampled(
  config: Config,
  opts: SoakOptions,
): Promise<{ result: ConfigResult; samples: Sample[] }> {
  const restore = opts.nice === undefined ? null : setOwnNice(opts.nice);
  try {
    return await runConfigAtPriority(config, { ...opts, nice: restore === null ? undefined : opts.nice });
  } finally {
    if (restore !== null) setOwnNice(restore);
  }
}

/**
 * Sets this process's nice value (children spawned from now on inherit it) and returns the one it
 * had; on refusal (raising priority needs root) it warns and returns null.
 */
function setOwnNice(nice: number): number | null {
  const before = getPriority();
  try {
    setPriority(nice);
    return before;
  } catch (err) {
    console.error(`soak: cannot set nice ${nice} (${(err as Error).message}); running at ${before}`);
    return null;
  }
}

/**
 * Chromium sets its renderers' nice values itself (0 for a page, 5 for its own UI pages) instead of
 * keeping the one they inherited, so the sampler sets every descendant's back at each sample. Linux
 * keeps a nice value per thread (a tab's training worker and SwiftShader's threads are threads of
 * their processes), so it sets each thread's, from /proc/PID/task.
 */
function renice(procs: readonly ProcInfo[], nice: number): void {
  for (const p of procs) {
    let tids: number[];
    try {
      tids = readdirSync(`/proc/${p.pid}/task`).map(Number);
    } catch {
      continue; // exited while we looked
    }
    for (const tid of tids) {
      try {
        if (getPriority(tid) !== nice) setPriority(tid, nice);
      } catch {
        // exited while we looked
      }
    }
  }
}

async function runConfigAtPriority(
  config: Config,
  opts: SoakOptions,
): Promise<{ result: ConfigResult; samples: Sample[] }> {
  const name = config.kind === 'solo' ? 'solo' : `elastic ${config.tabs} tab${config.tabs > 1 ? 's' : ''}`;
  const coordinator = await startCoordinator(opts.dataset, 50, opts.dist);
  let browser: Browser | null = null;
  let bare: { close(): Promise<void> } | null = null;
  try {
    const ignore = new Set(descendants(process.pid).map((p) => p.pid));
    const tabs = config.kind === 'solo' ? 1 : config.tabs;
    let pages: Page[] = [];
    if (config.kind === 'solo') {
      browser = await launchSwarmChromium();
      for (const p of descendants(process.pid)) ignore.add(p.pid);
      pages = await openTabs(browser, `${coordinator.url}/?mode=solo&autostart=1&epochs=50&batch=${GLOBAL_BATCH}`, 1);
    } else {
      bare = await openBareTabs(`${coordinator.url}/?autostart=1`, tabs);
    }
    const deadline = Date.now() + 180_000;
    while ((await readSteps(config, coordinator.url, pages)) < 1) {
      if (Date.now() > deadline) throw new Error(`${name}: no step trained within 3 minutes`);
      await sleep(250);
    }
    const samples = await sampleRun(config, coordinator, pages, tabs, opts, ignore);
    return { result: summarise(name, tabs, samples), samples };
  } finally {
    await browser?.close().catch(() => undefined);
    await bare?.close().catch(() => undefined);
    await coordinator.stop();
  }
}

async function sampleRun(
  config: Config,
  coordinator: CoordinatorProcess,
  pages: Page[],
  tabs: number,
  opts: SoakOptions,
  ignore: ReadonlySet<number>,
): Promise<Sample[]> {
  if (opts.nice !== undefined) renice(descendants(process.pid), opts.nice);
  const t0 = performance.now();
  const first = await readSteps(config, coordinator.url, pages);
  const samples: Sample[] = [];
  const total = opts.minutes * 60;
  for (let k = 0; ; k++) {
    const procs = descendants(process.pid);
    if (opts.nice !== undefined) renice(procs, opts.nice);
    const t = (performance.now() - t0) / 1000;
    const steps = (await readSteps(config, coordinator.url, pages)) - first;
    samples.push({ t, steps, ...rssNow(procs, coordinator.child.pid!, ignore, tabs) });
    if (t >= total) break;
    const next = Math.min(total, (k + 1) * opts.sampleEverySec);
    await sleep(Math.max(0, (next - (performance.now() - t0) / 1000) * 1000));
  }
  const last = samples[samples.length - 1];
  console.error(
    `  ${config.kind === 'solo' ? 'solo' : `${config.tabs} tab(s)`}: ${last.steps} steps in ${last.t.toFixed(0)} s`,
  );
  return samples;
}

// ---------------------------------------------------------------- statistics (pure)

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

export function summarise(name: string, tabs: number, samples: readonly Sample[]): ConfigResult {
  const last = samples[samples.length - 1];
  const seconds = last.t;
  const stepsPerMinute: number[] = [];
  for (let m = 1; m * 60 <= seconds + 1e-6; m++)
    stepsPerMinute.push(stepsAt(samples, m * 60) - stepsAt(samples, (m - 1) * 60));
  const load = loadAdjustedLateEarly(samples);
  const per1k = (pick: (s: Sample) => number) => growth(samples, pick).per1k;
  const mb = (pick: (s: Sample) => number) => round1(growth(samples, pick).mb);
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
const round3 = (x: number) => Math.round(x * 1000) / 1000;

// ---------------------------------------------------------------- report

function printTable(results: readonly ConfigResult[]): void {
  const solo = results.find((r) => r.name === 'solo');
  const one = results.find((r) => r.name === 'elastic 1 tab');
  console.log('\nsteps per minute, minute by minute:');
  for (const r of results) console.log(`  ${r.name.padEnd(16)} ${r.stepsPerMinute.join(' ')}`);
  console.log('');
  const head = [
    'config',
    'steps',
    'samples/s',
    '/solo',
    '/1 tab',
    'late/early',
    'adjusted',
    'others',
    'MB/1k coord',
    'MB/1k renderer',
    'MB/1k gpu',
  ];
  const rows = results.map((r) => [
    r.name,
    String(r.steps),
    r.samplesPerSec.toFixed(0),
    solo ? (r.samplesPerSec / solo.samplesPerSec).toFixed(2) : '-',
    one ? (r.samplesPerSec / one.samplesPerSec).toFixed(2) : '-',
    r.lateEarly.toFixed(2),
    r.lateEarlyAdjusted.toFixed(2),
    `${Math.round(100 * r.othersShare.early)}/${Math.round(100 * r.othersShare.late)}%`,
    r.name === 'solo' ? '-' : r.mbPer1kSteps.coordinator.toFixed(2),
    r.mbPer1kSteps.renderers.map((x) => x.toFixed(2)).join(' '),
    r.mbPer1kSteps.gpu.toFixed(2),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i])).join('  ');
  console.log(line(head));
  for (const row of rows) console.log(line(row));
  console.log('\nRSS MB start -> end (coordinator | renderers | gpu):');
  for (const r of results) {
    const f = (x: ConfigResult['rssStartMb']) => `${x.coordinator} | ${x.renderers.join(' ')} | ${x.gpu}`;
    console.log(`  ${r.name.padEnd(16)} ${f(r.rssStartMb)}  ->  ${f(r.rssEndMb)}`);
  }
}

type RoundResult = ConfigResult & { round: number };

/** The solo result of `r`'s round, if that round ran one. */
const soloOf = (results: readonly RoundResult[], r: RoundResult) =>
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

async function main(): Promise<void> {
  const opts = parseOptions(process.argv.slice(2));
  const rounds = opts.rounds ?? 1;
  const results: RoundResult[] = [];
  for (let round = 1; round <= rounds; round++) {
    for (const config of opts.configs) {
      const label = config.kind === 'solo' ? 'solo' : `elastic, ${config.tabs} tab(s)`;
      console.error(`soak: ${label}, ${opts.minutes} min${rounds > 1 ? ` (round ${round} of ${rounds})` : ''}`);
      const { result, samples } = await runConfigSampled(config, opts);
      if (opts.timeline) console.error(`  ${result.name}: ${timeline(samples)}`);
      results.push({ ...result, round });
    }
  }
  for (let round = 1; round <= rounds; round++) {
    if (rounds > 1) console.log(`\nround ${round} of ${rounds}:`);
    printTable(results.filter((r) => r.round === round));
  }
  const overSolo = overSoloByRound(results);
  if (rounds > 1 && Object.keys(overSolo).length > 0) {
    console.log('\nsamples/s over solo of the same round (median):');
    for (const [name, v] of Object.entries(overSolo))
      console.log(
        `  ${name.padEnd(16)} ${v.ratios.map((x) => x.toFixed(2)).join(' ')}  (median ${v.median.toFixed(2)})`,
      );
  }
  console.log(
    JSON.stringify({
      bench: 'soak',
      minutes: opts.minutes,
      rounds,
      results: results.map((r) => {
        const solo = soloOf(results, r);
        return { ...r, overSolo: solo ? round3(r.samplesPerSec / solo.samplesPerSec) : null };
      }),
      overSoloMedian: Object.fromEntries(Object.entries(overSolo).map(([k, v]) => [k, v.median])),
    }),
  );
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err) => {
    console.error(`bench:soak: ${(err as Error).message}`);
    process.exit(1);
  });
}
