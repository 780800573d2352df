/**
 * `GET /api/commits` and `GET /api/evaluations` against a real coordinator process: a simulated worker
 * trains part of the job, crashes after a checkpoint (so the record rolls back and two steps are
 * re-committed by a second worker), and the API must list every live commit exactly once, in order,
 * page by page, with the step positions the sampler prescribes; bad parameters get a 400 JSON error.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobPublic, parseJobSpec } from '../../core/training/job';
import { referenceStepPosition } from '../support/hole-free-layout';
import { CoordinatorProcess, spawnCoordinator } from '../support/coordinator-process';
import { SimTrainer, simulatedStateHash } from '../support/sim-trainer';

/** 300 fake training images, batch 32: 10 steps; checkpoints every 3 steps. */
const JOB = {
  model: 'tiny-mlp',
  globalBatch: 32,
  minWorkers: 1,
  maxWorkers: 2,
  lastCallMs: 50,
  heartbeatMs: 1000,
  checkpointEvery: 3,
};
const PLAN = jobPublic(parseJobSpec(JOB), 300);
const STEPS = 10;

const COMMIT_FIELDS = [
  'committedAt',
  'count',
  'cursorStart',
  'epoch',
  'firstStep',
  'hash',
  'loss',
  'round',
  'step',
  'worldSize',
];

describe('commits and evaluations API', () => {
  let proc: CoordinatorProcess;
  let first: SimTrainer;
  let second: SimTrainer;
  let firstRound: number;

  beforeAll(async () => {
    proc = await spawnCoordinator({ job: JOB });
    // The first worker trains steps 1..5 and uploads the checkpoint of step 3, then its tab crashes.
    first = await SimTrainer.join(proc.wsUrl, { httpUrl: proc.url, stopAfterStep: 5 });
    await first.untilCommitted(5);
    await first.until(() => first.uploads.some((u) => u.step === 3 && u.status === 201), 'checkpoint 3 stored');
    firstRound = (await proc.status()).round;
    await first.worker.terminate();
    // Nobody holds step 5 any more: the second worker starts from checkpoint 3 and steps 4, 5 are redone.
    second = await SimTrainer.join(proc.wsUrl, { httpUrl: proc.url });
    await second.untilDone();
  }, 60_000);

  afterAll(async () => {
    first?.stop();
    second?.stop();
    await second?.worker.close();
    await proc?.stop();
  });

  it('lists every live commit once, ascending, as the sampler placed it (rolled-back rows hidden)', async () => {
    const res = await proc.fetch('/api/commits');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const body = await res.json();
    const status = await proc.status();
    expect(body.runId).toBe(status.runId);
    expect(body.next).toBeNull();
    expect(body.commits.map((c: any) => c.step)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
    for (const c of body.commits) {
      expect(Object.keys(c).sort()).toEqual(COMMIT_FIELDS);
      const { epoch, cursor, count } = referenceStepPosition(c.step, PLAN);
      expect(c).toMatchObject({
        firstStep: c.step,
        epoch,
        cursorStart: cursor,
        count,
        worldSize: 1,
        hash: simulatedStateHash(PLAN, c.step),
      });
      // SimTrainer reports lossSum = 0.5 per sample.
      expect(c.loss).toBeCloseTo(0.5, 12);
      expect(Number.isInteger(c.committedAt) && c.committedAt > 1.6e12).toBe(true);
      // Steps 1..3 survive from the first worker's round; 4..10 were (re)committed in a later round.
      if (c.step <= 3) expect(c.round).toBe(firstRound);
      else expect(c.round).toBeGreaterThan(firstRound);
    }
    // The audit agrees that two rows were rolled back.
    expect((await proc.audit()).rolledBackRows).toBe(2);
    // /metrics timed the handling of every commit (12: the 10 live rows and the 2 rolled back).
    const metrics = await proc.metrics();
    expect(CoordinatorProcess.metricValue(metrics, 'tabswarm_commit_handle_seconds_count')).toBe(STEPS + 2);
    expect(CoordinatorProcess.metricValue(metrics, 'tabswarm_commit_handle_seconds_bucket{le="+Inf"}')).toBe(STEPS + 2);
  });

  it('pages with from/limit and `next`', async () => {
    const page = await proc.getJson('/api/commits?from=4&limit=3');
    expect(page.commits.map((c: any) => c.step)).toEqual([4, 5, 6]);
    expect(page.next).toBe(7);

    const steps: number[] = [];
    let from: number | null = 0;
    let pages = 0;
    while (from !== null) {
      const p: any = await proc.getJson(`/api/commits?from=${from}&limit=4`);
      steps.push(...p.commits.map((c: any) => c.step));
      from = p.next;
      pages += 1;
      expect(pages).toBeLessThan(10);
    }
    expect(steps).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
    expect(pages).toBe(3); // 4 + 4 + 2

    // A page that ends exactly at the last row points past it; the page there is empty.
    const exact = await proc.getJson('/api/commits?from=6&limit=5');
    expect(exact.commits.map((c: any) => c.step)).toEqual([6, 7, 8, 9, 10]);
    expect(exact.next).toBe(11);
    expect(await proc.getJson('/api/commits?from=11')).toMatchObject({ commits: [], next: null });
    expect((await proc.getJson('/api/commits?limit=1000')).commits).toHaveLength(STEPS);
  });

  const badQueries: [string, string][] = [
    ['a negative from', 'from=-1'],
    ['a non-numeric from', 'from=abc'],
    ['a fractional from', 'from=1.5'],
    ['an exponent', 'from=1e3'],
    ['an empty limit', 'limit='],
    ['limit 0', 'limit=0'],
    ['limit above 1000', 'limit=1001'],
    ['a hex limit', 'limit=0x10'],
  ];
  for (const [name, query] of badQueries) {
    it(`answers 400 with a JSON error for ${name} (${query})`, async () => {
      const res = await proc.fetch(`/api/commits?${query}`);
      expect(res.status).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      const body = await res.json();
      expect(body.error).toBe('bad_request');
      expect(body.message).toMatch(/from|limit/);
    });
  }

  it('refuses other methods', async () => {
    const res = await proc.fetch('/api/commits', { method: 'POST', body: '{}' });
    expect(res.status).toBe(405);
    expect((await res.json()).error).toBe('method_not_allowed');
  });

  it('lists accepted evaluations, not rejected ones', async () => {
    expect(await proc.getJson('/api/evaluations')).toEqual({ runId: (await proc.status()).runId, evaluations: [] });
    const { round } = await proc.status();
    const w = second.worker;
    const base = {
      type: 'evaluation',
      runId: w.runId,
      workerId: w.workerId,
      round,
      step: STEPS,
      epoch: 0,
      testSamples: 50,
      correct: 41,
      lossSum: 20,
    };
    // Rejected: more correct than images (schema), a step never committed (machine).
    const errorsBefore = second.errors.length;
    w.send({ ...base, correct: 51 });
    w.send({ ...base, step: STEPS + 1 });
    await second.until(() => second.errors.length >= errorsBefore + 2, 'two errors');
    expect(second.errors.slice(errorsBefore).map((e) => e.code)).toEqual(['bad_message', 'wrong_step']);
    w.send(base);
    // The event log is written in batches (≤ 250 ms): poll the route, bounded.
    let evaluations: any[] = [];
    for (let i = 0; i < 50 && evaluations.length === 0; i++) {
      evaluations = (await proc.getJson('/api/evaluations')).evaluations;
      if (evaluations.length === 0) await new Promise((r) => setTimeout(r, 100));
    }
    expect(evaluations).toEqual([
      {
        id: expect.any(Number),
        at: expect.any(Number),
        step: STEPS,
        epoch: 0,
        accuracy: 0.82,
        loss: 0.4,
        testSamples: 50,
        workerId: w.workerId,
        round,
        // One rank's number: shown as unverified (two ranks must agree for a verified one).
        verified: false,
        agreedBy: [],
      },
    ]);
    expect(await proc.getJson(`/api/evaluations?after=${evaluations[0].id}`)).toMatchObject({ evaluations: [] });
    expect((await proc.fetch('/api/evaluations?after=x')).status).toBe(400);
  });
});
