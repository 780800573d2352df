/**
 * Headless workers (`tabswarm worker`, headless/) against a real coordinator process: three join and train
 * in local mode (int8 wire) with outer commits hash-agreed by all three; one is killed with SIGKILL and the
 * two others commit on without it; a new one joins and commits with them; SIGTERM makes the rest say
 * goodbye. The coordinator's audit is clean throughout (invariant 1), no round closed for a divergence
 * (invariant 2), and each commit's world matches who was alive. Needs WebGPU in Node (Dawn on SwiftShader):
 * without it the test skips here and fails under CI.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HeadlessProcess, spawnHeadless } from '../../tools/swarm/headless-workers';
import { expectCleanAudit } from '../support/clean-audit';
import { type CommitRow, commitRows } from '../support/commit-log';
import { type CoordinatorProcess, spawnCoordinator } from '../support/coordinator-process';
import { skipWithoutNodeGpu } from '../support/node-gpu';

/** 300 fake images, 30 per step over 3 ranks, outer step every 2 steps: 5 commits per epoch, more epochs than the test lasts. */
const JOB = {
  model: 'tiny-mlp',
  optimizer: { kind: 'sgd', lr: 0.05, momentum: 0 },
  globalBatch: 30,
  epochs: 100_000,
  minWorkers: 2,
  maxWorkers: 4,
  lastCallMs: 300,
  heartbeatMs: 1000,
  evalSamples: 0,
  checkpointEvery: 20,
  sync: { mode: 'local', innerSteps: 2, compression: 'int8' },
};

/** Poll `check` (a read of the coordinator's API) until it returns a value, or fail after `timeoutMs` naming `what`. */
async function until<T>(
  what: string,
  check: () => Promise<T | null | undefined | false>,
  timeoutMs = 90_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe.skipIf(await skipWithoutNodeGpu())('headless workers against a real coordinator', () => {
  let proc: CoordinatorProcess;
  const workers: HeadlessProcess[] = [];
  const start = (name: string) => {
    const w = spawnHeadless({ url: proc.url, name, args: ['--no-cache', '--quiet'] });
    workers.push(w);
    return w;
  };
  const after = (rows: CommitRow[], step: number) => rows.filter((r) => r.step > step);

  beforeAll(async () => {
    proc = await spawnCoordinator({ job: JOB });
  });

  afterAll(async () => {
    for (const w of workers) w.crash();
    await proc?.stop();
  });

  it('trains hash-agreed outer steps with three, goes on without a killed one, takes in a joiner, and audits clean', async () => {
    const [a, b, c] = [start('hl-a'), start('hl-b'), start('hl-c')];
    const three = await until('a commit by three headless workers', async () =>
      (await commitRows(proc)).find((r) => r.world === 3),
    );
    expect(three.hash).toMatch(/^[0-9a-f]{64}$/);
    await expectCleanAudit(proc);

    c.crash();
    expect((await c.exited).signal).toBe('SIGKILL');
    const killedAt = (await proc.status()).step;
    const byTwo = await until('a commit by the two survivors after the kill', async () =>
      after(await commitRows(proc), killedAt).find((r) => r.world === 2),
    );
    await expectCleanAudit(proc);

    start('hl-d');
    await until('a commit by three again, the joiner among them', async () =>
      after(await commitRows(proc), byTwo.step).find((r) => r.world === 3),
    );
    await expectCleanAudit(proc);

    // Every commit so far had every rank's hash equal (the commit rule), so none closed a round for divergence.
    const events = await proc.events();
    expect(events.filter((e) => e.event === 'divergence')).toEqual([]);
    const rows = await commitRows(proc);
    expect(rows.length).toBeGreaterThan(3);
    expect(new Set(rows.map((r) => r.step)).size).toBe(rows.length);

    // Goodbye from the rest: each process exits 0 after its goodbye, and the coordinator saw no failure for it.
    const rest = [a, b, workers[3]!];
    for (const w of rest) w.goodbye();
    for (const w of rest) expect((await w.exited).code, w.lines.join('\n')).toBe(0);
    await until('no worker left in the world', async () => (await proc.status()).world.total === 0);
    await expectCleanAudit(proc);
  }, 240_000);
});
