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
 * Goals: (issue 13) each local-mode configuration within 1 point of every-step fp32; (issue 24) each
 * overlapped configuration (`overlap32:int8`: outer steps overlapped with the next inner steps) within 1
 * point of the same configuration without overlap, at equal samples (the job's end) and at a fixed wall
 * time: at `--wall` seconds after the tabs opened this process asks for a checkpoint of the last commit
 * (admin `checkpoint`) and evaluates it at the end on the CPU in float64 (bench/lib/evaluate-snapshot.ts,
 * the same first `--test` images); a run done before then counts its final state.
 *
 * Options: --epochs 3  --train 60000 (training subset)  --test 10000  --wall 600 (s; 0: no wall-time figure)
 *          --configs every-step:none,local8:fp16,local8:int8,local32:fp16,local32:int8,overlap32:int8
 */
import type { Browser } from 'playwright-core';
import type { EvaluationView } from '../coordinator/admin/audit';
import type { StatusResponse, StatusSummary } from '../core/protocol/views';
import { FASHION_MNIST_DIR, launchChromium, WEB_BUILD_DIR } from '../test/support/browser';
import { commitsFrom } from '../tools/swarm/coordinator-api';
import { CoordinatorProcess } from '../test/support/coordinator-process';
import { Swarm } from '../test/support/swarm';
import { arg, chromiumVersion, exitUnlessReady } from './lib/common';
import { snapshotAccuracy } from './lib/evaluate-snapshot';
import { configName, parseConfig, sameConfig, type SyncConfig, syncField, withoutOverlap } from './lib/sync-configs';
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
  /** Accuracy of the last commit at `--wall` seconds (its step), or null without that figure. */
  wall: { seconds: number; step: number; accuracy: number } | null;
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

/**
 * At the fixed wall time: an admin checkpoint of the last commit (retried while a round re-forms, for at most
 * a minute). Returns its step, or null (the job was done already: its final state is the figure).
 */
async function checkpointAtWall(coordinator: CoordinatorProcess): Promise<number | null> {
  const end = performance.now() + 60_000;
  for (;;) {
    const status = await coordinator.status();
    if (status.state === 'done') return null;
    const res = await coordinator.admin('checkpoint');
    if (res.ok) return ((await res.json()) as { status: StatusSummary }).status.step;
    if (res.status !== 409 || performance.now() > end)
      throw new Error(`admin checkpoint: ${res.status} ${await res.text()}`);
    await new Promise((r) => setTimeout(r, 2000));
  }
}

/** Accuracy of the checkpoint of `step` (waited for, downloaded, evaluated here in float64 on the first `test` images). */
async function checkpointAccuracy(coordinator: CoordinatorProcess, step: number, test: number): Promise<number> {
  const end = performance.now() + 180_000;
  while (!(await coordinator.status()).checkpoints.some((c) => c.step === step)) {
    if (performance.now() > end) throw new Error(`no checkpoint of step ${step} in 3 minutes`);
    await new Promise((r) => setTimeout(r, 1000));
  }
  const res = await coordinator.fetch(`/api/checkpoints/${step}`);
  if (!res.ok) throw new Error(`GET /api/checkpoints/${step}: ${res.status}`);
  const bytes = new Uint8Array(await res.arrayBuffer());
  return (await snapshotAccuracy(bytes, FASHION_MNIST_DIR, test)).accuracy;
}

/** One configuration, start to the job's end (bounded by `timeoutMs`); everything it started is stopped. */
async function runOne(
  browser: Browser,
  config: SyncConfig,
  o: { epochs: number; train: number; test: number; timeoutMs: number; wallMs: number },
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
    /** The wall-time checkpoint's step: undefined before the wall time, null when the job was done by then. */
    let wallStep: number | null | undefined = o.wallMs > 0 ? undefined : null;
    while (status.state !== 'done') {
      if (wallStep === undefined && performance.now() - t0 >= o.wallMs) wallStep = await checkpointAtWall(coordinator);
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
    const wall =
      o.wallMs <= 0
        ? null
        : wallStep === undefined || wallStep === null
          ? { seconds: o.wallMs / 1000, step: status.step, accuracy: last.accuracy }
          : {
              seconds: o.wallMs / 1000,
              step: wallStep,
              accuracy: await checkpointAccuracy(coordinator, wallStep, o.test),
            };
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
      wall,
    };
  } finally {
    await swarm.closeAll().catch(() => {});
    await coordinator.stop().catch(() => {});
  }
}

const points = (delta: number | null) => (delta === null ? '–' : `${delta >= 0 ? '+' : ''}${delta.toFixed(2)}`);

function printTable(rows: Row[]): void {
  const ref = rows.find((r) => r.mode === 'every-step' && r.compression === 'none');
  process.stdout.write(
    'config                epochs  train   steps  commits  seconds  test images  accuracy %  at wall time % (step)  Δ vs every-step fp32  goal (≤1 pt)  audit\n',
  );
  for (const r of rows) {
    const delta = ref ? (r.accuracy - ref.accuracy) * 100 : null;
    const goal = r.mode === 'local' && !r.overlap && delta !== null ? (delta >= -GOAL_POINTS ? 'met' : 'MISSED') : '–';
    const wall = r.wall ? `${(r.wall.accuracy * 100).toFixed(2)} (${r.wall.step})` : '–';
    process.stdout.write(
      `${configName(r).padEnd(22)}${String(r.epochs).padStart(6)}  ${String(r.trainSamples).padStart(5)}  ${String(r.steps).padStart(6)}  ${String(r.commits).padStart(7)}  ${String(r.seconds).padStart(7)}  ${String(r.testSamples).padStart(11)}  ${(r.accuracy * 100).toFixed(2).padStart(10)}  ${wall.padStart(21)}  ${points(delta).padStart(20)}  ${goal.padStart(12)}  ${r.auditOk ? 'clean' : 'BROKEN'}\n`,
    );
  }
  // Issue 24: each overlapped configuration against the same one without overlap.
  for (const r of rows.filter((x) => x.overlap)) {
    const twin = rows.find((x) => sameConfig(x, withoutOverlap(r)));
    if (!twin) {
      process.stdout.write(
        `goal (issue 24): ${configName(r)}: no ${configName(withoutOverlap(r))} run to compare with\n`,
      );
      continue;
    }
    const equal = (r.accuracy - twin.accuracy) * 100;
    const wall = r.wall && twin.wall ? (r.wall.accuracy - twin.wall.accuracy) * 100 : null;
    const met = (d: number | null) => (d === null ? 'n/a' : d >= -GOAL_POINTS ? 'met' : 'MISSED');
    process.stdout.write(
      `goal (issue 24): ${configName(r)} against ${configName(twin)}: ${points(equal)} points at equal samples (≥ −${GOAL_POINTS}: ${met(equal)}), ${points(wall)} at ${r.wall?.seconds ?? '–'} s (${met(wall)}); ${r.seconds} s against ${twin.seconds} s to the end\n`,
    );
  }
}

async function main(): Promise<void> {
  exitUnlessReady('bench:sync-learning');
  const epochs = Number(arg('epochs', '3'));
  const train = Number(arg('train', '60000'));
  const test = Number(arg('test', '10000'));
  const configs = arg('configs', 'every-step:none,local8:fp16,local8:int8,local32:fp16,local32:int8,overlap32:int8')
    .split(',')
    .map(parseConfig);
  const wallMs = Number(arg('wall', '600')) * 1000;
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
      rows.push(await runOne(browser, config, { epochs, train, test, timeoutMs, wallMs }));
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
        ...(r.overlap ? { overlap: true } : {}),
        epochs: r.epochs,
        trainSamples: r.trainSamples,
        testSamples: r.testSamples,
        seconds: r.seconds,
        accuracy: round(r.accuracy),
        testLoss: r.testLoss === null ? null : round(r.testLoss),
        wall: r.wall && { seconds: r.wall.seconds, step: r.wall.step, accuracy: round(r.wall.accuracy) },
        auditOk: r.auditOk,
      })),
    })}\n`,
  );
  process.exit(0);
}

await main();
