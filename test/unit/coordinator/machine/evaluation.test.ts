/**
 * Test-set evaluations: the `evaluation` message (schema), the evaluation points (against a
 * step-by-step reference), the machine's acceptance rule (a member of the current or just-closed
 * round, a committed step, consistent counts), and rank 0 of the elastic loop evaluating exactly the
 * committed state and reporting it (simulated tabs, real machine).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { parseJobSpec, type JobSpecInput } from '../../../../core/training/job';
import { commitSpan, isEvaluationCommit, type EvaluationPlan } from '../../../../core/training/commit-schedule';
import { parseClientMessage } from '../../../../core/protocol/control-parse';
import {
  groupPlan,
  jobDone,
  positionAfterGroup,
  type RecordPosition,
  type StepPlan,
} from '../../../../core/training/groups';
import { referenceIsCommitPoint } from '../../../support/hole-free-layout';
import { MemoryNetwork, SIM_MODEL, SimCoordinator, SimTab, until } from '../../../kit/simulation';
import { type EvaluationBody, evaluationReport, Harness } from './coordinator-harness';
import { begin } from '../../../../coordinator/machine/context';
import { rollbackIn } from '../../../../coordinator/machine/checkpoints';

const VALID = {
  v: 1,
  type: 'evaluation',
  runId: 'run-1',
  workerId: 'w1-abc',
  round: 3,
  step: 13,
  epoch: 0,
  testSamples: 2000,
  correct: 1712,
  lossSum: 801.25,
};

describe('evaluation message schema', () => {
  const accepted: [string, Record<string, unknown>][] = [
    ['a valid report', VALID],
    ['all correct', { ...VALID, correct: 2000 }],
    ['none correct, zero loss', { ...VALID, correct: 0, lossSum: 0 }],
    ['a single image', { ...VALID, testSamples: 1, correct: 1 }],
  ];
  for (const [name, msg] of accepted) {
    it(`accepts ${name}`, () => {
      const parsed = parseClientMessage(JSON.stringify(msg));
      expect(parsed).toEqual({ ok: true, msg });
    });
  }

  const rejected: [string, string, string][] = [
    ['more correct than images', JSON.stringify({ ...VALID, correct: 2001 }), 'correct'],
    ['no images', JSON.stringify({ ...VALID, testSamples: 0, correct: 0 }), 'testSamples'],
    ['a fractional count', JSON.stringify({ ...VALID, correct: 10.5 }), 'correct'],
    ['a negative loss sum', JSON.stringify({ ...VALID, lossSum: -1 }), 'lossSum'],
    ['an infinite loss sum (1e999)', JSON.stringify(VALID).replace('801.25', '1e999'), 'lossSum'],
    ['step 0 (the initial state is never evaluated)', JSON.stringify({ ...VALID, step: 0 }), 'step'],
    ['a negative epoch', JSON.stringify({ ...VALID, epoch: -1 }), 'epoch'],
    ['more images than any test set', JSON.stringify({ ...VALID, testSamples: 2 ** 24 + 1 }), 'testSamples'],
    ['an unknown field', JSON.stringify({ ...VALID, accuracy: 0.8 }), 'accuracy'],
    ['a missing field', JSON.stringify({ ...VALID, lossSum: undefined }), 'lossSum'],
  ];
  for (const [name, text, field] of rejected) {
    it(`rejects ${name}`, () => {
      const parsed = parseClientMessage(text);
      expect(parsed.ok).toBe(false);
      if (!parsed.ok) {
        expect(parsed.code).toBe('bad_message');
        expect(parsed.message).toContain(field);
      }
    });
  }
});

type Plan = StepPlan & EvaluationPlan;

/** The commits of a run without partial commits where rank 0 evaluates (`isEvaluationCommit`). */
function evaluationSteps(plan: Plan): number[] {
  const steps: number[] = [];
  let at: RecordPosition = { epoch: 0, cursor: 0, holes: [] };
  for (let step = 1; !jobDone(at, plan); ) {
    const group = groupPlan(at, step, plan);
    at = positionAfterGroup(at, group, [], plan.datasetSize);
    if (isEvaluationCommit(commitSpan(group, at, plan.epochs), plan)) steps.push(group.lastStep);
    step = group.lastStep + 1;
  }
  return steps;
}

/** Reference: walk the steps one by one; evaluate at a commit point if a multiple of evalEvery (or an epoch end) was passed since the last one. */
function referencePoints(plan: Plan): number[] {
  const points: number[] = [];
  const perEpoch = Math.ceil(plan.datasetSize / plan.globalBatch);
  const total = perEpoch * plan.epochs;
  let due = false;
  for (let step = 1; step <= total; step++) {
    if (plan.evalEvery === null ? step % perEpoch === 0 : step % plan.evalEvery === 0) due = true;
    const commitPoint =
      (((step - 1) % perEpoch) + 1) % plan.commitEvery === 0 || step % perEpoch === 0 || step === total;
    if (commitPoint && (due || step === total) && plan.evalSamples > 0) {
      points.push(step);
      due = false;
    }
  }
  return points;
}

describe('evaluation points', () => {
  // 100 images, batch 8: 13 steps per epoch, 2 epochs, 26 steps.
  const base = { datasetSize: 100, globalBatch: 8, epochs: 2, commitEvery: 1, evalEvery: null, evalSamples: 2000 };
  const cases: [string, Plan, number[]][] = [
    ['default: each epoch end and the job end', base, [13, 26]],
    ['every 5 steps (and the job end)', { ...base, evalEvery: 5 }, [5, 10, 15, 20, 25, 26]],
    [
      'every 5 steps, committing every 4: the next commit point',
      { ...base, evalEvery: 5, commitEvery: 4 },
      // commit points 4, 8, 12, 13 | 17, 21, 25, 26 (counted within each epoch of 13 steps)
      [8, 12, 17, 21, 25, 26],
    ],
    ['every step', { ...base, evalEvery: 1 }, Array.from({ length: 26 }, (_, i) => i + 1)],
    ['every 100 steps: only the end', { ...base, evalEvery: 100 }, [26]],
    ['evalSamples 0: never', { ...base, evalSamples: 0 }, []],
    ['one epoch, one step', { ...base, datasetSize: 5, epochs: 1 }, [1]],
  ];
  for (const [name, plan, expected] of cases) {
    it(name, () => {
      const points = evaluationSteps(plan);
      expect(points).toEqual(expected);
      expect(points).toEqual(referencePoints(plan));
      for (const p of points)
        expect(referenceIsCommitPoint(p, plan), `evaluation point ${p} is a commit point`).toBe(true);
    });
  }

  it('agrees with the step-by-step reference over many plans', () => {
    for (const datasetSize of [7, 64, 100])
      for (const globalBatch of [3, 8, 64])
        for (const commitEvery of [1, 2, 5])
          for (const evalEvery of [null, 1, 3, 4, 10]) {
            const plan = { datasetSize, globalBatch, epochs: 3, commitEvery, evalEvery, evalSamples: 10 };
            expect(evaluationSteps(plan), JSON.stringify(plan)).toEqual(referencePoints(plan));
          }
  });
});

// ---------------------------------------------------------------- the machine

/** 100 images, batch 8: 13 steps per epoch, one epoch. */
const JOB: JobSpecInput = {
  model: 'tiny-mlp',
  globalBatch: 8,
  epochs: 1,
  minWorkers: 2,
  maxWorkers: 3,
  lastCallMs: 100,
  heartbeatMs: 1000,
  checkpointEvery: 100,
  // Every commit is an evaluation point, so the tests can pick any committed step.
  evalEvery: 1,
};

function trainingPair(): Harness {
  const h = new Harness(JOB, 100);
  h.join('a');
  h.join('b');
  h.advance(100);
  expect(h.members()).toEqual(['a', 'b']);
  h.train(4);
  return h;
}

describe('machine: evaluation reports', () => {
  it('logs an `evaluation` event with the accuracy and mean loss of a member’s report', () => {
    const h = trainingPair();
    const before = h.state;
    const actions = h.send('a', evaluationReport(h, 'a', { step: 4, testSamples: 1000, correct: 873, lossSum: 412.5 }));
    const logs = actions.filter((a) => a.kind === 'log');
    expect(logs).toEqual([
      {
        kind: 'log',
        level: 'info',
        event: 'evaluation',
        data: {
          step: 4,
          epoch: 0,
          accuracy: 0.873,
          loss: 0.4125,
          testSamples: 1000,
          workerId: h.worker('a').workerId,
          round: h.state.rendezvous.round,
          verified: false,
        },
      },
    ]);
    expect(actions.filter((a) => a.kind === 'send')).toEqual([]);
    expect(h.metricCount('tabswarm_evaluations_total')).toBe(1);
    expect(h.metrics.filter((m) => m.name === 'tabswarm_test_accuracy').at(-1)?.value).toBe(0.873);
    // Nothing but the sender's last-seen time and the remembered report changes: no persist, same
    // commit, record and rendezvous.
    expect(actions.some((a) => a.kind === 'persist' || a.kind === 'record_commit')).toBe(false);
    const { workers: _after, evaluationClaims, ...rest } = h.state;
    const { workers: _before, evaluationClaims: _none, ...restBefore } = before;
    expect(rest).toEqual(restBefore);
    expect(evaluationClaims).toHaveLength(1);
  });

  it('a number two ranks agree on is verified; one they disagree on is disputed and stays unverified', () => {
    const h = trainingPair();
    h.send('a', evaluationReport(h, 'a', { step: 4, testSamples: 1000, correct: 873, lossSum: 412.5 }));
    // Rank 1 on another GPU: one arg-max tie the other way, the loss a little off.
    h.send('b', evaluationReport(h, 'b', { step: 4, testSamples: 1000, correct: 874, lossSum: 412.51 }));
    const verified = h.logs.filter((l) => l.event === 'evaluation').at(-1)!;
    expect(verified.data).toMatchObject({
      step: 4,
      verified: true,
      agreedBy: [h.worker('a').workerId, h.worker('b').workerId],
    });
    // A repeated report from the same rank is refused.
    const again = h.send('b', evaluationReport(h, 'b', { step: 4 }));
    expect(again.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'duplicate_report')).toBe(
      true,
    );
    // Step 6 (the next evaluation point): rank 1 claims 99 % where rank 0 measured 87 %.
    h.train(2);
    h.send('a', evaluationReport(h, 'a', { step: 6, testSamples: 1000, correct: 870, lossSum: 400 }));
    h.send('b', evaluationReport(h, 'b', { step: 6, testSamples: 1000, correct: 990, lossSum: 20 }));
    expect(h.logs.at(-1)).toMatchObject({ event: 'evaluation_disputed', data: { step: 6 } });
    const step6 = h.logs.filter((l) => l.event === 'evaluation' && l.data.step === 6);
    expect(step6.map((l) => l.data.verified)).toEqual([false]);
  });

  it('a step rolled back and committed again is evaluated afresh (the old reports are not its state’s)', () => {
    const h = new Harness(JOB, 100);
    h.join('a');
    h.join('b');
    h.advance(100);
    h.train(2);
    h.send('a', evaluationReport(h, 'a', { step: 2, testSamples: 1000, correct: 870, lossSum: 400 }));
    h.train(2);
    h.send('a', evaluationReport(h, 'a', { step: 4, testSamples: 1000, correct: 880, lossSum: 390 }));
    const ctx = begin(h.state, 0);
    rollbackIn(ctx, { step: 2, epoch: 0, cursor: 0, hash: null }, 'a test');
    expect(ctx.s.evaluationClaims?.map((c) => c.step)).toEqual([2]);
  });

  it('rejects an earlier committed step (rank 0 evaluates a commit before it applies the next step), state unchanged', () => {
    const h = trainingPair();
    const before = h.state;
    h.send('a', evaluationReport(h, 'a', { step: 2 }));
    expect(h.state).toBe(before);
    expect(h.lastReceived('a')).toMatchObject({ type: 'error', code: 'wrong_step' });
  });

  it('rejects a step that is not an evaluation point (wrong_step), state unchanged', () => {
    const h = new Harness({ ...JOB, evalEvery: null }, 100); // only the epoch end (= job end, step 13)
    h.join('a');
    h.join('b');
    h.advance(100);
    h.train(4);
    const before = h.state;
    h.send('a', evaluationReport(h, 'a', { step: 4 }));
    expect(h.state).toBe(before);
    expect(h.lastReceived('a')).toMatchObject({ type: 'error', code: 'wrong_step' });
    expect(h.logs.some((l) => l.event === 'evaluation')).toBe(false);
  });

  type Case = [string, (h: Harness) => { name: string; body: EvaluationBody }, string];
  const rejections: Case[] = [
    [
      'a non-member (a newcomer waiting for the boundary)',
      (h) => {
        h.join('c');
        return { name: 'c', body: evaluationReport(h, 'c') };
      },
      'not_member',
    ],
    [
      'a future step (not committed yet)',
      (h) => ({ name: 'a', body: evaluationReport(h, 'a', { step: h.state.lastCommit.step + 1 }) }),
      'wrong_step',
    ],
    ['a step far in the future', (h) => ({ name: 'a', body: evaluationReport(h, 'a', { step: 13 }) }), 'wrong_step'],
    [
      'more correct than images (bypassing the schema)',
      (h) => ({ name: 'a', body: evaluationReport(h, 'a', { testSamples: 100, correct: 101 }) }),
      'bad_samples',
    ],
    [
      'a NaN loss sum (bypassing the schema)',
      (h) => ({ name: 'a', body: evaluationReport(h, 'a', { lossSum: Number.NaN }) }),
      'bad_samples',
    ],
    [
      'the wrong epoch for the step',
      (h) => ({ name: 'a', body: evaluationReport(h, 'a', { epoch: 1 }) }),
      'wrong_step',
    ],
    [
      'a round that is neither current nor just closed',
      (h) => ({ name: 'a', body: evaluationReport(h, 'a', { round: h.state.rendezvous.round - 1 }) }),
      'stale_round',
    ],
    [
      'a future round',
      (h) => ({ name: 'a', body: evaluationReport(h, 'a', { round: h.state.rendezvous.round + 1 }) }),
      'stale_round',
    ],
    ['another run', (h) => ({ name: 'a', body: evaluationReport(h, 'a', { runId: 'run-0' }) }), 'wrong_run'],
    [
      'a forged worker id',
      (h) => ({ name: 'a', body: evaluationReport(h, 'a', { workerId: h.worker('b').workerId! }) }),
      'forged_worker',
    ],
  ];
  for (const [name, make, code] of rejections) {
    it(`rejects ${name} (${code}), state unchanged, counted`, () => {
      const h = trainingPair();
      const { name: sender, body } = make(h);
      const before = h.state;
      const errorsBefore = h.metricCount('tabswarm_message_errors_total', { code });
      const actions = h.send(sender, body);
      expect(h.state).toBe(before);
      expect(h.lastReceived(sender)).toMatchObject({ type: 'error', code });
      expect(h.metricCount('tabswarm_message_errors_total', { code })).toBe(errorsBefore + 1);
      expect(actions.some((a) => a.kind === 'log' && a.event === 'evaluation')).toBe(false);
    });
  }

  it('accepts the report of the round that made the last commit after it closed, however many rounds closed since, until a later commit', () => {
    const h = trainingPair();
    const first = h.state.rendezvous.round;
    h.join('c');
    h.stepAll(); // step 5 commits; c is admitted at the boundary: round `first` closes, `first + 1` opens
    expect(h.state.rendezvous.round).toBe(first + 1);
    h.send('a', evaluationReport(h, 'a', { round: first, step: 5 }));
    expect(h.logs.at(-1)).toMatchObject({ event: 'evaluation', data: { step: 5, round: first } });
    // The newcomer was not in the closed round.
    h.send('c', evaluationReport(h, 'c', { round: first, step: 5 }));
    expect(h.lastReceived('c')).toMatchObject({ type: 'error', code: 'not_member' });
    // Two closes later the first round still made the last commit: its ranks are heard (here a duplicate, not a
    // stale round). The round that just closed (first + 1) is heard too, but only from its ranks 0 and 1.
    h.readyAll();
    h.send('b', { type: 'goodbye', runId: h.runId, workerId: h.worker('b').workerId! });
    expect(h.state.rendezvous.round).toBe(first + 2);
    h.send('a', evaluationReport(h, 'a', { round: first, step: 5 }));
    expect(h.lastReceived('a')).toMatchObject({ type: 'error', code: 'duplicate_report' });
    h.send('c', evaluationReport(h, 'c', { round: first + 1, step: 5 }));
    expect(h.lastReceived('c')).toMatchObject({ type: 'error', code: 'not_evaluator' });
    // Once a later round commits, the first round is stale.
    h.readyAll();
    h.stepAll();
    expect(h.state.lastCommit.step).toBe(6);
    h.send('a', evaluationReport(h, 'a', { round: first, step: 6 }));
    expect(h.lastReceived('a')).toMatchObject({ type: 'error', code: 'stale_round' });
  });

  it('accepts rank 0’s evaluation of the last step after `done`', () => {
    const h = trainingPair();
    h.train(9);
    expect(h.state.status).toBe('done');
    expect(h.state.rendezvous.participants).toEqual([]);
    const round = h.state.rendezvous.round;
    h.send('a', evaluationReport(h, 'a', { round, step: 13 }));
    expect(h.logs.at(-1)).toMatchObject({ event: 'evaluation', data: { step: 13, round } });
  });
});

// ---------------------------------------------------------------- the loop

describe('elastic loop: rank 0 evaluates the committed state', () => {
  const cleanups: (() => void)[] = [];
  afterEach(() => {
    for (const c of cleanups.splice(0).reverse()) c();
  });

  it('reports at each epoch end and at the job end, with the parameters of that commit', {
    timeout: 20_000,
  }, async () => {
    // 200 images, batch 16: 13 steps per epoch, 2 epochs; evaluations after steps 13 and 26.
    const job = parseJobSpec({
      model: SIM_MODEL,
      optimizer: { kind: 'sgd', lr: 0.1, momentum: 0.5 },
      globalBatch: 16,
      epochs: 2,
      minWorkers: 2,
      maxWorkers: 2,
      // Nobody fails here: a slow heartbeat keeps a loaded machine (a starved event loop) from
      // declaring a tab dead and turning the run into restarts that outlast the deadline.
      heartbeatMs: 1000,
      lastCallMs: 15,
      seed: 5,
      evalSamples: 300,
    });
    const coordinator = new SimCoordinator(job, 200, 'sim-run', 5);
    const network = new MemoryNetwork();
    const tabs = ['a', 'b'].map(
      (name) =>
        new SimTab(name, coordinator, network, {
          delayMs: 1,
          loop: { timeouts: { collectiveMs: 2000, ringConnectMs: 2000, syncMs: 2000, coordinatorWaitMs: 5000 } },
        }),
    );
    cleanups.push(() => {
      for (const t of tabs) if (!t.closed) t.crash();
      coordinator.stop();
    });
    // Record the parameter hash each tab evaluates (the trainer's state at the moment of the call).
    const evaluated: { tab: string; hash: string; count: number | undefined }[] = [];
    for (const t of tabs) {
      const original = t.trainer.evaluate.bind(t.trainer);
      t.trainer.evaluate = async (count) => {
        evaluated.push({ tab: t.name, hash: await t.trainer.hash(), count });
        return original(count);
      };
      t.start();
    }
    // The first rank's report of a step is unverified; the second rank's agreeing one verified.
    const events = () => coordinator.log.filter((l) => l.event === 'evaluation' && l.data.verified === false);
    const verified = () => coordinator.log.filter((l) => l.event === 'evaluation' && l.data.verified === true);
    await until(
      () => coordinator.state.status === 'done' && events().length === 2 && verified().length === 2,
      'the job and both evaluations',
      15_000,
      () => JSON.stringify({ step: coordinator.state.lastCommit.step, log: coordinator.log.slice(-5) }),
    );

    expect(coordinator.log.filter((l) => l.event === 'message_rejected')).toEqual([]);
    const commits = new Map(coordinator.liveCommits().map((c) => [c.step, c]));
    const rank0 = commits.get(13)!.world.find((w) => w.rank === 0)!.workerId;
    expect(events().map((e) => e.data.step)).toEqual([13, 26]);
    expect(events().map((e) => e.data.epoch)).toEqual([0, 1]);
    for (const e of events()) expect(e.data.testSamples).toBe(300);
    // Ranks 0 and 1 evaluated, each time on exactly the committed parameters of the step, and agreed.
    const rank0Tab = tabs.find((t) => t.loop.status.workerId === rank0)!;
    expect(evaluated.map((e) => e.tab).sort()).toEqual(['a', 'a', 'b', 'b']);
    for (const step of [13, 26]) expect(evaluated.filter((e) => e.hash === commits.get(step)!.hash)).toHaveLength(2);
    expect(evaluated.map((e) => e.count)).toEqual([300, 300, 300, 300]);
    expect(verified().map((e) => e.data.step)).toEqual([13, 26]);
    // The final accuracy is the trainer's own on the final state (correct = round(accuracy · count)).
    const final = await rank0Tab.trainer.evaluate(300);
    expect(verified()[1].data.accuracy).toBeCloseTo(Math.round(final.accuracy * 300) / 300, 12);
    expect(verified()[1].data.loss).toBeCloseTo(final.lossAvg, 9);
    // Each step's unverified report came from one of ranks 0 and 1, and its verified report from the
    // other, naming both as agreeing.
    for (const step of [13, 26]) {
      const first = events().find((e) => e.data.step === step)!;
      const second = verified().find((e) => e.data.step === step)!;
      expect(second.data.agreedBy).toEqual([first.data.workerId, second.data.workerId]);
      const ranks01 = commits.get(step)!.world.filter((w) => w.rank <= 1);
      expect([first.data.workerId, second.data.workerId].sort()).toEqual(ranks01.map((w) => w.workerId).sort());
    }
  });
});
