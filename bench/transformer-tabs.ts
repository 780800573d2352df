/**
 * `npm run bench:transformer-tabs`: the example language-model job as a user runs it. A real coordinator
 * (`coordinator/jobs/gpt-tiny-fortunes.json`: gpt-tiny on Debian's fortunes) and N volunteer tabs (each a
 * headless Chromium of its own, WebGPU on this machine's adapter, no DevTools attached) train in elastic
 * every-step mode; rank 0 evaluates the committed model on held-out text every `--eval-every` steps.
 * The bench polls `/api/status` and `/api/evaluations` and stops when the held-out loss reaches
 * `--target` bits per byte or after `--minutes`.
 *
 *   npm run bench:transformer-tabs -- --tabs 2 --minutes 30 --batch 8 --eval-every 10 --eval-windows 16
 *
 * Prints the held-out curve (step, wall minutes, bits per byte), progress while it runs, and one JSON line
 * starting `{"bench":"transformer-tabs"`. Results go to bench/RESULTS.md ("transformer learning").
 * What the job overrides and why: the global batch (the example's 16 windows take ~30 s per step on two
 * shared CPU cores; fewer windows per step give the curve more points in the time) and the evaluation
 * schedule (the example evaluates at epoch ends only, ~150,000 steps away).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fetchStatus, getJson } from '../tools/swarm/coordinator-api';
import { REPO_ROOT, spawnCoordinator } from '../test/support/coordinator-process';
import { openBareTabs } from './lib/bare-tabs';
import { arg, chromiumVersion, exitUnlessReady } from './lib/common';

interface Point {
  step: number;
  minutes: number;
  bits: number;
}

const tabs = Number(arg('tabs', '2'));
const minutes = Number(arg('minutes', '30'));
const batch = Number(arg('batch', '8'));
const evalEvery = Number(arg('eval-every', '10'));
const evalWindows = Number(arg('eval-windows', '16'));
const target = Number(arg('target', '3.0'));
const jobFile = arg('job', join(REPO_ROOT, 'coordinator/jobs/gpt-tiny-fortunes.json'));

for (const [name, v] of Object.entries({ tabs, minutes, batch, evalEvery, evalWindows, target })) {
  if (!Number.isFinite(v) || v <= 0) {
    process.stderr.write(`bench:transformer-tabs: --${name} must be a positive number\n`);
    process.exit(1);
  }
}

exitUnlessReady('bench:transformer-tabs');

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const job = {
    ...(JSON.parse(readFileSync(jobFile, 'utf8')) as Record<string, unknown>),
    globalBatch: batch,
    evalEvery,
    evalSamples: evalWindows,
  };
  const coordinator = await spawnCoordinator({ job, datasetDir: null, adminToken: 'bench', startTimeoutMs: 120_000 });
  const browsers = await openBareTabs(`${coordinator.url}/?autostart=1`, tabs);
  const curve: Point[] = [];
  let firstStepAt: number | null = null;
  let reachedMinutes: number | null = null;
  let lastStep = 0;
  const startedAt = Date.now();
  const stepsAt: { minutes: number; step: number }[] = [];
  try {
    let after = 0;
    let lastPrint = 0;
    while (true) {
      await sleep(5000);
      const status = await fetchStatus(coordinator.url, 10_000);
      lastStep = status.step;
      if (firstStepAt === null) {
        if (lastStep < 1) {
          if (Date.now() - startedAt > 10 * 60_000) throw new Error('no step committed within 10 minutes');
          continue;
        }
        firstStepAt = Date.now();
        process.stderr.write(`first commit after ${((firstStepAt - startedAt) / 1000).toFixed(0)} s (data, kernels)\n`);
      }
      const elapsedMin = (Date.now() - firstStepAt) / 60_000;
      stepsAt.push({ minutes: elapsedMin, step: lastStep });
      const page = await getJson<{ evaluations: { id: number; at: number; step: number; loss: number | null }[] }>(
        coordinator.url,
        `/api/evaluations?after=${after}`,
        10_000,
      );
      for (const e of page.evaluations) {
        after = e.id;
        if (e.loss === null) continue;
        const point = { step: e.step, minutes: (e.at - firstStepAt) / 60_000, bits: e.loss / Math.LN2 };
        curve.push(point);
        if (reachedMinutes === null && point.bits <= target) reachedMinutes = point.minutes;
      }
      if (Date.now() - lastPrint > 60_000) {
        lastPrint = Date.now();
        const last = curve.at(-1);
        process.stderr.write(
          `${elapsedMin.toFixed(1)} min: step ${lastStep}, held-out ${last ? `${last.bits.toFixed(3)} bits/byte at step ${last.step}` : '—'}\n`,
        );
      }
      if (reachedMinutes !== null || elapsedMin >= minutes) break;
    }
  } finally {
    await browsers.close().catch(() => undefined);
    await coordinator.stop();
  }
  const seconds = firstStepAt === null ? 0 : (Date.now() - firstStepAt) / 1000;
  console.log(`\ngpt-tiny on fortunes, ${tabs} tabs, global batch ${batch} windows of 128 bytes, every-step`);
  console.log('step   minutes  held-out bits/byte');
  for (const p of curve)
    console.log(`${String(p.step).padEnd(6)} ${p.minutes.toFixed(1).padStart(7)}  ${p.bits.toFixed(3)}`);
  const tokensPerSec = seconds > 0 ? (lastStep * batch * 128) / seconds : 0;
  console.log(
    `${lastStep} steps in ${(seconds / 60).toFixed(1)} min (${tokensPerSec.toFixed(0)} tokens/s); ` +
      (reachedMinutes === null
        ? `${target} bits/byte not reached`
        : `${target} bits/byte reached after ${reachedMinutes.toFixed(1)} min`),
  );
  console.log(
    JSON.stringify({
      bench: 'transformer-tabs',
      at: new Date().toISOString(),
      chromium: chromiumVersion(),
      tabs,
      globalBatch: batch,
      evalEvery,
      evalWindows,
      seconds: Math.round(seconds),
      steps: lastStep,
      tokensPerSec: Math.round(tokensPerSec),
      target,
      reachedMinutes: reachedMinutes === null ? null : Number(reachedMinutes.toFixed(2)),
      curve: curve.map((p) => ({
        step: p.step,
        minutes: Number(p.minutes.toFixed(2)),
        bits: Number(p.bits.toFixed(4)),
      })),
      stepAtMinute: stepsAt.filter((_, i) => i % 12 === 11).map((s) => s.step),
    }),
  );
}

main().catch((error) => {
  process.stderr.write(`bench:transformer-tabs: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
