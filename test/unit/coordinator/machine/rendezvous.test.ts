/**
 * Rendezvous cases, after TorchElastic's dynamic_rendezvous tests: each case is a sentence, driven
 * through the machine with an injected clock; the harness checks the invariants after every event.
 */
import { describe, expect, it } from 'vitest';
import type { JobSpecInput } from '../../../../core/training/job';
import { nextDeadline } from '../../../../coordinator/machine/machine';
import { CloseCode } from '../../../../core/protocol/coordinator-messages';
import { GOODBYE_GRACE_MS } from '../../../../coordinator/machine/round-close';
import { longestRelayChain } from '../../../../core/training/state-route';
import { Harness, hashOf } from './coordinator-harness';
import { workerOf } from '../../../../coordinator/machine/worker-table';

/** 64 images, global batch 8: 8 steps per epoch. */
const JOB: JobSpecInput = {
  model: 'tiny-mlp',
  globalBatch: 8,
  epochs: 1,
  minWorkers: 2,
  maxWorkers: 3,
  lastCallMs: 1000,
  heartbeatMs: 1000,
  maxRestarts: 2,
  checkpointEvery: 4,
};

function harness(job: JobSpecInput = {}): Harness {
  return new Harness({ ...JOB, ...job }, 64);
}

/** a, b, c joined at t=0 (a full world) and trained `steps` steps. */
function training(steps = 2, job: JobSpecInput = {}): Harness {
  const h = harness(job);
  for (const name of ['a', 'b', 'c']) h.join(name);
  if (h.state.rendezvous.phase === 'gathering') h.advance(h.state.job.lastCallMs);
  expect(h.members()).toEqual(['a', 'b', 'c']);
  h.train(steps);
  return h;
}

/** A new tab `late` connects and says hello (after the job is over). */
function lateHello(h: Harness): void {
  h.connect('late');
  h.send('late', {
    type: 'hello',
    runId: null,
    workerId: null,
    peerId: 'p',
    adapter: { vendor: '', architecture: '', description: '' },
    haveStep: null,
    haveHash: null,
  });
}

/** Keep `names` alive for `ms` in heartbeat-sized ticks. */
function heartbeatFor(h: Harness, names: string[], ms: number): void {
  for (let t = 0; t < ms; t += 500) {
    for (const n of names) h.send(n, { type: 'heartbeat', runId: h.runId, workerId: h.worker(n).workerId! });
    h.advance(500);
  }
}

const cases: [string, () => void][] = [
  [
    'a round does not start below minWorkers, however long we wait',
    () => {
      const h = harness();
      h.join('a');
      expect(h.lastReceived('a')).toMatchObject({ type: 'wait', reason: 'gathering', position: 0 });
      heartbeatFor(h, ['a'], 5000);
      expect(h.state.rendezvous.phase).toBe('gathering');
      expect(h.state.rendezvous.round).toBe(0);
    },
  ],
  [
    'a round completes at minWorkers once lastCallMs has passed since minWorkers were reached',
    () => {
      const h = harness();
      h.join('a');
      h.now = 100;
      h.join('b');
      expect(h.state.rendezvous.deadline).toBe(1100);
      h.now = 1099;
      h.apply({ kind: 'tick' });
      expect(h.state.rendezvous.phase).toBe('gathering');
      h.now = 1100;
      h.apply({ kind: 'tick' });
      expect(h.state.rendezvous.phase).toBe('syncing');
      expect(h.members()).toEqual(['a', 'b']);
      const round = h.received('b', 'round')[0];
      expect(round).toMatchObject({
        round: 1,
        step: 1,
        epoch: 0,
        cursor: 0,
        committedHash: null,
        stateFrom: { kind: 'fresh' },
      });
      expect(round.world.map((e) => [e.rank, e.share])).toEqual([
        [0, 0.5],
        [1, 0.5],
      ]);
    },
  ],
  [
    'a round completes immediately when maxWorkers have joined',
    () => {
      const h = harness();
      for (const n of ['a', 'b', 'c']) h.join(n);
      expect(h.state.rendezvous.phase).toBe('syncing');
      expect(h.members()).toEqual(['a', 'b', 'c']);
    },
  ],
  [
    'workers beyond maxWorkers wait with reason full',
    () => {
      const h = harness();
      for (const n of ['a', 'b', 'c', 'd']) h.join(n);
      expect(h.lastReceived('d')).toMatchObject({ type: 'wait', reason: 'full', position: 0 });
      expect(h.received('d', 'round')).toEqual([]);
    },
  ],
  [
    'training starts only when every participant is ready',
    () => {
      const h = harness();
      for (const n of ['a', 'b', 'c']) h.join(n);
      h.send('a', { type: 'ready', runId: h.runId, workerId: h.worker('a').workerId!, round: 1 });
      h.send('b', { type: 'ready', runId: h.runId, workerId: h.worker('b').workerId!, round: 1 });
      expect(h.state.rendezvous.phase).toBe('syncing');
      expect(h.received('a', 'train')).toEqual([]);
      h.send('c', { type: 'ready', runId: h.runId, workerId: h.worker('c').workerId!, round: 1 });
      expect(h.state.rendezvous.phase).toBe('training');
      for (const n of ['a', 'b', 'c']) expect(h.lastReceived(n)).toEqual({ v: 1, type: 'train', round: 1 });
      expect(h.metricCount('tabswarm_rendezvous_duration_ms')).toBe(0); // observed value 0 ms: all at t=0
      expect(h.metrics.some((m) => m.name === 'tabswarm_rendezvous_duration_ms')).toBe(true);
    },
  ],
  [
    'a joiner during a running round waits and is admitted at the next commit boundary, without a restart',
    () => {
      const h = training(2, { maxWorkers: 4 });
      h.join('d');
      expect(h.lastReceived('d')).toMatchObject({ type: 'wait', reason: 'round_running', position: 0 });
      h.report('a');
      h.report('b');
      expect(h.state.rendezvous.round).toBe(1);
      h.report('c'); // step 3 commits: the boundary
      for (const n of ['a', 'b', 'c']) {
        const inbox = h
          .worker(n)
          .inbox.slice(-3)
          .map((m) => m.type);
        expect(inbox).toEqual(['committed', 'round_closed', 'round']);
        expect(h.received(n, 'round_closed').pop()).toMatchObject({ round: 1, reason: 'membership', restore: false });
      }
      const round = h.received('d', 'round')[0];
      expect(round).toMatchObject({
        round: 2,
        step: 4,
        committedHash: hashOf(3),
        // Every holder is named; c, before d on the ring, feeds it (core/training/state-route.ts).
        stateFrom: { kind: 'peers', ranks: [0, 1, 2] },
      });
      expect(h.members()).toEqual(['a', 'b', 'c', 'd']);
      expect(h.state.restarts).toBe(0);
      h.train(2);
    },
  ],
  [
    'a goodbye closes the round at once with restore:true and is not a restart',
    () => {
      const h = training(2);
      h.report('a'); // step 3 in flight
      h.send('b', { type: 'goodbye', runId: h.runId, workerId: h.worker('b').workerId! });
      for (const n of ['a', 'c'])
        expect(h.received(n, 'round_closed').pop()).toMatchObject({ round: 1, reason: 'goodbye', restore: true });
      expect(h.received('b', 'round_closed')).toEqual([]);
      expect(h.state.restarts).toBe(0);
      expect(h.state.lastCommit.step).toBe(2);
      // The survivors re-form at once: no last-call window when re-forming after a closed round.
      expect(h.members()).toEqual(['a', 'c']);
      // Both survivors hold the committed state: nothing is broadcast.
      expect(h.received('c', 'round').pop()).toMatchObject({ round: 2, step: 3, stateFrom: { kind: 'held' } });
      h.train(2);
    },
  ],
  [
    'a socket closed without goodbye closes the round with restore:true and counts a restart',
    () => {
      const h = training(2);
      h.disconnect('b');
      for (const n of ['a', 'c'])
        expect(h.received(n, 'round_closed').pop()).toMatchObject({ reason: 'failure', restore: true });
      expect(h.state.restarts).toBe(1);
      expect(h.durable?.restarts).toBe(1);
      expect(workerOf(h.state.workers, h.worker('b').workerId!)).toBeUndefined();
    },
  ],
  [
    'a heartbeat older than 3×heartbeatMs closes the socket, closes the round and counts a restart',
    () => {
      const h = training(1);
      heartbeatFor(h, ['a', 'c'], 3000);
      expect(h.state.rendezvous.phase).toBe('training');
      heartbeatFor(h, ['a', 'c'], 1000);
      expect(h.worker('b').closedByServer).toBe(true);
      expect(h.state.restarts).toBe(1);
      expect(h.received('a', 'round_closed').pop()).toMatchObject({ reason: 'failure', restore: true });
      expect(
        h.lastActions.some((a) => a.kind === 'close' && a.code === CloseCode.heartbeatTimeout) ||
          h.worker('b').closedByServer,
      ).toBe(true);
    },
  ],
  [
    'a failure report closes the round, counts a restart, keeps the reporter and moves the blamed peer to the end',
    () => {
      const h = training(1, { maxWorkers: 4 });
      h.join('d');
      h.send('a', {
        type: 'failure',
        runId: h.runId,
        workerId: h.worker('a').workerId!,
        round: 1,
        reason: 'allreduce timeout',
        peer: h.worker('b').workerId!,
      });
      // The blamed peer gets a grace period to say goodbye before the restart counts.
      expect(h.state.restarts).toBe(0);
      expect(h.received('b', 'round_closed').pop()).toMatchObject({ round: 1, reason: 'failure', restore: true });
      // The survivors re-form at once, without the blamed peer while its restart is on probation.
      expect(h.members()).toEqual(['a', 'c', 'd']);
      // a and c reported step 1; d never did (it lacks the state c feeds it).
      expect(h.received('a', 'round').pop()).toMatchObject({
        round: 2,
        step: 2,
        stateFrom: { kind: 'peers', ranks: [0, 1] },
      });
      h.readyAll();
      h.advance(GOODBYE_GRACE_MS + 1);
      // No goodbye came: the restart counts, and the peer is admitted again at the next commit boundary.
      expect(h.state.restarts).toBe(1);
      h.train(1);
      expect(h.members()).toEqual(['a', 'c', 'd', 'b']);
    },
  ],
  [
    'a failure report that blames a peer which then says goodbye is no restart (its channel closed before its goodbye landed)',
    () => {
      const h = training(1);
      h.send('a', {
        type: 'failure',
        runId: h.runId,
        workerId: h.worker('a').workerId!,
        round: 1,
        reason: 'peer_closed',
        peer: h.worker('b').workerId!,
      });
      h.send('b', { type: 'goodbye', runId: h.runId, workerId: h.worker('b').workerId! });
      h.advance(GOODBYE_GRACE_MS + 1);
      expect(h.state.restarts).toBe(0);
      expect(h.state.blamedRestart).toBeNull();
    },
  ],
  [
    'a blamed peer whose socket then drops without goodbye (a crash) counts exactly one restart',
    () => {
      const h = training(1);
      h.send('a', {
        type: 'failure',
        runId: h.runId,
        workerId: h.worker('a').workerId!,
        round: 1,
        reason: 'peer_closed',
        peer: h.worker('b').workerId!,
      });
      h.disconnect('b');
      expect(h.state.restarts).toBe(1);
      h.advance(GOODBYE_GRACE_MS + 1);
      expect(h.state.restarts).toBe(1);
    },
  ],
  [
    'a failure report for an old round is rejected and changes nothing',
    () => {
      const h = training(1);
      const before = h.state;
      h.send('a', { type: 'failure', runId: h.runId, workerId: h.worker('a').workerId!, round: 0, reason: 'late' });
      expect(h.state).toBe(before);
      expect(h.lastReceived('a')).toMatchObject({ type: 'error', code: 'stale_round' });
    },
  ],
  [
    'past maxRestarts the job fails and every worker is told and disconnected',
    () => {
      const h = harness({ minWorkers: 2, maxWorkers: 2, lastCallMs: 0, maxRestarts: 2 });
      h.join('a');
      h.join('b');
      for (let i = 0; i < 3; i++) {
        h.readyAll();
        h.send('a', {
          type: 'failure',
          runId: h.runId,
          workerId: h.worker('a').workerId!,
          round: h.state.rendezvous.round,
          reason: 'channel closed',
        });
        expect(h.state.restarts).toBe(i + 1);
      }
      expect(h.state.status).toBe('failed');
      expect(h.durable?.status).toBe('failed');
      for (const n of ['a', 'b']) {
        expect(h.lastReceived(n)).toMatchObject({ type: 'error', code: 'job_failed' });
        expect(h.worker(n).closedByServer).toBe(true);
      }
      lateHello(h);
      expect(h.lastReceived('late')).toMatchObject({ type: 'error', code: 'job_failed' });
      expect(h.worker('late').closedByServer).toBe(true);
    },
  ],
  [
    'ranks are dense and stable for survivors: survivors keep their order, waiting newcomers come after',
    () => {
      const h = training(1, { maxWorkers: 4, minWorkers: 1 });
      h.join('d');
      h.disconnect('a');
      h.advance(1000);
      expect(h.members()).toEqual(['b', 'c', 'd']);
      expect(h.state.rendezvous.participants.map((p) => p.rank)).toEqual([0, 1, 2]);
    },
  ],
  [
    'an admin kick removes the worker, closes its socket and its round, without a restart',
    () => {
      const h = training(1);
      h.apply({ kind: 'admin', action: { type: 'kick', workerId: h.worker('c').workerId! } });
      expect(h.worker('c').closedByServer).toBe(true);
      expect(h.received('c', 'error').pop()).toMatchObject({ code: 'kicked' });
      expect(h.received('a', 'round_closed').pop()).toMatchObject({ reason: 'kicked', restore: true });
      expect(h.state.restarts).toBe(0);
      h.advance(1000);
      expect(h.members()).toEqual(['a', 'b']);
    },
  ],
  [
    'set_workers with a lower max shrinks the world at the next commit boundary; the rest waits',
    () => {
      const h = training(1);
      h.apply({ kind: 'admin', action: { type: 'set_workers', min: 1, max: 2 } });
      expect(h.durable?.job.maxWorkers).toBe(2);
      h.stepAll();
      expect(h.members()).toEqual(['a', 'b']);
      expect(h.received('c', 'round_closed').pop()).toMatchObject({ reason: 'membership', restore: false });
      expect(h.lastReceived('c')).toMatchObject({ type: 'wait', reason: 'full', position: 0 });
      expect(h.state.restarts).toBe(0);
    },
  ],
  [
    'set_workers with a higher min holds the next round until enough workers joined',
    () => {
      const h = harness();
      h.apply({ kind: 'admin', action: { type: 'set_workers', min: 3, max: 3 } });
      h.join('a');
      h.join('b');
      heartbeatFor(h, ['a', 'b'], 5000);
      expect(h.state.rendezvous.phase).toBe('gathering');
      h.join('c');
      expect(h.state.rendezvous.phase).toBe('syncing');
    },
  ],
  [
    'set_workers with min above max is ignored',
    () => {
      const h = harness();
      const before = h.state;
      h.apply({ kind: 'admin', action: { type: 'set_workers', min: 5, max: 2 } });
      expect(h.state).toBe(before);
    },
  ],
  [
    'pause closes the round with restore:true and everyone waits (reason paused); resume gathers again',
    () => {
      const h = training(2);
      h.report('a');
      h.apply({ kind: 'admin', action: { type: 'pause' } });
      for (const n of ['a', 'b', 'c']) {
        expect(h.received(n, 'round_closed').pop()).toMatchObject({ reason: 'paused', restore: true });
        expect(h.lastReceived(n)).toMatchObject({ type: 'wait', reason: 'paused' });
      }
      expect(h.state.restarts).toBe(0);
      expect(h.durable?.status).toBe('paused');
      h.join('d');
      expect(h.lastReceived('d')).toMatchObject({ type: 'wait', reason: 'paused' });
      heartbeatFor(h, ['a', 'b', 'c', 'd'], 5000);
      expect(h.state.rendezvous.phase).toBe('gathering');
      h.apply({ kind: 'admin', action: { type: 'resume' } });
      expect(h.state.rendezvous.phase).toBe('syncing'); // four enrolled ≥ maxWorkers 3: at once
      expect(h.members()).toEqual(['a', 'b', 'c']);
      expect(h.received('a', 'round').pop()).toMatchObject({ step: 3, stateFrom: { kind: 'held' } });
    },
  ],
  [
    'after the last step of the last epoch the job is done and every worker receives done',
    () => {
      const h = training(8, { maxWorkers: 4 });
      expect(h.state.status).toBe('done');
      for (const n of ['a', 'b', 'c']) expect(h.lastReceived(n)).toEqual({ v: 1, type: 'done', step: 8 });
      expect(h.received('a', 'checkpoint_request').pop()).toMatchObject({ step: 8 });
      h.disconnect('b');
      expect(h.state.restarts).toBe(0);
      lateHello(h);
      expect(h.lastReceived('late')).toEqual({ v: 1, type: 'done', step: 8 });
      expect(h.worker('late').closedByServer).toBe(true);
    },
  ],
  [
    'when no participant holds the last commit, the record rolls back to the latest checkpoint',
    () => {
      const h = training(5); // checkpointEvery 4: requested at step 4
      expect(h.received('a', 'checkpoint_request').pop()).toMatchObject({
        step: 4,
        url: expect.stringMatching(/^\/api\/checkpoints\/run-1\/4\?token=[0-9a-f]{32}$/),
      });
      h.apply({ kind: 'checkpoint_stored', step: 4, epoch: 0, cursor: 32, sha256: 'ab'.repeat(32) });
      expect(h.durable?.checkpoints).toEqual([
        { step: 4, epoch: 0, cursor: 32, holes: [], sha256: 'ab'.repeat(32), hash: hashOf(4) },
      ]);
      for (const n of ['a', 'b', 'c']) h.disconnect(n);
      h.join('x');
      h.join('y');
      h.advance(1000);
      expect(h.state.lastCommit).toEqual({ step: 4, epoch: 0, cursor: 32, holes: [], hash: hashOf(4) });
      expect(h.commits.map((c) => c.step)).toEqual([1, 2, 3, 4]);
      expect(h.received('x', 'round').pop()).toMatchObject({
        step: 5,
        cursor: 32,
        committedHash: hashOf(4),
        stateFrom: { kind: 'checkpoint', step: 4, url: '/api/checkpoints/run-1/4', sha256: 'ab'.repeat(32) },
      });
      h.train(4);
      expect(h.state.status).toBe('done');
    },
  ],
  [
    'without a checkpoint the record rolls back to the start and the new round starts fresh',
    () => {
      const h = training(3);
      for (const n of ['a', 'b', 'c']) h.disconnect(n);
      h.join('x');
      h.join('y');
      h.advance(1000);
      expect(h.state.lastCommit).toEqual({ step: 0, epoch: 0, cursor: 0, holes: [], hash: null });
      expect(h.commits).toEqual([]);
      expect(h.received('x', 'round').pop()).toMatchObject({ step: 1, stateFrom: { kind: 'fresh' } });
    },
  ],
  [
    'a reconnecting worker that holds the last commit is the state source, so nothing is rolled back',
    () => {
      const h = training(3);
      for (const n of ['a', 'b', 'c']) h.disconnect(n);
      h.join('x');
      h.join('b'); // reconnect with haveStep 3 and its hash
      h.advance(1000);
      expect(h.state.lastCommit.step).toBe(3);
      expect(h.members()).toEqual(['x', 'b']);
      expect(h.received('x', 'round').pop()).toMatchObject({ step: 4, stateFrom: { kind: 'peer', rank: 1 } });
    },
  ],
  [
    'a waiting worker leaving does not touch the running round',
    () => {
      const h = training(1, { maxWorkers: 3 });
      h.join('d');
      const round = h.state.rendezvous.round;
      h.disconnect('d');
      expect(h.state.rendezvous.round).toBe(round);
      expect(h.state.rendezvous.phase).toBe('training');
      expect(h.state.restarts).toBe(0);
      expect(h.received('a', 'round_closed')).toEqual([]);
    },
  ],
  [
    'nextDeadline names the last-call deadline and the earliest heartbeat timeout',
    () => {
      const h = harness();
      expect(nextDeadline(h.state)).toBeNull();
      h.join('a');
      expect(nextDeadline(h.state)).toBe(3001);
      h.now = 200;
      h.join('b');
      expect(nextDeadline(h.state)).toBe(1200);
    },
  ],
  [
    '32 joiners at one boundary: every holder is a source, and the joiners are spread so none waits behind more than its share',
    () => {
      const h = training(1, { maxWorkers: 40 });
      const joiners = Array.from({ length: 32 }, (_, i) => `j${String(i).padStart(2, '0')}`);
      for (const j of joiners) h.join(j);
      h.train(1); // the boundary: all 35 admitted
      const round = h.received('j00', 'round').pop()!;
      expect(round.world).toHaveLength(35);
      const holders = round.world.filter((w) => !joiners.includes(h.nameOf(w.workerId))).map((w) => w.rank);
      expect(round.stateFrom).toEqual({ kind: 'peers', ranks: holders });
      // The holders keep their order, each followed by at most ⌈32 / 3⌉ = 11 joiners (admission order
      // would have put all 32 behind c, one chain of 32).
      expect(holders.map((r) => h.nameOf(round.world[r].workerId))).toEqual(['a', 'b', 'c']);
      expect(longestRelayChain(35, holders)).toBe(11);
      expect(round.world.filter((w) => !holders.includes(w.rank)).map((w) => h.nameOf(w.workerId))).toEqual(joiners);
    },
  ],
  [
    'two joiners keep the admission order: a short chain is not worth new ranks',
    () => {
      const h = training(1, { maxWorkers: 5 });
      h.join('d');
      h.join('e');
      h.train(1);
      expect(h.members()).toEqual(['a', 'b', 'c', 'd', 'e']);
      expect(h.received('d', 'round').pop()!.stateFrom).toEqual({ kind: 'peers', ranks: [0, 1, 2] });
    },
  ],
];

describe('rendezvous', () => {
  for (const [name, run] of cases) it(name, run);
});
