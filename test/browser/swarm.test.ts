/**
 * `tabswarm swarm` end to end: the CLI (a child process, so what users run is what is tested) drives
 * three headless Chromium tabs against a real coordinator process with a fixed-seed schedule that
 * closes, crashes and adds tabs; the run must pass its audit and make progress, and its JSON line
 * must carry the same schedule the pure function gives for that seed. A dead URL must fail in seconds
 * with one clear line. With `--job FILE` instead of `--url` the swarm runs a coordinator of its own
 * with that job, trains against it, and removes its data folder at the end.
 *
 * Small on purpose (docs/chromium.md: WebGPU on SwiftShader is slow, and CPU is shared): `tiny-mlp`, global
 * batch 32, 2,000 seeded fake training images, at most 4 tabs, 30 s of chaos. The coordinator serves
 * the Vite build in `TABSWARM_DIST` (default `dist/`, which `npm test` builds first).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chaosSchedule } from '../../tools/swarm/chaos-schedule';
import type { SwarmReport } from '../../tools/swarm/swarm-report';
import { referenceIsCommitPoint } from '../support/hole-free-layout';
import { skipWithoutChromium, skipWithoutWebBuild, WEB_BUILD_DIR } from '../support/browser';
import { CoordinatorProcess, runSwarmCli } from '../support/coordinator-process';
import { makeTempDir, writeFakeIdxDataset } from '../support/fake-dataset';

const job = {
  model: 'tiny-mlp',
  optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
  globalBatch: 32,
  // Long enough that the job cannot finish inside the run: the chaos must meet a training world.
  epochs: 50,
  dataset: { name: 'fashion-mnist', subset: 2000 },
  minWorkers: 1,
  maxWorkers: 4,
  commitEvery: 1,
  checkpointEvery: 8,
  heartbeatMs: 1000,
  lastCallMs: 300,
  seed: 11,
};

/** Seed 12 with these rates: close t1, join t4, crash t2, close t4, join t5, crash t3, join t6 (never over 4 tabs). */
const chaos = { seed: 12, duration: 30, workers: 3, closeEvery: 10, crashEvery: 12, joinEvery: 9, maxTabs: 4 };

const skip = skipWithoutChromium() || skipWithoutWebBuild();

async function freePortThenClosed(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

describe.skipIf(skip)('tabswarm swarm against a real coordinator', () => {
  let coordinator: CoordinatorProcess;

  beforeAll(async () => {
    const datasetDir = writeFakeIdxDataset(join(makeTempDir('tabswarm-swarm-'), 'fake-mnist'), {
      trainCount: 2000,
      testCount: 32,
      seed: 5,
    });
    coordinator = await CoordinatorProcess.spawn({ job, datasetDir, extraArgs: ['--dist', WEB_BUILD_DIR] });
  });

  afterAll(async () => {
    await coordinator?.stop();
  });

  it('a 3-tab swarm that closes, crashes and adds tabs passes its audit and makes progress', async () => {
    const args = [
      'swarm',
      '--url',
      `${coordinator.url}/?testSubset=0`,
      '--workers',
      String(chaos.workers),
      '--duration',
      String(chaos.duration),
      '--seed',
      String(chaos.seed),
      '--close-every',
      String(chaos.closeEvery),
      '--crash-every',
      String(chaos.crashEvery),
      '--join-every',
      String(chaos.joinEvery),
      '--max-tabs',
      String(chaos.maxTabs),
      '--json',
    ];
    const result = await runSwarmCli(args, { timeoutMs: 400_000 });
    const context = `exit ${result.code}\nstderr:\n${result.stderr.slice(-6000)}\ncoordinator:\n${coordinator.output.slice(-3000)}`;
    const lines = result.stdout.trim().split('\n');
    expect(lines, context).toHaveLength(1);
    const { swarm: report } = JSON.parse(lines[0]) as { swarm: SwarmReport };
    const summary = `${context}\nreport: ${JSON.stringify({ ...report, throughput: report.throughput.length })}`;
    const table = result.stderr.slice(result.stderr.lastIndexOf('tabswarm swarm http'));
    console.log(table);

    // Same seed, same schedule, in another process.
    const expected = chaosSchedule(chaos);
    expect(report.schedule).toEqual(expected);
    expect(expected.map((e) => e.kind)).toEqual(expect.arrayContaining(['close', 'crash', 'join']));

    expect(result.code, summary).toBe(0);
    expect(report.ok, summary).toBe(true);
    expect(report.failures).toEqual([]);

    // The faults happened, on tabs that were training, and the world recovered from them.
    const done = (kind: string) => report.events.filter((e) => e.kind === kind && e.outcome === 'done');
    expect(done('close').length, summary).toBeGreaterThanOrEqual(1);
    expect(done('crash').length, summary).toBeGreaterThanOrEqual(1);
    expect(done('join').length, summary).toBeGreaterThanOrEqual(1);
    const rankFaults = report.recoveries.filter((r) => r.member);
    expect(rankFaults.length, summary).toBeGreaterThanOrEqual(2);
    expect(rankFaults.filter((r) => r.recovered).length, summary).toBeGreaterThanOrEqual(1);
    for (const r of rankFaults.filter((x) => x.recovered)) {
      expect(r.durationMs, summary).toBeGreaterThanOrEqual(0);
      expect(r.stepsLost, summary).toBeGreaterThanOrEqual(0);
    }
    expect(
      report.joins.some((j) => j.admittedAfterMs !== null),
      summary,
    ).toBe(true);

    // Progress, as the report says and as the coordinator says.
    expect(report.steps.committedDuringChaos, summary).toBeGreaterThan(0);
    // The coordinator's record holds what the report counted, unless the swarm's closing left a round of tabs
    // that never held the state (a late joiner, its holders closed first): then the record rolls back to the
    // stored checkpoint, as it must (seen once: 259 → 256).
    const status = await coordinator.status();
    if (status.step < report.steps.atEnd) {
      const rollbacks = (await coordinator.events()).filter(
        (e) =>
          e.event === 'record_rolled_back' &&
          e.data.reason === 'no participant holds the last committed state' &&
          (e.data.from as number) >= report.steps.atEnd,
      );
      expect(
        rollbacks.map((e) => e.data.to),
        `${summary}\nthe record is at ${status.step}, below the report's ${report.steps.atEnd}`,
      ).toContain(status.step);
    }
    expect(report.throughput.length, summary).toBeGreaterThan(3);

    // The audit the report carries is the coordinator's own verdict.
    expect(report.audit, summary).toMatchObject({
      ok: true,
      duplicates: 0,
      missing: 0,
      discontinuities: 0,
      recordAgrees: true,
    });
    const audit = await coordinator.audit();
    expect(audit.ok).toBe(true);

    // Crashes were collected, and every one of them was ordered by the schedule.
    expect(report.problems.crashes.length).toBe(done('crash').length);
    expect(report.problems.unexpectedCrashes, summary).toBe(0);

    // The table went to stderr, with its verdict.
    expect(result.stderr).toMatch(/verdict: PASS/);
  });

  it('fails fast with one clear line when no coordinator answers at the URL', async () => {
    const port = await freePortThenClosed();
    const started = performance.now();
    const result = await runSwarmCli(
      ['swarm', '--url', `http://127.0.0.1:${port}`, '--workers', '2', '--seed', '1', '--json'],
      { timeoutMs: 60_000 },
    );
    const seconds = (performance.now() - started) / 1000;
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr.trim().split('\n')).toEqual([
      `tabswarm swarm: no coordinator at http://127.0.0.1:${port} (connection refused): start one with \`tabswarm coordinator\` (or npm start) or fix --url`,
    ]);
    // Process start-up (tsx) included; the probe itself gives up within 3 s.
    expect(seconds).toBeLessThan(15);
  });
});

describe.skipIf(skip)('tabswarm swarm --job: a coordinator of its own', () => {
  it('runs the job file given, passes its audit, reports the sync mode, and removes its data folder', async () => {
    const dir = makeTempDir('tabswarm-swarm-job-');
    const datasetDir = writeFakeIdxDataset(join(dir, 'fake-mnist'), { trainCount: 2000, testCount: 32, seed: 5 });
    const jobFile = join(dir, 'job.json');
    writeFileSync(
      jobFile,
      // A chaos run in local sync mode is what `--job` is for (outer steps of 8 inner steps, int8 wire).
      JSON.stringify({
        ...job,
        evalSamples: 0,
        commitEvery: undefined,
        sync: { mode: 'local', innerSteps: 8, compression: 'int8' },
      }),
    );
    const result = await runSwarmCli(
      [
        'swarm',
        '--job',
        jobFile,
        '--dataset',
        datasetDir,
        '--dist',
        WEB_BUILD_DIR,
        '--workers',
        '2',
        '--duration',
        '4',
        '--seed',
        '5',
        '--json',
      ],
      { timeoutMs: 300_000 },
    );
    const context = `exit ${result.code}\nstderr:\n${result.stderr.slice(-6000)}`;
    expect(result.code, context).toBe(0);
    const { swarm: report } = JSON.parse(result.stdout.trim()) as { swarm: SwarmReport };
    expect(report.ok, context).toBe(true);
    expect(report.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    // The job of the file, not a default one: tiny-mlp, batch 32 over the 2,000 images for 50 epochs.
    expect(report.job).toMatchObject({ model: 'tiny-mlp', globalBatch: 32, datasetSize: 2000, epochs: 50 });
    expect(report.job.sync).toBe('local, H = 8, int8, outer Nesterov lr 0.7 m 0.9');
    // The coordinator's run totals: real tabs computed for part of the wall time it measured.
    expect(report.usage?.utilization, context).toBeGreaterThan(0);
    expect(report.usage?.utilization, context).toBeLessThanOrEqual(1);
    expect(report.steps.atEnd, context).toBeGreaterThan(0);
    // Commits only at outer steps: every 8th step of an epoch (63 steps each) or an epoch's end (no
    // churn here, so no outer step was committed partially and the layout is the hole-free one).
    const plan = { datasetSize: 2000, globalBatch: 32, epochs: 50, commitEvery: 8 };
    expect(referenceIsCommitPoint(report.steps.atEnd, plan), `step ${report.steps.atEnd} is an outer step`).toBe(true);
    // Outer steps sent int8 pseudo-gradients: bytes per sample are counted from the tabs' reports.
    expect(report.usage?.bytesPerSample, context).toBeGreaterThan(0);
    expect(report.audit, context).toMatchObject({ ok: true, duplicates: 0, missing: 0 });
    const dataDir = /data in (\S+), removed at the end/.exec(result.stderr)?.[1];
    expect(dataDir, context).toBeDefined();
    expect(existsSync(dataDir!)).toBe(false);
  });
});
