/**
 * `npm run bench:verify`: what checking contributions costs (docs/threat-model.md). Three honest
 * headless Chromium tabs train the same job against a real coordinator process with no checks
 * (`none`), with sketches and the ring identity only (`p = 0`), and with recomputed spot checks at
 * p = 0.05 and p = 0.1 (the verifier process beside the coordinator). Configurations are interleaved
 * over `--rounds` rounds so a noisy machine hurts them alike; throughput is committed samples per second
 * between step `--warmup` and the job's end, from the commit log's server timestamps.
 *
 * Goal (issue 12): ≤ 10 % fewer samples/s at p = 0.05 than with none. On this machine the verifier's
 * SwiftShader runs on the same two cores as the three tabs, so its recomputation competes with them;
 * the table also gives the verifier's own time per check so the cost on a separate machine can be read.
 *
 *   npm run bench:verify -- [--rounds 2] [--steps 120] [--warmup 20] [--batch 96] [--model mlp]
 *
 * Prints a table and one line starting `{"bench":"verify"`.
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { FASHION_MNIST_DIR, launchChromium, WEB_BUILD_DIR } from '../test/support/browser';
import { commitsFrom } from '../test/support/commit-log';
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
const TABS = 3;

const ALL_CONFIGS: { name: string; verify?: { probability: number } }[] = [
  { name: 'none' },
  { name: 'p=0', verify: { probability: 0 } },
  { name: 'p=0.05', verify: { probability: 0.05 } },
  { name: 'p=0.1', verify: { probability: 0.1 } },
];
/** `--configs none,p=0`: a subset (the first is the reference of the "vs none" column). */
const CONFIGS = ALL_CONFIGS.filter((c) =>
  arg('configs', ALL_CONFIGS.map((x) => x.name).join(','))
    .split(',')
    .includes(c.name),
);

interface RunResult {
  config: string;
  samplesPerSec: number;
  checks: number;
  verifierMs: number[];
  caught: number;
}

async function run(browser: Browser, datasetDir: string, config: (typeof CONFIGS)[number]): Promise<RunResult> {
  const coordinator = await CoordinatorProcess.spawn({
    job: {
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
      ...(config.verify ? { verify: config.verify } : {}),
    },
    datasetDir,
    extraArgs: ['--dist', WEB_BUILD_DIR],
  });
  const swarm = new Swarm(browser, coordinator.url, { query: { testSubset: '100' } });
  try {
    await swarm.openMany(TABS);
    await coordinatorStatusUntil(coordinator, (s) => s.status === 'done', 'the job done', {
      timeoutMs: 20 * 60_000,
      pollMs: 500,
    });
    const commits = await commitsFrom((p) => coordinator.getJson(p));
    const from = commits.find((c) => c.step === WARMUP)!;
    const to = commits.at(-1)!;
    const samples = commits.filter((c) => c.step > WARMUP).reduce((n, c) => n + c.count, 0);
    const done = (await coordinator.events()).filter((e) => e.event === 'verification_done').map((e) => e.data);
    return {
      config: config.name,
      samplesPerSec: samples / ((to.committedAt - from.committedAt) / 1000),
      checks: done.length,
      verifierMs: done.map((d) => Number(d.ms)).filter(Number.isFinite),
      caught: done.filter((d) => Array.isArray(d.cheaters) && d.cheaters.length > 0).length,
    };
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

async function main(): Promise<void> {
  exitUnlessReady('bench:verify');
  const images = STEPS * BATCH;
  const datasetDir = await writeDatasetSlice(
    FASHION_MNIST_DIR,
    join(makeTempDir('tabswarm-bench-verify-'), 'fashion-mnist'),
    images,
    100,
  );
  const browser = await launchChromium();
  const results: RunResult[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const config of CONFIGS) {
        const r = await run(browser, datasetDir, config);
        results.push(r);
        process.stderr.write(
          `round ${round + 1}/${ROUNDS} ${config.name}: ${r.samplesPerSec.toFixed(1)} samples/s, ${r.checks} checks\n`,
        );
      }
    }
  } finally {
    await browser.close();
  }
  const rows = CONFIGS.map((c) => {
    const mine = results.filter((r) => r.config === c.name);
    return {
      config: c.name,
      samplesPerSec: median(mine.map((r) => r.samplesPerSec)),
      checks: mine.reduce((n, r) => n + r.checks, 0),
      verifierMsMedian: median(mine.flatMap((r) => r.verifierMs)),
      caught: mine.reduce((n, r) => n + r.caught, 0),
    };
  });
  const none = rows[0].samplesPerSec;
  console.log(`bench:verify — ${TABS} tabs, ${MODEL}, global batch ${BATCH}, ${STEPS} steps, ${ROUNDS} rounds`);
  console.log('config    samples/s   vs none   checks   verifier ms/check   false alarms');
  for (const r of rows) {
    console.log(
      `${r.config.padEnd(9)} ${r.samplesPerSec.toFixed(1).padStart(9)} ${`${((r.samplesPerSec / none - 1) * 100).toFixed(1)} %`.padStart(9)} ${String(r.checks).padStart(8)} ${Number.isFinite(r.verifierMsMedian) ? r.verifierMsMedian.toFixed(0).padStart(19) : '—'.padStart(19)} ${String(r.caught).padStart(14)}`,
    );
  }
  const at05 = rows.find((r) => r.config === 'p=0.05');
  const overhead = at05 ? 1 - at05.samplesPerSec / none : Number.NaN;
  console.log(
    `goal ≤ 10 % overhead at p = 0.05: ${(overhead * 100).toFixed(1)} % — ${overhead <= 0.1 ? 'met' : 'MISSED'}`,
  );
  console.log(
    JSON.stringify({
      bench: 'verify',
      chromium: chromiumVersion(),
      tabs: TABS,
      model: MODEL,
      globalBatch: BATCH,
      steps: STEPS,
      rounds: ROUNDS,
      rows,
      overheadAt005: overhead,
      goalMet: overhead <= 0.1,
    }),
  );
}

main().catch((error) => {
  process.stderr.write(`bench:verify: ${(error as Error).stack ?? error}\n`);
  process.exit(1);
});
