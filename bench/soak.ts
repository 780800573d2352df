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
 * This file runs the configurations and prints; the statistics are bench/lib/soak-stats.ts, the /proc
 * sampling and nice values bench/lib/proc-sampler.ts.
 */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { resolveDatasetDir } from '../coordinator/config/startup-config';
import { launchSwarmChromium } from '../tools/swarm/chromium';
import { fetchStatus } from '../tools/swarm/coordinator-api';
import { type CoordinatorProcess, spawnCoordinator } from '../test/support/coordinator-process';
import { openBareTabs } from './lib/bare-tabs';
import { descendants, renice, rssNow, setOwnNice } from './lib/proc-sampler';
import {
  type ConfigResult,
  GLOBAL_BATCH,
  overSoloByRound,
  type RoundResult,
  round3,
  type Sample,
  soloOf,
  summarise,
  timeline,
} from './lib/soak-stats';

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
    'slope renderer (jump)',
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
    r.trend.renderers.map((x) => `${x.leak.toFixed(1)} (${x.jumpMb.toFixed(0)})`).join(' '),
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
