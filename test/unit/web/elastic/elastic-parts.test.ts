/**
 * The parts of the elastic loop, each alone: the status reducers, the round session's commit
 * deferreds, the held-state keeper, and the step runner's pipeline order (the invariant that the
 * live state never moves past a step before that step is committed and saved as the backup).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { jobPublic, parseJobSpec } from '../../../../core/training/job';
import type { RoundMessage } from '../../../../core/protocol/coordinator-messages';
import { SerialQueue } from '../../../../web/elastic/async-tools';
import { CheckpointService } from '../../../../web/elastic/checkpoint-service';
import { HeldStateKeeper } from '../../../../web/elastic/held-states';
import { CommittedPositions, DEFAULT_TIMEOUTS, type LoopContext } from '../../../../web/elastic/loop-context';
import { RoundSession } from '../../../../web/elastic/round-session';
import { appendBounded, creditCommitted, StatusBox, stepComputed } from '../../../../web/elastic/status';
import { StepRunner } from '../../../../web/elastic/step-runner';
import { evaluationAllowanceMs } from '../../../../web/elastic/sync-modes';
import type { OutgoingMessage } from '../../../../web/net/coordinator-client';
import { lossPolyline } from '../../../../web/volunteer/loss-chart';
import { epochOrder } from '../../../../core/training/sampler';
import { CpuTrainer, SIM_MODEL } from '../../../kit/simulation';

describe('status reducers', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('appendBounded keeps the newest entries and trims in chunks (amortised O(1))', () => {
    const log: number[] = [];
    let trims = 0;
    let before = 0;
    for (let i = 0; i < 10_000; i++) {
      appendBounded(log, i, 100);
      if (log.length < before) trims++;
      before = log.length;
      expect(log.length).toBeLessThanOrEqual(125);
      expect(log[log.length - 1]).toBe(i);
    }
    expect(log.slice(-100)).toEqual(Array.from({ length: 100 }, (_, k) => 9900 + k));
    expect(trims).toBeLessThan(10_000 / 20);
  });

  it('stepComputed counts the step and appends its slice loss to the shared log', () => {
    const box = new StatusBox();
    const losses = box.status.losses;
    box.update(stepComputed(box.status, { step: 3, lossSum: 12, samples: 4, computeMs: 8 }));
    expect(box.status).toMatchObject({
      localStep: 3,
      stepsComputed: 1,
      loss: 3,
      samplesComputed: 4,
      samplesPerSec: 500,
    });
    expect(box.status.losses).toBe(losses);
    expect(losses).toEqual([{ step: 3, loss: 3 }]);
    box.update(stepComputed(box.status, { step: 4, lossSum: 0, samples: 0, computeMs: 1 }));
    expect(box.status).toMatchObject({ loss: 3, stepsComputed: 2, samplesPerSec: 500 });
    expect(losses).toHaveLength(1);
  });

  it('a status listener that throws does not throw into the loop: the update holds, the error is reported later', () => {
    vi.useFakeTimers();
    const seen: string[] = [];
    const box = new StatusBox((s) => {
      seen.push(s.phase);
      throw new Error('render failed');
    });
    expect(() => box.update({ phase: 'connecting' })).not.toThrow();
    expect(box.status.phase).toBe('connecting');
    expect(seen).toEqual(['connecting']);
    // Reported as an uncaught error on a later task (fake timers rethrow it here).
    expect(() => vi.runAllTimers()).toThrow('render failed');
  });

  it('creditCommitted credits steps up to the commit and drops later ones only when asked', () => {
    const m = new Map([
      [1, 10],
      [2, 20],
      [3, 30],
    ]);
    expect(creditCommitted(m, 2)).toBe(30);
    expect([...m.keys()]).toEqual([3]);
    expect(creditCommitted(m, 2, true)).toBe(0);
    expect(m.size).toBe(0);
  });
});

describe('loss chart', () => {
  it('draws at most one point per chart unit, the mean of the entries on it', () => {
    const losses = Array.from({ length: 2000 }, (_, i) => ({ step: i + 1, loss: i % 2 }));
    const points = lossPolyline(losses).split(' ');
    expect(points.length).toBeLessThanOrEqual(301);
    expect(points[0].startsWith('0,')).toBe(true);
    expect(points[points.length - 1].startsWith('300,')).toBe(true);
    const ys = points.map((p) => Number(p.split(',')[1]));
    // Alternating 0/1 averages to about 0.5 per unit: y ≈ 78 - 37.
    for (const y of ys.slice(1, -1)) expect(Math.abs(y - 41)).toBeLessThan(10);
    expect(lossPolyline(losses.slice(0, 1))).toBe('');
  });
});

describe('RoundSession', () => {
  it('forgets settled commit deferreds (one per step would otherwise live as long as the round)', () => {
    const s = new RoundSession({ round: 1, world: [], step: 1 } as unknown as RoundMessage);
    for (let step = 1; step <= 50; step++) s.committed(step).resolve({ epoch: 0, cursor: step, holes: [] });
    s.forgetCommitsThrough(49);
    expect([...s.commits.keys()]).toEqual([50]);
  });
});

const job = jobPublic(
  parseJobSpec({
    model: SIM_MODEL,
    optimizer: { kind: 'sgd', lr: 0.1, momentum: 0.5 },
    globalBatch: 16,
    epochs: 1,
    checkpointEvery: 1000,
    seed: 5,
  }),
  64,
);

function context(trainer: CpuTrainer, sent: OutgoingMessage[], onSend?: (m: OutgoingMessage) => void): LoopContext {
  const queue = new SerialQueue(5000);
  return {
    trainer,
    mesh: { peerId: 'p', connectRing: () => Promise.reject(new Error('unused')) },
    control: {
      send: (m) => {
        sent.push(m);
        onSend?.(m);
        return true;
      },
    },
    http: { baseUrl: 'http://127.0.0.1', fetch: () => Promise.reject(new Error('unused')) } as never,
    queue,
    timeouts: { ...DEFAULT_TIMEOUTS, coordinatorWaitMs: 2000 },
    box: new StatusBox(),
    keeper: new HeldStateKeeper(trainer, queue),
    positions: new CommittedPositions(),
    log: () => undefined,
    now: () => performance.now(),
  };
}

describe('HeldStateKeeper', () => {
  it('tags every state change in the same worker task, and undoes only an unreported live step', async () => {
    const trainer = new CpuTrainer();
    const ctx = context(trainer, []);
    const k = ctx.keeper;
    await k.buildFresh(job);
    expect(k.held).toEqual({ live: { step: 0, hash: null }, backup: null });
    await k.saveBackup();
    const g = await trainer.computeGradients(Uint32Array.of(1, 2), true);
    const { hash } = await k.applyAndHash(1, null, 2, null);
    expect(g.gradients).toBeNull();
    expect(k.held.live).toEqual({ step: 1, hash });
    expect(k.liveToUndo).toBe(true);
    k.lastReported = { step: 1, hash };
    expect(k.liveToUndo).toBe(false);
    expect(k.hello()).toEqual({ haveStep: 0, haveHash: null, pending: { step: 1, hash } });
    await k.restoreBackup();
    expect(k.held.live).toEqual({ step: 0, hash: null });
  });
});

describe('StepRunner', () => {
  const roundOf = (world: { workerId: string; peerId: string; rank: number; share: number }[]) =>
    new RoundSession({
      v: 1,
      type: 'round',
      runId: 'r',
      round: 1,
      world,
      step: 1,
      epoch: 0,
      cursor: 0,
      committedHash: null,
      stateFrom: { kind: 'fresh' },
    } as RoundMessage);

  async function runOneTab(commitDelayMs: number) {
    const trainer = new CpuTrainer();
    const sent: OutgoingMessage[] = [];
    const session = roundOf([{ workerId: 'w', peerId: 'p', rank: 0, share: 1 }]);
    const ctx = context(trainer, sent, (m) => {
      if (m.type !== 'step_report') return;
      // The coordinator answers a little later; its answer is marked in the trainer's call log.
      setTimeout(() => {
        trainer.calls.push(`committed:${m.step}`);
        // 64 images in steps of 16: the record after step s (the 4th ends the epoch).
        const after = m.step === 4 ? { epoch: 1, cursor: 0, holes: [] } : { epoch: 0, cursor: 16 * m.step, holes: [] };
        session.committed(m.step).resolve(after);
      }, commitDelayMs);
    });
    await ctx.keeper.buildFresh(job);
    await ctx.keeper.saveBackup();
    session.rank = 0;
    const runner = new StepRunner(ctx, new CheckpointService(ctx, () => ({ job, workerId: 'w' })), new Map());
    trainer.calls.length = 0;
    await runner.run(session, { ring: { rank: 0, size: 1, left: null, right: null }, groups: null }, job);
    return { trainer, sent, ctx };
  }

  it('overlaps a commit wait with the next step, but applies a step only after the previous one is committed and saved', async () => {
    const { trainer, sent, ctx } = await runOneTab(3);
    expect(sent.filter((m) => m.type === 'step_report').map((r) => r.step)).toEqual([1, 2, 3, 4]);
    const at = (name: string, nth: number) =>
      trainer.calls.filter((c) => c === name).length > nth
        ? trainer.calls.reduce(
            (found, c, i) =>
              found < 0 && c === name && trainer.calls.slice(0, i).filter((x) => x === name).length === nth ? i : found,
            -1,
          )
        : -1;
    // A world of one: the gradients are asked for once; every later step was prefetched by the previous apply.
    expect(trainer.calls.filter((c) => c === 'computeGradients')).toHaveLength(1);
    expect(trainer.calls.filter((c) => c === 'prefetch')).toHaveLength(3);
    for (let s = 2; s <= 4; s++) {
      const prefetch = at('prefetch', s - 2);
      const committed = trainer.calls.indexOf(`committed:${s - 1}`);
      const save = at('saveBackup', s - 2);
      const apply = at('applyGradients', s - 1);
      // Step s's gradients were computed before step s-1's commit arrived (the overlap) ...
      expect(prefetch).toBeGreaterThanOrEqual(0);
      expect(prefetch).toBeLessThan(committed);
      // ... and step s was applied only after step s-1 was committed and saved as the backup.
      expect(committed).toBeLessThan(save);
      expect(save).toBeLessThan(apply);
    }
    expect(ctx.keeper.held.backup).toEqual(ctx.keeper.held.live);
    expect(ctx.keeper.held.live?.step).toBe(4);
  });

  it('reports the same hashes as the unpipelined order (apply, hash, wait, save, one step at a time)', async () => {
    const { sent } = await runOneTab(1);
    const trainer = new CpuTrainer();
    await trainer.buildModel({ model: SIM_MODEL, optimizer: job.optimizer, maxBatch: 16, seed: job.seed });
    const expected: string[] = [];
    for (let step = 1; step <= 4; step++) {
      const indices = epochOrder(job.seed, 0, 64).subarray(16 * (step - 1), 16 * step);
      const g = await trainer.computeGradients(indices);
      const { hash } = await trainer.applyAndHash(g.gradients, indices.length, null);
      expected.push(hash);
    }
    expect(sent.filter((m) => m.type === 'step_report').map((r) => (r as { hash: string }).hash)).toEqual(expected);
  });

  it('allows for rank 0 evaluating after the commits one and two steps back', () => {
    const j = { ...job, evalSamples: 100 };
    const evalStep = 4; // rank 0 evaluates the commit of step 4
    expect(evaluationAllowanceMs(evalStep + 1, evalStep, j, 10, 10)).toBe(200);
    expect(evaluationAllowanceMs(evalStep + 2, evalStep, j, 10, 10)).toBe(200);
    expect(evaluationAllowanceMs(evalStep + 3, evalStep, j, 10, 10)).toBe(0);
    expect(evaluationAllowanceMs(evalStep, evalStep, j, 10, 10)).toBe(0);
    expect(evaluationAllowanceMs(evalStep + 1, null, j, 10, 10)).toBe(0);
  });
});
