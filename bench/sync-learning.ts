/**
 * `npm run bench:sync-learning` (tsx bench/sync-learning.ts): learning quality of local steps
 * (DiLoCo) and compressed sync against every-step fp32, on loopback (no test bed needed).
 *
 * Per configuration: a real coordinator process (job below: `mlp`, global batch 128, 3 tabs) and three
 * real headless Chromium tabs (WebGPU on SwiftShader here), run to the job's end; the job ends with
 * rank 0's evaluation of the committed state on the first `--test` test images (all 10,000 by
 * default), read from `GET /api/evaluations`. Every run trains on the same samples (the same epochs of
 * the same subset with the same seed), so the accuracies compare "at equal samples".
 *
 * Goal (issue 13): each local-mode configuration within 1 point of every-step fp32.
 *
 * Options: --epochs 3  --train 60000 (training subset)  --test 10000
 *          --configs every-step:none,local8:fp16,local8:int8,local32:fp16,local32:int8
 */
import type { Browser } from 'playwright-core';
import type { EvaluationView } from '../coordinator/admin/audit';
import type { StatusResponse } from '../core/protocol/views';
import { FASHION_MNIST_DIR, launchChromium, WEB_BUILD_DIR } from '../test/support/browser';
import { commitsFrom } from '../test/support/commit-log';
import { CoordinatorProcess } from '../test/support/coordinator-process';
import { Swarm } from '../test/support/swarm';
import { arg, chromiumVersion, exitUnlessReady } from './lib/common';
import { configName, parseConfig, type SyncConfig, syncField } from './lib/sync-configs';
import { GLOBAL_BATCH, TABS } from './lib/sync-figures';

/** The goal: local mode within this many accuracy points of every-step fp32. */
const GOAL_POINTS = 1;

interface Row extends SyncConfig {
  epochs: number;
  trainSamples: number;
  steps: number;
  commits: number;
  seconds: number;
  accuracy: number;
  testLoss: number | null;
  testSamples: number;
  restarts: number;
  auditOk: boolean;
}

/** The accepted evaluation of step `step`, polled from `GET /api/evaluations` every second for at most `timeoutMs`. */
async function finalEvaluation(
  coordinator: CoordinatorProcess,
  step: number,
  timeoutMs: number,
): Promise<EvaluationView> {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const { evaluations } = await coordinator.getJson<{ evaluations: EvaluationView[] }>('/api/evaluations?limit=1000');
    const found = evaluations.filter((e) => e.step === step).at(-1);
    if (found) return found;
    if (performance.now() > end) throw new Error(`no evaluation of the final step ${step} in ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** One configuration, start to the job's end (bounded by `timeoutMs`); everything it started is stopped. */
async function runOne(
  browser: Browser,
  config: SyncConfig,
  o: { epochs: number; train: number; test: number; timeoutMs: number },
): Promise<Row> {
  const job = {
    model: 'mlp',
    dataset: { name: 'fashion-mnist', ...(o.train < 60_000 ? { subset: o.train } : {}) },
    globalBatch: GLOBAL_BATCH,
    epochs: o.epochs,
    minWorkers: TABS,
    maxWorkers: TABS,
    sync: syncField(config),
    checkpointEvery: 1000,
    heartbeatMs: 2000,
    lastCallMs: 500,
    seed: 13,
    evalSamples: o.test,
  };
  const coordinator = await CoordinatorProcess.spawn({
    job,
    datasetDir: FASHION_MNIST_DIR,
    extraArgs: ['--dist', WEB_BUILD_DIR],
  });
  const swarm = new Swarm(browser, coordinator.url, { query: { testSubset: String(o.test) } });
  try {
    await swarm.openMany(TABS);
    const t0 = performance.now();
    const end = t0 + o.timeoutMs;
    let status: StatusResponse = await coordinator.status();
    let lastPrint = 0;
    while (status.state !== 'done') {
      if (status.state === 'failed') throw new Error(`job failed: ${JSON.stringify(status).slice(0, 400)}`);
      if (performance.now() > end) throw new Error(`not done in ${o.timeoutMs / 1000} s: step ${status.step}`);
      if (performance.now() - lastPrint > 15_000) {
        lastPrint = performance.now();
        process.stderr.write(
          `  ${configName(config)}: ${((performance.now() - t0) / 1000).toFixed(0)} s, step ${status.step}, epoch ${status.epoch}, world ${status.world.total}\n`,
        );
      }
      await new Promise((r) => setTimeout(r, 1000));
      status = await coordinator.status();
    }
    const seconds = (performance.now() - t0) / 1000;
    // The job's last evaluation (rank 0, on the final committed state) is logged when its result arrives.
    const last = await finalEvaluation(coordinator, status.step, 180_000);
    const commits = (await commitsFrom((path) => coordinator.getJson(path))).length;
    const audit = await coordinator.audit();
    for (const p of swarm.problems()) process.stderr.write(`  page problem: ${p}\n`);
    return {
      ...config,
      epochs: o.epochs,
      trainSamples: o.train,
      steps: status.step,
      commits,
      seconds: Math.round(seconds),
      accuracy: last.accuracy,
      testLoss: last.loss,
      testSamples: last.testSamples,
      restarts: status.restarts,
      auditOk: audit.ok,
    };
  } finally {
    await swarm.closeAll().catch(() => {});
    await coordinator.stop().catch(() => {});
  }
}

function printTable(rows: Row[]): void {
  const ref = rows.find((r) => r.mode === 'every-step' && r.compression === 'none');
  process.stdout.write(
    'config              epochs  train   steps  commits  seconds  test images  accuracy %  Δ vs every-step fp32  goal (≤1 pt)  audit\n',
  );
  for (const r of rows) {
    const delta = ref ? (r.accuracy - ref.accuracy) * 100 : null;
    const goal = r.mode === 'local' && delta !== null ? (delta >= -GOAL_POINTS ? 'met' : 'MISSED') : '–';
    process.stdout.write(
      `${configName(r).padEnd(20)}${String(r.epochs).padStart(6)}  ${String(r.trainSamples).padStart(5)}  ${String(r.steps).padStart(6)}  ${String(r.commits).padStart(7)}  ${String(r.seconds).padStart(7)}  ${String(r.testSamples).padStart(11)}  ${(r.accuracy * 100).toFixed(2).padStart(10)}  ${(delta === null ? '–' : `${delta >= 0 ? '+' : ''}${delta.toFixed(2)}`).padStart(20)}  ${goal.padStart(12)}  ${r.auditOk ? 'clean' : 'BROKEN'}\n`,
    );
  }
}

async function main(): Promise<void> {
  exitUnlessReady('bench:sync-learning');
  const epochs = Number(arg('epochs', '3'));
  const train = Number(arg('train', '60000'));
  const test = Number(arg('test', '10000'));
  const configs = arg('configs', 'every-step:none,local8:fp16,local8:int8,local32:fp16,local32:int8')
    .split(',')
    .map(parseConfig);
  const timeoutMs = Number(arg('timeout-min', '30')) * 60_000;
  const browser = await launchChromium();
  const stop = () => {
    browser.close().finally(() => process.exit(130));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const rows: Row[] = [];
  try {
    for (const config of configs) {
      process.stderr.write(`bench:sync-learning: ${configName(config)}, ${epochs} epochs of ${train} images…\n`);
      rows.push(await runOne(browser, config, { epochs, train, test, timeoutMs }));
      const r = rows.at(-1)!;
      process.stderr.write(`  → ${(r.accuracy * 100).toFixed(2)} % after ${r.seconds} s\n`);
    }
  } finally {
    await browser.close().catch(() => {});
  }
  printTable(rows);
  const chromium = chromiumVersion();
  const round = (x: number) => Math.round(x * 10_000) / 10_000;
  process.stdout.write(
    `${JSON.stringify({
      bench: 'sync_learning',
      at: new Date().toISOString(),
      chromium,
      model: 'mlp',
      globalBatch: GLOBAL_BATCH,
      tabs: TABS,
      runs: rows.map((r) => ({
        mode: r.mode,
        innerSteps: r.innerSteps,
        compression: r.compression,
        epochs: r.epochs,
        trainSamples: r.trainSamples,
        testSamples: r.testSamples,
        seconds: r.seconds,
        accuracy: round(r.accuracy),
        testLoss: r.testLoss === null ? null : round(r.testLoss),
        auditOk: r.auditOk,
      })),
    })}\n`,
  );
  process.exit(0);
}

await main();
