/**
 * Invariant (4) of docs/ARCHITECTURE.md: bad input gets an error (or a closed socket), is counted in
 * `tabswarm_message_errors_total{code}`, and changes nothing: status and audit are the same before and
 * after, and the round it was thrown at still commits its next step.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CoordinatorProcess, spawnCoordinator } from '../support/coordinator-process';
import { SimTrainer, simulatedStateHash } from '../support/sim-trainer';
import { SimWorker, type ServerMsg } from '../support/sim-worker';
import { assignStep } from '../../core/training/groups';
import { referenceStepPosition } from '../support/hole-free-layout';
import { MAX_CONTROL_MESSAGE_BYTES } from '../../core/protocol/control-parse';

const JOB = {
  model: 'tiny-mlp',
  globalBatch: 32,
  minWorkers: 2,
  maxWorkers: 2,
  lastCallMs: 50,
  heartbeatMs: 5000,
  checkpointEvery: 1000,
};

/** Status without the fields that move with the clock (when it was taken, ages, who is late by now). */
function stable(status: any): unknown {
  const { at: _at, counts, ...rest } = status;
  const { late: _late, ...still } = counts;
  return {
    ...rest,
    counts: still,
    world: status.world.items.map(({ lastHeartbeatAgeMs: _age, ...w }: any) => w),
    waiting: status.waiting.items.map(({ lastHeartbeatAgeMs: _age, ...w }: any) => w),
  };
}

describe('bad input from a tab', () => {
  let proc: CoordinatorProcess;
  let a: SimTrainer;
  let b: SimTrainer;
  let attacker: SimWorker;
  let round: number;
  let baseline: { status: unknown; audit: unknown };

  beforeAll(async () => {
    proc = await spawnCoordinator({ job: JOB });
    a = await SimTrainer.join(proc.wsUrl, { httpUrl: proc.url, stopAfterStep: 1, heartbeatMs: 0 });
    b = await SimTrainer.join(proc.wsUrl, { httpUrl: proc.url, stopAfterStep: 1, heartbeatMs: 0 });
    await Promise.all([a.untilCommitted(1), b.untilCommitted(1)]);
    // From here on the test reads their sockets itself.
    a.stop();
    b.stop();
    a.worker.onMessage = null;
    b.worker.onMessage = null;
    attacker = await SimWorker.connect(proc.wsUrl);
    const status = await proc.status();
    round = status.round;
    expect(status).toMatchObject({ state: 'training', step: 1 });
    baseline = { status: stable(status), audit: await proc.audit() };
  });
  afterAll(async () => {
    await proc?.stop();
  });

  /** A step report from `from` that would be valid for step 2 except where `overrides` says. */
  function report(from: SimTrainer, overrides: Record<string, unknown> = {}): Record<string, unknown> {
    const { cursor, count } = referenceStepPosition(2, from.job);
    const shares = [0.5, 0.5];
    const rank = from.rank!;
    return {
      type: 'step_report',
      runId: from.worker.runId,
      workerId: from.worker.workerId,
      round,
      rank,
      step: 2,
      hash: simulatedStateHash(from.job, 2),
      lossSum: 1,
      samples: assignStep(cursor, count, shares)[rank].count,
      computeMs: 1,
      ...overrides,
    };
  }

  async function expectRejected(socket: SimWorker, send: () => void, code: string | string[]): Promise<ServerMsg> {
    const codes = Array.isArray(code) ? code : [code];
    const before = await proc.metrics();
    send();
    const error = await socket.next('error');
    expect(codes).toContain(error.code);
    expect(typeof error.message).toBe('string');
    const after = await proc.metrics();
    const sample = `tabswarm_message_errors_total{code="${error.code}"}`;
    expect(CoordinatorProcess.metricValue(after, sample)).toBe(CoordinatorProcess.metricValue(before, sample) + 1);
    expect(stable(await proc.status())).toEqual(baseline.status);
    expect(await proc.audit()).toEqual(baseline.audit);
    return error;
  }

  const text = (obj: Record<string, unknown>) => JSON.stringify({ v: 1, ...obj });

  it('malformed JSON → bad_json', async () => {
    await expectRejected(a.worker, () => a.worker.sendRaw('{"v":1,"type":'), 'bad_json');
  });

  it('an unknown message type → bad_message', async () => {
    await expectRejected(a.worker, () => a.worker.send({ type: 'bogus', runId: a.worker.runId }), 'bad_message');
  });

  it('unknown fields in a known message → bad_message', async () => {
    await expectRejected(
      a.worker,
      () => a.worker.send({ type: 'heartbeat', runId: a.worker.runId, workerId: a.worker.workerId, admin: true }),
      'bad_message',
    );
  });

  it('another protocol version → bad_version', async () => {
    await expectRejected(
      a.worker,
      () =>
        a.worker.sendRaw(
          JSON.stringify({ v: 2, type: 'heartbeat', runId: a.worker.runId, workerId: a.worker.workerId }),
        ),
      'bad_version',
    );
  });

  it('a frame over the protocol size limit → too_large', async () => {
    const padded = text({
      type: 'heartbeat',
      runId: a.worker.runId,
      workerId: a.worker.workerId,
      pad: 'x'.repeat(MAX_CONTROL_MESSAGE_BYTES),
    });
    await expectRejected(a.worker, () => a.worker.sendRaw(padded), 'too_large');
  });

  it('a binary frame → bad_message', async () => {
    await expectRejected(a.worker, () => a.worker.sendRaw(Buffer.from([1, 2, 3, 4])), 'bad_message');
  });

  it('the literal NaN in JSON → bad_json', async () => {
    const body = text(report(a)).replace('"lossSum":1', '"lossSum":NaN');
    expect(body).toContain('NaN');
    await expectRejected(a.worker, () => a.worker.sendRaw(body), 'bad_json');
  });

  it('a number too large for a double (1e999 → Infinity) → bad_message', async () => {
    const body = text(report(a)).replace('"lossSum":1', '"lossSum":1e999');
    await expectRejected(a.worker, () => a.worker.sendRaw(body), 'bad_message');
    const samples = text(report(a)).replace(/"samples":\d+/, '"samples":123456789012345678901234567890');
    await expectRejected(a.worker, () => a.worker.sendRaw(samples), 'bad_message');
  });

  it('a wrong runId → wrong_run', async () => {
    await expectRejected(
      a.worker,
      () => a.worker.send({ type: 'heartbeat', runId: 'some-other-run', workerId: a.worker.workerId }),
      'wrong_run',
    );
    await expectRejected(a.worker, () => a.worker.send(report(a, { runId: 'some-other-run' })), 'wrong_run');
  });

  it("a forged workerId (another worker's id on this socket) → forged_worker", async () => {
    await expectRejected(
      a.worker,
      () => a.worker.send(report(a, { workerId: b.worker.workerId, rank: b.rank })),
      'forged_worker',
    );
    await expectRejected(
      a.worker,
      () => a.worker.send({ type: 'goodbye', runId: a.worker.runId, workerId: b.worker.workerId }),
      'forged_worker',
    );
  });

  it("a forged rank (another rank's slot) → forged_rank", async () => {
    await expectRejected(a.worker, () => a.worker.send(report(a, { rank: b.rank })), 'forged_rank');
    await expectRejected(a.worker, () => a.worker.send(report(a, { rank: 7 })), 'forged_rank');
  });

  it('a report for a stale round → stale_round', async () => {
    await expectRejected(a.worker, () => a.worker.send(report(a, { round: round - 1 })), 'stale_round');
    await expectRejected(
      a.worker,
      () => a.worker.send({ type: 'ready', runId: a.worker.runId, workerId: a.worker.workerId, round: round + 5 }),
      'stale_round',
    );
  });

  it('a report for a future step → wrong_step', async () => {
    await expectRejected(a.worker, () => a.worker.send(report(a, { step: 7 })), 'wrong_step');
  });

  it('a report for a committed step → stale/duplicate', async () => {
    await expectRejected(a.worker, () => a.worker.send(report(a, { step: 1 })), ['duplicate_report', 'stale_step']);
  });

  it('a report with the wrong sample count → bad_samples', async () => {
    await expectRejected(a.worker, () => a.worker.send(report(a, { samples: 3 })), 'bad_samples');
  });

  it('a second hello on a welcomed socket → already_joined', async () => {
    const hello = {
      type: 'hello',
      runId: null,
      workerId: null,
      peerId: 'p',
      adapter: { vendor: '', architecture: '', description: '' },
      haveStep: null,
      haveHash: null,
    };
    await expectRejected(a.worker, () => a.worker.send(hello), 'already_joined');
  });

  it("a stranger's messages before hello → not_joined; a worker id cannot be taken over", async () => {
    await expectRejected(attacker, () => attacker.send(report(a)), 'not_joined');
    const hijack = {
      type: 'hello',
      runId: a.worker.runId,
      workerId: a.worker.workerId,
      peerId: 'evil',
      adapter: { vendor: '', architecture: '', description: '' },
      haveStep: 1,
      haveHash: simulatedStateHash(a.job, 1),
    };
    // With the right reconnect secret a second socket for a live id is refused …
    await expectRejected(attacker, () => attacker.send({ ...hijack, secret: a.worker.secret }), 'id_in_use');
    // … and without it the id is not taken over at all: the socket is welcomed as a new worker whose
    // state claims count for nothing.
    const thief = await SimWorker.connect(proc.wsUrl);
    const welcome = await thief.join({ ...hijack, workerId: a.worker.workerId, runId: a.worker.runId });
    expect(welcome.workerId).not.toBe(a.worker.workerId);
    await thief.close();
    await expect.poll(async () => stable(await proc.status())).toEqual(baseline.status);
  });

  it('a frame beyond the hard limit closes that socket (1009), is counted, and changes nothing', async () => {
    const before = await proc.metrics();
    attacker.sendRaw('x'.repeat(8 * MAX_CONTROL_MESSAGE_BYTES));
    const closed = await attacker.closed;
    expect(closed.code).toBe(1009);
    await expect
      .poll(async () =>
        CoordinatorProcess.metricValue(await proc.metrics(), 'tabswarm_message_errors_total{code="too_large"}'),
      )
      .toBe(CoordinatorProcess.metricValue(before, 'tabswarm_message_errors_total{code="too_large"}') + 1);
    expect(stable(await proc.status())).toEqual(baseline.status);
  });

  it('a flood of frames is rate-limited and the flooding socket closed (1008)', async () => {
    const flooder = await SimWorker.connect(proc.wsUrl);
    for (let i = 0; i < 3000; i++) flooder.sendRaw('{');
    const closed = await flooder.closed;
    expect(closed.code).toBe(1008);
    expect(
      CoordinatorProcess.metricValue(await proc.metrics(), 'tabswarm_message_errors_total{code="rate_limited"}'),
    ).toBeGreaterThan(0);
    expect(stable(await proc.status())).toEqual(baseline.status);
  });

  it('after all that, the round still commits its next step', async () => {
    a.worker.send(report(a));
    b.worker.send(report(b));
    const [ca, cb] = await Promise.all([a.worker.next('committed'), b.worker.next('committed')]);
    expect(ca).toMatchObject({ step: 2, round, hash: simulatedStateHash(a.job, 2) });
    expect(cb.step).toBe(2);
    const audit = await proc.audit();
    expect(audit).toMatchObject({ ok: true, commitRows: 2, lastCommitStep: 2 });
    expect(audit.epochs[0]).toMatchObject({ committed: 64, duplicates: [] });
  });
});
