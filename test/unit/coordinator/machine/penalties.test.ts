/**
 * Liveness under abuse, in the pure core: who pays for a restart, cooling-off bans, the ready
 * deadline, state claims that prove nothing, admin actions that validate, and ids that cannot reach
 * the prototype. Each case replays a finding of issue 12 against `handle` (through the Harness).
 */
import { describe, expect, it } from 'vitest';
import type { JobSpecInput } from '../../../../core/training/job';
import { adminRefusal } from '../../../../coordinator/machine/admin';
import {
  bannedAddresses,
  DEFAULT_TRUST_POLICY,
  restoreState,
  type TrustPolicy,
} from '../../../../coordinator/machine/machine';
import { readyAllowanceMs } from '../../../../core/training/link-floor';
import { TINY_MLP_SPEC } from '../../../../core/training/model-spec';
import { coolOffFor } from '../../../../coordinator/machine/penalties';
import { idSchema } from '../../../../core/protocol/control-fields';
import { CloseCode } from '../../../../core/protocol/coordinator-messages';
import { parseClientMessage } from '../../../../core/protocol/control-parse';
import { Harness, hashOf } from './coordinator-harness';
import { connectionOf } from '../../../../coordinator/machine/worker-table';

const JOB: JobSpecInput = {
  model: 'tiny-mlp',
  globalBatch: 8,
  epochs: 5,
  minWorkers: 2,
  maxWorkers: 3,
  lastCallMs: 100,
  heartbeatMs: 1000,
  checkpointEvery: 1000,
};
const POLICY: TrustPolicy = {
  ...DEFAULT_TRUST_POLICY,
  workerQuota: 2,
  addressQuota: 5,
  readyTimeoutMs: 5000,
  coolOffMs: 10_000,
};
const HONEST_A = '198.51.100.1';
const HONEST_B = '198.51.100.2';
const ATTACKER = '192.0.2.66';

function honestPair(policy = POLICY, job = JOB): Harness {
  const h = new Harness(job, 400, 'run-1', policy);
  h.join('a', { addr: HONEST_A });
  h.join('b', { addr: HONEST_B });
  h.advance(100);
  h.readyAll();
  h.stepAll();
  expect(h.state.lastCommit.step).toBe(1);
  return h;
}

/** The attacker's socket sends `hello` from ATTACKER; returns the worker name or null if refused. */
function attackerHello(h: Harness, name: string): boolean {
  const w = h.connect(name, ATTACKER);
  h.send(name, {
    type: 'hello',
    runId: null,
    workerId: null,
    peerId: `peer-${name}`,
    adapter: { vendor: 'evil', architecture: '', description: '' },
    haveStep: null,
    haveHash: null,
  });
  return connectionOf(h.state.connections, w.conn)?.workerId != null;
}

/** Let every member that got a round send ready, then tick past the last call. */
function settle(h: Harness): void {
  for (let i = 0; i < 5; i++) {
    h.readyAll();
    h.advance(150);
  }
}

describe('a failure report is evidence, not a verdict', () => {
  it('101 failure reports from one address cannot fail the job; the address is cooled off', { timeout: 30_000 }, () => {
    const h = honestPair(POLICY, { ...JOB, maxRestarts: 100 });
    let sent = 0;
    let attempt = 0;
    while (sent < 101 && attempt < 400) {
      attempt += 1;
      const name = `x${attempt}`;
      if (!attackerHello(h, name)) break; // refused: the address is cooling off
      for (let i = 0; i < 40 && sent < 101 && h.isConnected(name); i++) {
        h.advance(150); // admitted at the next boundary needs a step; a closed round re-forms
        h.readyAll();
        h.stepAll();
        const w = h.worker(name);
        if (w.round && h.state.rendezvous.phase !== 'gathering') {
          h.send(name, { type: 'failure', runId: h.runId, workerId: w.workerId!, round: w.round.round, reason: 'x' });
          sent += 1;
        }
      }
    }
    expect(sent).toBeGreaterThan(POLICY.addressQuota);
    expect(h.state.status).toBe('active');
    // Restarts counted against the job: at most the address's quota; the rest were absorbed.
    expect(h.state.restarts).toBeLessThanOrEqual(POLICY.addressQuota);
    expect(h.metricCount('tabswarm_restarts_absorbed_total')).toBeGreaterThan(0);
    expect(bannedAddresses(h.state, h.now).has(ATTACKER)).toBe(true);
    // A new socket from the address is refused with `banned` and closed.
    expect(attackerHello(h, 'late')).toBe(false);
    expect(h.received('late', 'error').pop()).toMatchObject({ code: 'banned' });
    expect(h.worker('late').closedByServer).toBe(true);
    // The honest pair trains on.
    settle(h);
    const before = h.state.lastCommit.step;
    h.stepAll();
    expect(h.state.lastCommit.step).toBe(before + 1);
    expect(h.members().sort()).toEqual(['a', 'b']);
  });

  it('an uncorroborated blame is charged to the reporter, not to the healthy peer it blamed', () => {
    const h = honestPair();
    h.join('x', { addr: ATTACKER });
    h.stepAll(); // x is admitted at the boundary
    settle(h);
    expect(h.members()).toContain('x');
    const x = h.worker('x');
    h.send('x', {
      type: 'failure',
      runId: h.runId,
      workerId: x.workerId!,
      round: x.round!.round,
      reason: 'allreduce timed out',
      peer: h.worker('a').workerId!,
    });
    // a stays connected and keeps sending heartbeats through the grace period.
    for (let i = 0; i < 3; i++) {
      h.send('a', { type: 'heartbeat', runId: h.runId, workerId: h.worker('a').workerId! });
      h.send('b', { type: 'heartbeat', runId: h.runId, workerId: h.worker('b').workerId! });
      h.advance(500);
    }
    expect(h.state.penalties[`w:${x.workerId}`]?.charges.length).toBe(1);
    expect(h.state.penalties[`a:${ATTACKER}`]?.charges.length).toBe(1);
    expect(h.state.penalties[`w:${h.worker('a').workerId}`]).toBeUndefined();
    expect(h.state.penalties[`a:${HONEST_A}`]).toBeUndefined();
  });

  it('a blame corroborated by the peer dying is charged to that peer', () => {
    const h = honestPair();
    const [a, b] = [h.worker('a'), h.worker('b')];
    h.send('a', {
      type: 'failure',
      runId: h.runId,
      workerId: a.workerId!,
      round: a.round!.round,
      reason: 'channel closed',
      peer: b.workerId!,
    });
    h.disconnect('b'); // its socket drops: corroborated
    expect(h.state.restarts).toBe(1);
    expect(h.state.penalties[`w:${b.workerId}`]?.charges.length).toBe(1);
    expect(h.state.penalties[`a:${HONEST_B}`]?.charges.length).toBe(1);
    expect(h.state.penalties[`w:${a.workerId}`]).toBeUndefined();
  });

  it('hello-and-close sockets from one address cannot fail the job (500 of them)', { timeout: 30_000 }, () => {
    const h = new Harness({ ...JOB, minWorkers: 1, maxWorkers: 8, maxRestarts: 100 }, 400, 'run-1', POLICY);
    h.join('a', { addr: HONEST_A });
    settle(h);
    h.stepAll();
    let refused = 0;
    for (let i = 0; i < 500; i++) {
      const name = `s${i}`;
      if (!attackerHello(h, name)) {
        refused += 1;
        continue;
      }
      h.stepAll(); // admitted at the boundary
      h.readyAll();
      h.disconnect(name);
      h.advance(20);
      h.readyAll();
    }
    expect(h.state.status).toBe('active');
    expect(h.state.restarts).toBeLessThanOrEqual(POLICY.addressQuota);
    expect(refused).toBeGreaterThan(400);
    settle(h);
    const before = h.state.lastCommit.step;
    h.stepAll();
    expect(h.state.lastCommit.step).toBe(before + 1);
  });

  it('cooling-off periods double with each ban, up to the cap', { timeout: 30_000 }, () => {
    expect([0, 1, 2, 3].map((n) => coolOffFor(POLICY, n))).toEqual([10_000, 20_000, 40_000, 80_000]);
    expect(coolOffFor(POLICY, 40)).toBe(POLICY.maxCoolOffMs);
    const h = honestPair();
    const failOnce = (name: string) => {
      const w = h.worker(name);
      h.send(name, { type: 'failure', runId: h.runId, workerId: w.workerId!, round: w.round!.round, reason: 'x' });
    };
    // One worker at a time from the address, each reporting failures until it is refused.
    const banLengths: number[] = [];
    for (let round = 0; round < 2; round++) {
      let n = 0;
      while (!bannedAddresses(h.state, h.now).has(ATTACKER) && n < 50) {
        n += 1;
        const name = `y${round}-${n}`;
        if (!attackerHello(h, name)) break;
        h.stepAll();
        settle(h);
        while (h.isConnected(name) && h.worker(name).round) {
          failOnce(name);
          settle(h);
        }
      }
      const until = bannedAddresses(h.state, h.now).get(ATTACKER)!;
      banLengths.push(until - h.now);
      h.advance(until - h.now + 1);
    }
    expect(banLengths[1]).toBeGreaterThan(banLengths[0] * 1.5);
  });
});

describe('the ready deadline', () => {
  it('drops members that never say ready, without a restart, and admits the honest tab', { timeout: 30_000 }, () => {
    const h = new Harness({ ...JOB, minWorkers: 1, maxWorkers: 8 }, 400, 'run-1', {
      ...POLICY,
      addressQuota: 100,
      workerQuota: 100,
    });
    for (let i = 0; i < 8; i++) attackerHello(h, `hb${i}`);
    h.advance(150);
    expect(h.state.rendezvous.phase).toBe('syncing');
    h.join('honest', { addr: HONEST_A });
    expect(h.received('honest', 'wait').pop()).toMatchObject({ reason: 'full' });
    // Heartbeats keep them alive, but they never say ready. A fresh start sends no state, so the deadline
    // is the policy's alone (no slow-link allowance for stallers to hide behind, core/link-floor.ts).
    expect(h.received('hb0', 'round').pop()!.stateFrom).toEqual({ kind: 'fresh' });
    const deadline = POLICY.readyTimeoutMs + readyAllowanceMs({ kind: 'fresh' }, TINY_MLP_SPEC, 8);
    expect(deadline).toBe(POLICY.readyTimeoutMs);
    for (let t = 0; t < deadline; t += 500) {
      if (t + 500 >= deadline) expect(h.metricCount('tabswarm_ready_timeouts_total')).toBe(0);
      for (let i = 0; i < 8; i++) {
        const w = h.worker(`hb${i}`);
        if (h.isConnected(`hb${i}`)) h.send(`hb${i}`, { type: 'heartbeat', runId: h.runId, workerId: w.workerId! });
      }
      h.send('honest', { type: 'heartbeat', runId: h.runId, workerId: h.worker('honest').workerId! });
      h.advance(500);
    }
    expect(h.state.restarts).toBe(0);
    expect(h.metricCount('tabswarm_ready_timeouts_total')).toBe(8);
    for (let i = 0; i < 8; i++) expect(h.isConnected(`hb${i}`)).toBe(false);
    settle(h);
    expect(h.members()).toEqual(['honest']);
    h.stepAll();
    expect(h.state.lastCommit.step).toBe(1);
  });
});

describe('state claims prove nothing', () => {
  it('a hello with haveStep/haveHash copied from /api/status is not the sync source', () => {
    const h = honestPair(POLICY, { ...JOB, minWorkers: 1 });
    h.stepAll();
    h.stepAll();
    const step = h.state.lastCommit.step;
    const hash = h.state.lastCommit.hash;
    // Coordinator restart: everyone must say hello again.
    h.restart(restoreState(h.durable!, POLICY));
    h.connect('liar', ATTACKER);
    h.send('liar', {
      type: 'hello',
      runId: h.runId,
      workerId: null,
      peerId: 'peer-liar',
      adapter: { vendor: '', architecture: '', description: '' },
      haveStep: step,
      haveHash: hash,
    });
    h.advance(150);
    const round = h.received('liar', 'round').pop()!;
    expect(round.stateFrom.kind).not.toBe('peer');
    expect(h.state.lastCommit.step).toBe(0); // no checkpoint: back to the start, never the liar's state
  });

  it('a member of the committing round that reconnects with its id is the sync source', () => {
    const h = honestPair(POLICY, { ...JOB, minWorkers: 2 });
    h.stepAll();
    const step = h.state.lastCommit.step;
    h.restart(restoreState(h.durable!, POLICY));
    h.join('liar', { addr: ATTACKER });
    h.worker('liar').committed = { step, hash: h.state.lastCommit.hash };
    h.join('b', { addr: HONEST_B }); // reconnects with its id and the state it holds
    h.advance(150);
    const round = h.received('b', 'round').pop()!;
    const bRank = round.world.find((e) => e.workerId === h.worker('b').workerId)!.rank;
    expect(round.stateFrom).toEqual({ kind: 'peer', rank: bRank });
    expect(h.state.lastCommit.step).toBe(step);
  });
});

describe('admin actions', () => {
  it('set_workers goes through the job validation', () => {
    const h = honestPair();
    expect(adminRefusal(h.state, { type: 'set_workers', min: 5, max: 2 })).toMatch(/minWorkers must be <= maxWorkers/);
    expect(adminRefusal(h.state, { type: 'set_workers', min: 1, max: 4 })).toBeNull();
    const before = h.state;
    h.apply({ kind: 'admin', action: { type: 'set_workers', min: 5, max: 2 } });
    expect(h.state).toBe(before);
  });

  it('kick of a prototype key is an unknown worker, not a crash', () => {
    const h = honestPair();
    for (const id of ['constructor', '__proto__', 'toString'])
      expect(adminRefusal(h.state, { type: 'kick', workerId: id })).toBe(`unknown worker ${id}`);
  });

  it('resume brings a failed job back from its last checkpoint with the restart count reset', () => {
    const h = honestPair(POLICY, { ...JOB, maxRestarts: 0, checkpointEvery: 2 });
    h.stepAll(); // step 2: checkpoint requested
    h.apply({ kind: 'checkpoint_stored', step: 2, epoch: 0, cursor: 16, sha256: 'ab'.repeat(32) });
    h.stepAll(); // step 3
    h.disconnect('b'); // a crash: restart 1 > maxRestarts 0
    expect(h.state.status).toBe('failed');
    expect(adminRefusal(h.state, { type: 'pause' })).toMatch(/failed/);
    expect(adminRefusal(h.state, { type: 'resume' })).toBeNull();
    h.apply({ kind: 'admin', action: { type: 'resume' } });
    expect(h.state.status).toBe('active');
    expect(h.state.restarts).toBe(0);
    expect(h.state.lastCommit.step).toBe(2);
    expect(h.durable!.status).toBe('active');
    // Tabs can join and train again.
    h.join('c', { addr: HONEST_A });
    h.join('d', { addr: HONEST_B });
    settle(h);
    expect(h.received('c', 'round').pop()!.stateFrom.kind).toBe('checkpoint');
    h.stepAll();
    expect(h.state.lastCommit).toMatchObject({ step: 3, hash: hashOf(3) });
  });

  it('resume of a done job says why not', () => {
    const h = honestPair();
    expect(adminRefusal({ ...h.state, status: 'done' }, { type: 'resume' })).toBe('the job is done');
  });
});

describe('ids', () => {
  it.each(['__proto__', 'constructor', 'hasOwnProperty', 'toString'])('refuses %s as an id', (id) => {
    expect(idSchema.safeParse(id).success).toBe(false);
    const hello = JSON.stringify({
      v: 1,
      type: 'hello',
      runId: null,
      workerId: id,
      peerId: 'p',
      adapter: { vendor: '', architecture: '', description: '' },
      haveStep: null,
      haveHash: null,
    });
    expect(parseClientMessage(hello)).toMatchObject({ ok: false, code: 'bad_message' });
  });

  it('keeps the close codes distinct', () => {
    const codes = Object.values(CloseCode);
    expect(new Set(codes).size).toBe(codes.length);
  });
});
