/**
 * `npm run bench:verify`: what checking contributions costs, and how fast it catches a liar
 * (docs/threat-model.md), in every-step sync and in local sync mode (DiLoCo). Three honest headless
 * Chromium tabs train the same job against a real coordinator process in three ways per mode:
 *
 * - `off`: `"verify": false` (no sketches, no checks: the reference);
 * - `default`: the job's default rate (0.05 per commit) for every worker, as a swarm of trusted workers
 *   runs it at steady state (`newcomer.checks: 0`);
 * - `newcomer`: every worker at the newcomer rate (0.5 per commit), what a swarm of new workers pays
 *   until each passed its checks (adaptive-trust.ts).
 *
 * Configurations are interleaved over `--rounds` rounds so a noisy machine hurts them alike; throughput
 * is committed samples per second from step `--warmup` to the job's end (server timestamps). The
 * detection figures are computed from each run's checks: the rate, and the lag (commits between a
 * check's draw and its verdict, measured), give the chance a rank lying at every commit from some
 * commit on is caught within n commits: 1 − (1 − p)^(n − lag) (a check per rank per commit in local mode,
 * per commit in every-step mode).
 *
 *   npm run bench:verify -- [--rounds 2] [--steps 120] [--warmup 20] [--batch 96] [--model mlp] [--inner 8]
 *     [--modes every-step,local] [--configs off,default,newcomer]
 *
 * Goal (issue 21): ≤ 5 % fewer samples/s at the default rate than off, at steady state. On this machine
 * the verifier's SwiftShader runs on the same two cores as the three tabs, so its recomputation competes
 * with them; the table also gives the verifier's own time per check.
 *
 * Prints a table and one line starting `{"bench":"verify"`.
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { FASHION_MNIST_DIR, launchChromium, WEB_BUILD_DIR } from '../test/support/browser';
import { commitsFrom } from '../tools/swarm/coordinator-api';
import { CoordinatorProcess } from '../test/support/coordinator-process';
import { makeTempDir } from '../test/support/fake-dataset';
import { writeDatasetSlice } from '../test/support/small-dataset';
import { coordinatorStatusUntil, Swarm } from '../test/support/swarm';
import { arg, chromiumVersion, exitUnlessReady } from './lib/common';

const ROUNDS = Number(arg('rounds', '2'));
const STEPS = Number(arg('steps', '120'));
const WARMUP = Number(arg('warmup', '20'));
const BATCH = Number(arg('batch', '96'));
const MODEL = arg('model', 'mlp');
const INNER = Number(arg('inner', '8'));
const TABS = 3;

type Mode = 'every-step' | 'local';
const MODES = arg('modes', 'every-step,local').split(',') as Mode[];

const ALL_CONFIGS: { name: string; verify: false | Record<string, unknown>; rate: number }[] = [
  { name: 'off', verify: false, rate: 0 },
  { name: 'default', verify: { probability: 0.05, newcomer: { probability: 0.05, checks: 0 } }, rate: 0.05 },
  { name: 'newcomer', verify: { probability: 0.5, newcomer: { probability: 0.5, checks: 0 } }, rate: 0.5 },
];
/** `--configs off,default`: a subset (the first is the reference of the "vs off" column). */
const CONFIGS = ALL_CONFIGS.filter((c) =>
  arg('configs', ALL_CONFIGS.map((x) => x.name).join(','))
    .split(',')
    .includes(c.name),
);

interface RunResult {
  mode: Mode;
  config: string;
  samplesPerSec: number;
  commits: number;
  checks: number;
  /** Commits between each check's draw and its verdict. */
  lags: number[];
  verifierMs: number[];
  caught: number;
  held: number;
}

function jobOf(mode: Mode, verify: false | Record<string, unknown>) {
  return {
    model: MODEL,
    globalBatch: BATCH,
    epochs: 1,
    minWorkers: TABS,
    maxWorkers: TABS,
    checkpointEvery: 50,
    heartbeatMs: 2000,
    lastCallMs: 300,
    evalSamples: 0,
    seed: 5,
    ...(mode === 'local' ? { sync: { mode: 'local', innerSteps: INNER, compression: 'int8' } } : {}),
    verify,
  };
}

/**
 * Commits between each check's commit and its verdict: the commits the record made after the checked
 * step before the verifier's answer arrived (event and commit times are the server's clock).
 */
function checkLags(
  events: { event: string; data: Record<string, unknown>; at?: number }[],
  commits: { step: number; committedAt: number }[],
): number[] {
  return events
    .filter((e) => e.event === 'verification_done' && typeof e.at === 'number')
    .map((e) => commits.filter((c) => c.step > Number(e.data.step) && c.committedAt <= e.at!).length);
}

async function run(browser: Browser, datasetDir: string, mode: Mode, config: (typeof CONFIGS)[number]) {
  const coordinator = await CoordinatorProcess.spawn({
    job: jobOf(mode, config.verify),
    datasetDir,
    extraArgs: ['--dist', WEB_BUILD_DIR],
    startTimeoutMs: 120_000,
  });
  const swarm = new Swarm(browser, coordinator.url, { query: { testSubset: '100' } });
  try {
    await swarm.openMany(TABS);
    await coordinatorStatusUntil(coordinator, (s) => s.status === 'done', 'the job done', {
      timeoutMs: 20 * 60_000,
      pollMs: 500,
    });
    const commits = await commitsFrom((p) => coordinator.getJson(p));
    const from = commits.find((c) => c.step >= WARMUP)!;
    const to = commits.at(-1)!;
    const samples = commits.filter((c) => c.step > from.step).reduce((n, c) => n + c.count, 0);
    const events = await coordinator.events();
    const done = events.filter((e) => e.event === 'verification_done').map((e) => e.data);
    return {
      mode,
      config: config.name,
      samplesPerSec: samples / ((to.committedAt - from.committedAt) / 1000),
      commits: commits.length,
      checks: done.length,
      lags: checkLags(events, commits),
      verifierMs: done.map((d) => Number(d.ms)).filter(Number.isFinite),
      caught: done.filter((d) => Array.isArray(d.cheaters) && d.cheaters.length > 0).length,
      held: events.filter((e) => e.event === 'commit_held').length,
    } satisfies RunResult;
  } finally {
    await swarm.closeAll();
    await coordinator.stop();
  }
}

/** The median (the mean of the middle two for an even count). */
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
};

/** P(a rank lying at every commit is caught within n commits) at `rate` with a verdict `lag` commits after the draw. */
const detection = (rate: number, lag: number, n: number) => (rate > 0 ? 1 - (1 - rate) ** Math.max(0, n - lag) : 0);

function summarize(results: RunResult[]) {
  return MODES.flatMap((mode) => {
    const offRate = median(
      results.filter((r) => r.mode === mode && r.config === CONFIGS[0].name).map((r) => r.samplesPerSec),
    );
    return CONFIGS.map((c) => {
      const mine = results.filter((r) => r.mode === mode && r.config === c.name);
      const samplesPerSec = median(mine.map((r) => r.samplesPerSec));
      const lag = median(mine.flatMap((r) => r.lags));
      const lagOr0 = Number.isFinite(lag) ? Math.ceil(lag) : 0;
      return {
        mode,
        config: c.name,
        rate: c.rate,
        samplesPerSec,
        vsOff: samplesPerSec / offRate - 1,
        checks: mine.reduce((n, r) => n + r.checks, 0),
        commits: mine.reduce((n, r) => n + r.commits, 0),
        lagCommits: Number.isFinite(lag) ? lag : null,
        held: mine.reduce((n, r) => n + r.held, 0),
        verifierMsMedian: median(mine.flatMap((r) => r.verifierMs)),
        caught: mine.reduce((n, r) => n + r.caught, 0),
        detection: Object.fromEntries([5, 10, 20, 50].map((n) => [n, detection(c.rate, lagOr0, n)])),
      };
    });
  });
}

async function main(): Promise<void> {
  exitUnlessReady('bench:verify');
  const datasetDir = await writeDatasetSlice(
    FASHION_MNIST_DIR,
    join(makeTempDir('tabswarm-bench-verify-'), 'fashion-mnist'),
    STEPS * BATCH,
    100,
  );
  const browser = await launchChromium();
  const results: RunResult[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++)
      for (const mode of MODES)
        for (const config of CONFIGS) {
          const r = await run(browser, datasetDir, mode, config);
          results.push(r);
          process.stderr.write(
            `round ${round + 1}/${ROUNDS} ${mode} ${config.name}: ${r.samplesPerSec.toFixed(1)} samples/s, ${r.checks} checks over ${r.commits} commits, ${r.held} held\n`,
          );
        }
  } finally {
    await browser.close();
  }
  const rows = summarize(results);
  console.log(
    `bench:verify — ${TABS} tabs, ${MODEL}, global batch ${BATCH}, ${STEPS} steps (local: H = ${INNER}, int8), ${ROUNDS} rounds`,
  );
  console.log(
    'mode        config     rate  samples/s  vs off  checks/commits  lag  held  verifier ms  P(caught ≤5/10/20/50 commits)',
  );
  for (const r of rows) {
    const caught = Object.values(r.detection)
      .map((p) => `${(p * 100).toFixed(0)}%`)
      .join('/');
    console.log(
      `${r.mode.padEnd(11)} ${r.config.padEnd(9)} ${r.rate.toFixed(2).padStart(5)} ${r.samplesPerSec.toFixed(1).padStart(10)} ${`${(r.vsOff * 100).toFixed(1)}%`.padStart(7)} ${`${r.checks}/${r.commits}`.padStart(15)} ${r.lagCommits === null ? '—'.padStart(4) : r.lagCommits.toFixed(1).padStart(4)} ${String(r.held).padStart(5)} ${Number.isFinite(r.verifierMsMedian) ? r.verifierMsMedian.toFixed(0).padStart(12) : '—'.padStart(12)}  ${caught}`,
    );
  }
  const goals = MODES.map((mode) => {
    const row = rows.find((r) => r.mode === mode && r.config === 'default');
    return { mode, overhead: row ? -row.vsOff : Number.NaN };
  });
  for (const g of goals)
    console.log(
      `goal ≤ 5 % at the default rate (${g.mode}): ${(g.overhead * 100).toFixed(1)} % — ${g.overhead <= 0.05 ? 'met' : 'MISSED'}`,
    );
  console.log(
    JSON.stringify({
      bench: 'verify',
      chromium: chromiumVersion(),
      tabs: TABS,
      model: MODEL,
      globalBatch: BATCH,
      steps: STEPS,
      innerSteps: INNER,
      rounds: ROUNDS,
      rows,
      goals,
    }),
  );
}

main().catch((error) => {
  process.stderr.write(`bench:verify: ${(error as Error).stack ?? error}\n`);
  process.exit(1);
});
