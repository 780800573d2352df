/**
 * Whole scenarios through `handle`, with the harness checking after every event: each index committed
 * at most once per epoch (exactly once per finished epoch), commits persisted before they are
 * announced, round messages only to that round's members, valid server messages, plain-JSON state,
 * dense ranks, and an input state that is never mutated (it is deep-frozen).
 */
import { describe, expect, it } from 'vitest';
import type { JobSpecInput } from '../../../../core/training/job';
import { durableOf, handle, initialState, restoreState } from '../../../../coordinator/machine/machine';
import { DEFAULT_STATUS_PAGE } from '../../../../core/protocol/views';
import { statusResponse } from '../../../../coordinator/machine/status-view';
import { parseJobSpec } from '../../../../core/training/job';
import { planOf } from '../../../../core/training/groups';
import { referencePositionAfter } from '../../../support/hole-free-layout';
import { Harness, hashOf } from './coordinator-harness';
import { mulberry32 } from '../../../support/rng';
import { workerOf, workerCount } from '../../../../coordinator/machine/worker-table';

/** 100 images, batch 8: 13 steps per epoch (the last one of 4), two epochs, 26 steps. */
const JOB: JobSpecInput = {
  model: 'tiny-mlp',
  globalBatch: 8,
  epochs: 2,
  minWorkers: 2,
  maxWorkers: 4,
  lastCallMs: 500,
  heartbeatMs: 1000,
  checkpointEvery: 5,
  maxRestarts: 5,
};

/** Failure closes that counted: a restart charged to a worker already cooling off is absorbed (penalties.ts). */
function restartCount(h: Harness): number {
  const closes = h.logs.filter((l) => l.event === 'round_closed' && l.data.restart === true).length;
  return closes - h.logs.filter((l) => l.event === 'restart_absorbed').length;
}

/**
 * The server stores every checkpoint that was requested since the last call, at the record position
 * the tabs were told for that commit (without holes: where the hole-free layout puts it).
 */
function storeRequestedCheckpoints(h: Harness, seen: Set<number>): void {
  const plan = planOf(h.state);
  for (const w of h.workers.values()) {
    for (const m of w.inbox) {
      if (m.type !== 'checkpoint_request' || seen.has(m.step)) continue;
      seen.add(m.step);
      const at = h.positionAfter(m.step) ?? referencePositionAfter(m.step, plan);
      h.apply({
        kind: 'checkpoint_stored',
        step: m.step,
        epoch: at.epoch,
        cursor: at.cursor,
        sha256: m.step.toString(16).padStart(64, '0'),
      });
    }
  }
}

describe('machine scenario', () => {
  it('3 join, train 10, one leaves, one crashes, one joins, epoch end, a joiner at a boundary, coordinator restart, job end', () => {
    const h = new Harness(JOB, 100);
    const stored = new Set<number>();
    for (const n of ['a', 'b', 'c']) h.join(n);
    h.advance(500);
    expect(h.members()).toEqual(['a', 'b', 'c']);
    h.train(10);
    storeRequestedCheckpoints(h, stored);
    expect([...stored]).toEqual([5, 10]);
    expect(h.state.checkpoints.map((c) => c.step)).toEqual([5, 10]);

    // b says goodbye with step 11 in flight: restore, no restart.
    h.report('a');
    h.send('b', { type: 'goodbye', runId: h.runId, workerId: h.worker('b').workerId! });
    expect(h.received('a', 'round_closed').pop()).toMatchObject({ reason: 'goodbye', restore: true });
    expect(h.state.restarts).toBe(0);
    h.advance(500);
    expect(h.members()).toEqual(['a', 'c']);
    h.train(1);

    // c crashes: a restart. d joins; the next round gets the state from a.
    h.disconnect('c');
    expect(h.state.restarts).toBe(1);
    h.join('d');
    h.advance(500);
    expect(h.members()).toEqual(['a', 'd']);
    expect(h.received('d', 'round').pop()).toMatchObject({
      step: 12,
      stateFrom: { kind: 'peer', rank: 0 },
      committedHash: hashOf(11),
    });
    h.train(2); // step 13 ends epoch 0
    expect(h.state.record).toMatchObject({ epoch: 1, cursor: 0 });
    expect(h.commits.filter((c) => c.epoch === 0).reduce((acc, c) => acc + c.count, 0)).toBe(100);
    storeRequestedCheckpoints(h, stored);
    expect(stored.has(13)).toBe(true);

    // e joins during the round: admitted at the next commit boundary, restore:false.
    h.join('e');
    h.train(1);
    expect(h.members()).toEqual(['a', 'd', 'e']);
    expect(h.received('a', 'round_closed').pop()).toMatchObject({ reason: 'membership', restore: false });
    h.train(2);
    expect(h.state.lastCommit.step).toBe(16);
    const roundBefore = h.state.rendezvous.round;

    // The coordinator is killed and restarts from the last persisted durable state.
    const durable = JSON.parse(JSON.stringify(h.durable));
    expect(durable).toEqual(durableOf(h.state));
    const staleReport = { ...h.worker('a') };
    h.restart(restoreState(durable));
    expect(h.state.rendezvous).toMatchObject({
      phase: 'gathering',
      round: roundBefore,
      participants: [],
      waitList: [],
    });
    expect(workerCount(h.state.workers)).toBe(0);
    expect(h.state.lastCommit.step).toBe(16);
    for (const n of ['a', 'd', 'e']) h.join(n);
    expect(h.state.rendezvous.round).toBe(roundBefore); // 3 < max 4: last call
    h.advance(500);
    expect(h.state.rendezvous.round).toBe(roundBefore + 1);
    expect(h.members()).toEqual(['a', 'd', 'e']);
    // All three reported the committed hash before the restart: nobody needs a broadcast.
    expect(h.received('a', 'round').pop()).toMatchObject({ step: 17, stateFrom: { kind: 'held' } });
    // A report from before the restart names an old round.
    const before = h.state;
    h.send('a', {
      type: 'step_report',
      runId: h.runId,
      workerId: staleReport.workerId!,
      round: roundBefore,
      rank: 0,
      step: 17,
      hash: hashOf(17),
      lossSum: 1,
      samples: 3,
      computeMs: 1,
    });
    expect(h.state).toBe(before);
    expect(h.lastReceived('a')).toMatchObject({ type: 'error', code: 'stale_round' });

    h.train(10);
    expect(h.state.status).toBe('done');
    expect(h.state.lastCommit.step).toBe(26);
    expect(h.state.restarts).toBe(1);
    expect(restartCount(h)).toBe(1);
    for (const n of ['a', 'd', 'e']) expect(h.lastReceived(n)).toEqual({ v: 1, type: 'done', step: 26 });
    // Both epochs complete exactly once (the harness checks finished epochs after every event).
    expect(h.state.record.epoch).toBe(2);
    expect(h.commits.map((c) => c.step)).toEqual(Array.from({ length: 26 }, (_, i) => i + 1));
    expect(statusResponse(h.state, h.now, DEFAULT_STATUS_PAGE)).toMatchObject({
      state: 'done',
      step: 26,
      restarts: 1,
      datasetSize: 100,
      totalSteps: 26,
    });
  });

  it('after a restart, a tab holding a step committed just before the crash (not yet announced) is the state source', () => {
    const h = new Harness(JOB, 100);
    h.join('a');
    h.join('b');
    h.advance(500);
    h.train(3);
    h.report('a');
    // b's report commits step 4; the coordinator persists, then dies before anyone hears of it.
    const b = h.worker('b');
    const msg = {
      v: 1 as const,
      type: 'step_report' as const,
      runId: h.runId,
      workerId: b.workerId!,
      round: 1,
      rank: 1,
      step: 4,
      hash: hashOf(4),
      lossSum: 2,
      samples: 4,
      computeMs: 3,
    };
    const { actions } = handle(h.state, { kind: 'message', conn: b.conn, msg }, h.now);
    const persisted = actions.find((a) => a.kind === 'persist');
    if (persisted?.kind !== 'persist') throw new Error('no persist');
    expect(persisted.durable.lastCommit).toMatchObject({ step: 4, hash: hashOf(4) });
    h.commits.push(...actions.flatMap((a) => (a.kind === 'record_commit' ? [a.commit] : [])));
    h.durable = persisted.durable;
    h.restart(restoreState(persisted.durable));
    for (const name of ['a', 'b']) {
      h.connect(name);
      h.send(name, {
        type: 'hello',
        runId: h.runId,
        workerId: h.worker(name).workerId,
        peerId: `peer-${name}`,
        adapter: { vendor: '', architecture: '', description: '' },
        haveStep: 3,
        haveHash: hashOf(3),
        // Only b had sent the report that committed step 4; a's report of 4 never left.
        ...(name === 'b' ? { pending: { step: 4, hash: hashOf(4) } } : {}),
      });
    }
    h.advance(500);
    expect(h.received('a', 'round').pop()).toMatchObject({
      step: 5,
      committedHash: hashOf(4),
      stateFrom: { kind: 'peer', rank: h.members().indexOf('b') },
    });
    expect(h.state.lastCommit.step).toBe(4);
  });
});

describe('machine: hello and connections', () => {
  const hello = (h: Harness, name: string, extra: Record<string, unknown> = {}) =>
    h.send(name, {
      type: 'hello',
      runId: null,
      workerId: null,
      peerId: `peer-${name}`,
      adapter: { vendor: 'v', architecture: 'a', description: 'd' },
      haveStep: null,
      haveHash: null,
      ...extra,
    } as never);

  it('keeps the kernels report of a hello for the status view, and null for a tab that sent none', () => {
    const h = new Harness(JOB, 100);
    const kernels = {
      source: 'cached' as const,
      precision: 'f32' as const,
      variants: [{ family: 'matmul', variant: '8x8 regs wg4x4' }],
      gflops: 1.25,
      tuneMs: null,
      features: ['subgroups' as const],
    };
    h.connect('a');
    hello(h, 'a', { kernels });
    h.join('b');
    h.advance(2000);
    const world = statusResponse(h.state, h.now, DEFAULT_STATUS_PAGE).world.items;
    expect(world.find((w) => w.id === h.worker('a').workerId)?.kernels).toEqual(kernels);
    expect(world.find((w) => w.id === h.worker('b').workerId)?.kernels).toBeNull();
  });

  it('gives distinct ids made of a counter and the connection nonce', () => {
    const h = new Harness(JOB, 100);
    h.join('a');
    h.join('b');
    expect(h.worker('a').workerId).toBe('w1-na');
    expect(h.worker('b').workerId).toBe('w2-nb');
    expect(h.received('a', 'welcome')[0].job).toMatchObject({ datasetSize: 100, stepsPerEpoch: 13, totalSteps: 26 });
  });

  it('refuses a second hello on one socket, and a worker id or peer id that is connected elsewhere, changing nothing', () => {
    const h = new Harness(JOB, 100);
    h.join('a');
    let before = h.state;
    hello(h, 'a');
    expect(h.state).toBe(before);
    expect(h.lastReceived('a')).toMatchObject({ type: 'error', code: 'already_joined' });
    h.connect('x');
    before = h.state;
    hello(h, 'x', { runId: h.runId, workerId: h.worker('a').workerId });
    expect(h.state).toBe(before);
    expect(h.lastReceived('x')).toMatchObject({ type: 'error', code: 'id_in_use' });
    hello(h, 'x', { peerId: 'peer-a' });
    expect(h.state).toBe(before);
    expect(h.lastReceived('x')).toMatchObject({ type: 'error', code: 'id_in_use' });
  });

  it("welcomes another run's tab as a new worker and ignores the state it claims", () => {
    const h = new Harness(JOB, 100);
    h.connect('old');
    hello(h, 'old', { runId: 'run-0', workerId: 'w9-zz', haveStep: 50, haveHash: hashOf(50) });
    const id = h.worker('old').workerId!;
    expect(id).not.toBe('w9-zz');
    expect(workerOf(h.state.workers, id)!.holds).toEqual([]);
  });

  it('answers an unparsable frame with an error and a metric, state untouched', () => {
    const h = new Harness(JOB, 100);
    h.join('a');
    const before = h.state;
    const actions = h.apply({
      kind: 'invalid',
      conn: h.worker('a').conn,
      code: 'bad_json',
      message: 'Unexpected token',
    });
    expect(h.state).toBe(before);
    expect(actions.map((a) => a.kind)).toEqual(['send', 'metric', 'log']);
    expect(h.lastReceived('a')).toMatchObject({ type: 'error', code: 'bad_json' });
  });

  it('rejects heartbeats of another run and ready for another round', () => {
    const h = new Harness(JOB, 100);
    h.join('a');
    h.join('b');
    h.advance(500);
    const before = h.state;
    h.send('a', { type: 'heartbeat', runId: 'run-0', workerId: h.worker('a').workerId! });
    expect(h.lastReceived('a')).toMatchObject({ type: 'error', code: 'wrong_run' });
    h.send('a', { type: 'ready', runId: h.runId, workerId: h.worker('a').workerId!, round: 9 });
    expect(h.lastReceived('a')).toMatchObject({ type: 'error', code: 'stale_round' });
    expect(h.state).toBe(before);
  });

  it('ignores a stored checkpoint that does not match a committed step, and keeps the latest ones', () => {
    const h = new Harness(JOB, 100);
    h.join('a');
    h.join('b');
    h.advance(500);
    h.train(3);
    const before = h.state;
    h.apply({ kind: 'checkpoint_stored', step: 5, epoch: 0, cursor: 40, sha256: 'aa' });
    h.apply({ kind: 'checkpoint_stored', step: 2, epoch: 0, cursor: 17, sha256: 'aa' });
    expect(h.state).toBe(before);
    h.apply({ kind: 'admin', action: { type: 'checkpoint_now' } });
    expect(h.received('a', 'checkpoint_request').pop()).toEqual({
      v: 1,
      type: 'checkpoint_request',
      step: 3,
      // The executor adds the upload's capability token to the machine's URL.
      url: expect.stringMatching(/^\/api\/checkpoints\/run-1\/3\?token=[0-9a-f]{32}$/),
    });
    h.apply({ kind: 'checkpoint_stored', step: 3, epoch: 0, cursor: 24, sha256: 'cd'.repeat(32) });
    expect(h.state.checkpoints).toEqual([
      { step: 3, epoch: 0, cursor: 24, holes: [], sha256: 'cd'.repeat(32), hash: hashOf(3) },
    ]);
  });

  it('restores a durable state exactly (round numbering continues, nobody connected)', () => {
    const job = parseJobSpec(JOB);
    const s = initialState(job, 60000, 'r');
    const durable = durableOf(s);
    const restored = restoreState(JSON.parse(JSON.stringify(durable)));
    expect(durableOf(restored)).toEqual(durable);
    expect(restored).toEqual(s);
  });
});

/**
 * Random churn: joins, goodbyes, crashes, hung tabs, forged and failing reports, pauses, kicks,
 * set_workers, checkpoints and coordinator restarts, with invariants checked after every event;
 * then the job is driven to its end and every epoch must be complete exactly once.
 */
describe('machine under random churn', () => {
  // Seeds 1–4: every-step sync (commits every step or every 3); 5–8: local sync mode (H = 3), where a
  // member lost inside an outer step leaves holes the later groups must fill.
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    const mode = seed > 4 ? 'local' : 'every-step';
    it(`keeps every invariant and finishes the job (${mode}, seed ${seed})`, () => {
      const rand = mulberry32(seed);
      const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)];
      const sync = seed > 4 ? { sync: { mode: 'local' as const, innerSteps: 3 } } : { commitEvery: seed % 2 ? 1 : 3 };
      const h = new Harness({ ...JOB, epochs: 3, maxRestarts: 1000, ...sync }, 100);
      const names = ['a', 'b', 'c', 'd', 'e', 'f'];
      const stored = new Set<number>();
      let restarts = 0;
      let hung: string | null = null;
      for (let i = 0; i < 800 && h.state.status !== 'done'; i++) {
        const connected = names.filter(
          (n) => h.isConnected(n) && h.worker(n).workerId !== null && workerOf(h.state.workers, h.worker(n).workerId!),
        );
        const members = h.state.rendezvous.participants
          .map((p) => h.nameOf(p.workerId))
          .filter((n) => h.isConnected(n));
        const r = rand();
        if (r < 0.08) {
          const absent = names.filter((n) => !h.isConnected(n));
          if (absent.length) h.join(pick(absent), { fresh: rand() < 0.3 });
        } else if (r < 0.6) {
          if (h.state.rendezvous.phase === 'syncing') h.readyAll();
          else if (members.length && rand() < 0.5) h.stepAll();
          else if (members.length) h.report(pick(members));
        } else if (r < 0.62 && connected.length) {
          const n = pick(connected);
          h.send(n, { type: 'goodbye', runId: h.runId, workerId: h.worker(n).workerId! });
          h.disconnect(n);
        } else if (r < 0.64 && connected.length) {
          h.disconnect(pick(connected));
        } else if (r < 0.65 && members.length) {
          const n = pick(members);
          const w = h.worker(n);
          h.send(n, {
            type: 'failure',
            runId: h.runId,
            workerId: w.workerId!,
            round: w.round?.round ?? 0,
            reason: 'random',
          });
        } else if (r < 0.7 && members.length) {
          // forged or broken reports: never change the record
          const n = pick(members);
          const forged = pick([{ rank: 4095 }, { step: 1 }, { hash: 'f'.repeat(64) }, { samples: 999 }, { round: 0 }]);
          h.report(n, forged as never);
        } else if (r < 0.8) {
          // time passes; everyone but a hung tab keeps its heartbeat
          if (rand() < 0.1) hung = connected.length ? pick(connected) : null;
          for (const n of connected)
            if (n !== hung && h.isConnected(n))
              h.send(n, { type: 'heartbeat', runId: h.runId, workerId: h.worker(n).workerId! });
          h.advance(100 + Math.floor(rand() * 700));
        } else if (r < 0.86) {
          storeRequestedCheckpoints(h, stored);
        } else if (r < 0.89) {
          const action = pick([
            { type: 'pause' as const },
            { type: 'resume' as const },
            { type: 'resume' as const },
            { type: 'checkpoint_now' as const },
            { type: 'set_workers' as const, min: 1 + Math.floor(rand() * 2), max: 2 + Math.floor(rand() * 3) },
          ]);
          h.apply({ kind: 'admin', action });
        } else if (r < 0.9 && connected.length) {
          h.apply({ kind: 'admin', action: { type: 'kick', workerId: h.worker(pick(connected)).workerId! } });
        } else if (r < 0.91 && h.durable) {
          restarts = h.state.restarts;
          h.restart(restoreState(JSON.parse(JSON.stringify(h.durable))));
          expect(h.state.restarts).toBe(restarts);
          hung = null;
        }
      }
      if (process.env.CHURN_STATS)
        console.log({
          seed,
          step: h.state.lastCommit.step,
          rounds: h.state.rendezvous.round,
          restarts: h.state.restarts,
          rollbacks: h.logs.filter((l) => l.event === 'record_rolled_back').length,
          rejected: h.metricCount('tabswarm_message_errors_total'),
          partialCommits: h.commits.filter((c) => c.skipped).length,
        });
      // Failure restarts are exactly the failure closes (goodbyes, kicks, pauses and joins never count).
      expect(h.state.restarts).toBe(restartCount(h));
      // Drive to the end with two healthy tabs (if churn has not finished the job already).
      if (h.state.status === 'paused') h.apply({ kind: 'admin', action: { type: 'resume' } });
      h.apply({ kind: 'admin', action: { type: 'set_workers', min: 1, max: 4 } });
      if (h.state.status !== 'done') {
        for (const n of names) if (h.isConnected(n)) h.disconnect(n);
        h.join('y', { fresh: true });
        h.join('z', { fresh: true });
        h.advance(500);
      }
      let guard = 0;
      while (h.state.status !== 'done' && guard++ < 200) {
        if (h.state.rendezvous.phase === 'syncing') h.readyAll();
        else if (h.state.rendezvous.phase === 'training') h.stepAll();
        else h.advance(500);
      }
      expect(h.state.status).toBe('done');
      expect(h.state.record.epoch).toBe(3);
      for (const epoch of [0, 1, 2]) {
        expect(h.commits.filter((c) => c.epoch === epoch).reduce((acc, c) => acc + c.count, 0)).toBe(100);
      }
      expect(h.state.restarts).toBe(restartCount(h));
    });
  }
});
