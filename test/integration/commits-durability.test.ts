/**
 * Rounds form and steps commit against the real coordinator process; the store survives `kill -9` in
 * the middle of a stream of commits: after a restart on the same data dir, /api/status and /api/audit
 * show exactly what was committed (at least every step a worker was told about — `committed` is sent
 * only after the transaction — and no step twice), and training resumes to the end of the job with
 * every index of every epoch committed exactly once.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { AuditReport } from '../../coordinator/admin/audit';
import { type CoordinatorProcess, spawnCoordinator } from '../support/coordinator-process';
import { SimTrainer, simulatedStateHash } from '../support/sim-trainer';
import { coordinatorStatusUntil } from '../support/swarm';
import { jobPublic, parseJobSpec } from '../../core/training/job';
import { referenceStepPosition, referenceTotalSteps } from '../support/hole-free-layout';

// 300 images / 16 per step = 19 steps per epoch (the last one short: 12), 2 epochs.
const JOB = {
  model: 'tiny-mlp',
  globalBatch: 16,
  epochs: 2,
  minWorkers: 2,
  maxWorkers: 3,
  lastCallMs: 50,
  heartbeatMs: 2000,
  checkpointEvery: 4,
};
const PLAN = jobPublic(parseJobSpec(JOB), 300);
const TOTAL = referenceTotalSteps(PLAN);

/** Samples committed by steps 1..step, computed from the plan alone. */
function samplesThrough(step: number): number {
  let sum = 0;
  for (let s = 1; s <= step; s++) sum += referenceStepPosition(s, PLAN).count;
  return sum;
}

/** Every epoch of the job finished with each of the 300 indices committed exactly once. */
function expectEveryEpochCommittedOnce(audit: AuditReport, extra: Record<string, unknown> = {}): void {
  expect(audit.epochs).toHaveLength(PLAN.epochs);
  for (const epoch of audit.epochs) {
    expect(epoch).toMatchObject({
      finished: true,
      committed: 300,
      positions: 300,
      duplicates: [],
      neverCommitted: [],
      ...extra,
    });
  }
}

const running: CoordinatorProcess[] = [];
const trainers: SimTrainer[] = [];
afterEach(async () => {
  for (const t of trainers.splice(0)) {
    t.stop();
    await t.worker.terminate();
  }
  for (const p of running.splice(0)) await p.kill9();
});

async function start(opts: Parameters<typeof spawnCoordinator>[0] = {}): Promise<CoordinatorProcess> {
  const proc = await spawnCoordinator({ job: JOB, ...opts });
  running.push(proc);
  return proc;
}

async function join(
  proc: CoordinatorProcess,
  extra: Partial<Parameters<typeof SimTrainer.join>[1]> = {},
): Promise<SimTrainer> {
  const t = await SimTrainer.join(proc.wsUrl, { httpUrl: proc.url, ...extra });
  trainers.push(t);
  return t;
}

async function rejoin(previous: SimTrainer, proc: CoordinatorProcess): Promise<SimTrainer> {
  const t = await SimTrainer.rejoin(previous, proc.wsUrl, { httpUrl: proc.url });
  trainers.push(t);
  return t;
}

describe('rounds and commits', () => {
  it('forms a round of two once both joined, and commits steps reported with equal hashes', async () => {
    const proc = await start();
    const a = await join(proc, { stopAfterStep: 6 });
    expect((await proc.status()).state).toBe('gathering');
    const b = await join(proc, { stopAfterStep: 6 });
    await Promise.all([a.untilCommitted(6), b.untilCommitted(6)]);
    expect(a.committed).toEqual([1, 2, 3, 4, 5, 6]);
    expect(b.committed).toEqual(a.committed);
    // Honest workers are never told off.
    expect([...a.errors, ...b.errors]).toEqual([]);
    expect(new Set([a.rank, b.rank])).toEqual(new Set([0, 1]));

    const status = await proc.status();
    expect(status).toMatchObject({
      state: 'training',
      step: 6,
      epoch: 0,
      processedInEpoch: samplesThrough(6),
      restarts: 0,
    });
    expect(status.lastCommit).toEqual({ step: 6, hash: simulatedStateHash(PLAN, 6) });
    expect(status.world.items.map((w: { rank: number }) => w.rank).sort()).toEqual([0, 1]);
    expect(status.world.items.reduce((sum: number, w: { share: number }) => sum + w.share, 0)).toBeCloseTo(1, 12);

    const audit = await proc.audit();
    expect(audit).toMatchObject({ ok: true, commitRows: 6, lastRowStep: 6, recordAgrees: true });
    expect(audit.epochs[0]).toMatchObject({
      committed: samplesThrough(6),
      positions: samplesThrough(6),
      duplicates: [],
    });
    // The checkpoint of step 4 was asked of rank 0 and uploaded.
    const rank0 = a.rank === 0 ? a : b;
    await rank0.until(() => rank0.uploads.some((u) => u.step === 4), 'uploaded step 4');
    expect(rank0.uploads.find((u) => u.step === 4)?.status).toBe(201);
    expect((await proc.status()).latestCheckpoint?.step).toBe(4);
  });

  it('runs a whole job (2 epochs) to done: every index committed exactly once per epoch', async () => {
    const proc = await start();
    const a = await join(proc);
    const b = await join(proc);
    await Promise.all([a.untilDone(), b.untilDone()]);
    const status = await proc.status();
    expect(status).toMatchObject({ state: 'done', step: TOTAL, epoch: 2 });
    const audit = await proc.audit();
    expect(audit.ok).toBe(true);
    expect(audit.epochs).toHaveLength(2);
    expectEveryEpochCommittedOnce(audit, { discontinuities: 0 });
    // The job's last step was checkpointed. `done` goes out with the request for that checkpoint, so the
    // upload may still be on its way when the workers stop: wait for the coordinator to store it.
    const stored = await coordinatorStatusUntil(
      proc,
      (s) => s.latestCheckpoint?.step === TOTAL,
      'the last checkpoint',
      {
        timeoutMs: 30_000,
        pollMs: 100,
      },
    );
    expect(stored.status.latestCheckpoint?.step).toBe(TOTAL);
  });
});

describe('kill -9 during a stream of commits', () => {
  it('restarts on the same data dir with exactly the committed steps, no duplicates, and resumes to the end', async () => {
    let proc = await start();
    const runId = (await proc.status()).runId;
    let a = await join(proc);
    let b = await join(proc);
    const killAt = [5, 17, 29];
    const seen: number[] = [];
    for (const target of killAt) {
      // Commits keep streaming (the trainers report the next step as soon as `committed` arrives).
      await Promise.race([a.untilCommitted(target), b.untilCommitted(target)]);
      await proc.kill9();
      const told = Math.max(a.lastCommitted, b.lastCommitted);
      seen.push(told);

      proc = await start({ dataDir: proc.dataDir });
      const status = await proc.status();
      const audit = await proc.audit();
      expect(status.runId).toBe(runId);
      // Nothing a worker was told is lost; nothing beyond what the workers reported is invented.
      expect(status.step).toBeGreaterThanOrEqual(told);
      expect(status.step).toBeLessThanOrEqual(Math.max(a.lastReported, b.lastReported));
      expect(status.lastCommit.hash).toBe(simulatedStateHash(PLAN, status.step));
      expect(status.state).toBe('gathering');
      expect(status.world.items).toEqual([]);
      expect(status.world.total).toBe(0);
      expect(audit.ok).toBe(true);
      expect(audit.lastRowStep).toBe(status.step);
      expect(audit.commitRows).toBe(status.step);
      const committedSamples = audit.epochs.reduce((sum: number, e: { positions: number }) => sum + e.positions, 0);
      expect(committedSamples).toBe(samplesThrough(status.step));
      for (const epoch of audit.epochs) expect(epoch.duplicates).toEqual([]);

      a = await rejoin(a, proc);
      b = await rejoin(b, proc);
    }
    expect(seen.every((s, i) => s >= killAt[i])).toBe(true);

    await Promise.all([a.untilDone(), b.untilDone()]);
    const status = await proc.status();
    expect(status).toMatchObject({ state: 'done', step: TOTAL });
    const audit = await proc.audit();
    expect(audit.ok).toBe(true);
    expectEveryEpochCommittedOnce(audit);
  });

  it('keeps checkpoints across kill -9 (download, sha256) and a graceful SIGTERM restart resumes the same run', async () => {
    let proc = await start();
    const a = await join(proc, { stopAfterStep: 8 });
    const b = await join(proc, { stopAfterStep: 8 });
    await Promise.all([a.untilCommitted(8), b.untilCommitted(8)]);
    const rank0 = a.rank === 0 ? a : b;
    await rank0.until(() => rank0.uploads.some((u) => u.step === 8), 'uploaded step 8');
    const before = await (await proc.fetch('/api/checkpoints/latest')).arrayBuffer();
    const checkpointed = (await proc.status()).latestCheckpoint;
    expect(checkpointed).not.toBeNull();
    const sha = checkpointed!.sha256;
    await proc.kill9();

    proc = await start({ dataDir: proc.dataDir });
    const res = await proc.fetch('/api/checkpoints/latest');
    expect(res.status).toBe(200);
    expect(res.headers.get('x-checkpoint-sha256')).toBe(sha);
    expect(res.headers.get('x-checkpoint-step')).toBe('8');
    expect(Buffer.from(await res.arrayBuffer()).equals(Buffer.from(before))).toBe(true);
    const status = await proc.status();
    expect(status.latestCheckpoint).toEqual({ step: 8, sha256: sha });

    const exit = await proc.stop();
    expect(exit).toEqual({ code: 0, signal: null });
    expect(proc.stdout).toMatch(/SIGTERM, closing/);
    proc = await start({ dataDir: proc.dataDir });
    expect(await proc.status()).toMatchObject({ runId: status.runId, step: 8 });
    expect(proc.stdout).toMatch(/resumed/);
  });
});
