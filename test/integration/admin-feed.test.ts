/**
 * The admin feed fed by hand: a fake store with history, an injected clock, and machine actions pushed
 * through the subscribe hook, read back over real HTTP as Server-Sent Events. Checks what each action
 * becomes on the wire (commit rates computed from the clock, rollbacks, event categories, checkpoint
 * lists, evaluations) and that closing the feed ends the streams.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AdminFeed, type ActionListener } from '../../coordinator/admin/admin-feed';
import { parseJobSpec } from '../../core/training/job';
import { initialState, type Action, type CommitRecord, type CoordinatorState } from '../../coordinator/machine/machine';
import type { CheckpointRow, CommitRow, EventRow } from '../../coordinator/runtime/store';
import { FeedReader, is } from './admin-feed-reader';

const RUN = 'run-feed';

function commitRecord(step: number, round: number, count = 16, worldSize = 2): CommitRecord {
  return {
    step,
    firstStep: step,
    epoch: 0,
    cursorStart: (step - 1) * 16,
    count,
    hash: step.toString(16).padStart(64, '0'),
    round,
    world: Array.from({ length: worldSize }, (_, rank) => ({ workerId: `w${rank}`, rank, share: 1 / worldSize })),
    loss: 2 / step,
  };
}

class FakeStore {
  commitRows: CommitRow[] = [];
  eventRows: EventRow[] = [];
  checkpointRows: CheckpointRow[] = [];
  commits(): CommitRow[] {
    return this.commitRows.filter((r) => !r.rolledBack);
  }
  events(_runId: string, opts: { afterId?: number; limit?: number } = {}): EventRow[] {
    return this.eventRows.filter((e) => e.id > (opts.afterId ?? 0)).slice(0, opts.limit ?? 1000);
  }
  checkpoints(): CheckpointRow[] {
    return this.checkpointRows;
  }
}

describe('admin feed', () => {
  let store: FakeStore;
  let state: CoordinatorState;
  let clock: number;
  let listeners: Set<ActionListener>;
  let feed: AdminFeed;
  let server: Server;
  let url: string;
  const readers: FeedReader[] = [];

  beforeEach(async () => {
    store = new FakeStore();
    // History from before the feed started: two commits of round 1, 1 s apart, and three log rows.
    store.commitRows = [
      { ...commitRecord(1, 1), rolledBack: false, committedAt: 10_000 },
      { ...commitRecord(2, 1), rolledBack: false, committedAt: 11_000 },
    ];
    store.eventRows = [
      { id: 1, at: 9_000, level: 'info', event: 'join', data: { workerId: 'w0' } },
      { id: 2, at: 9_001, level: 'debug', event: 'commit', data: {} },
      { id: 3, at: 9_500, level: 'warn', event: 'message_rejected', data: { code: 'forged_worker' } },
    ];
    state = initialState(parseJobSpec({ model: 'tiny-mlp', globalBatch: 16, epochs: 2 }), 160, RUN);
    clock = 12_000;
    listeners = new Set();
    feed = new AdminFeed({
      runId: RUN,
      store,
      state: () => state,
      subscribe: (listener) => {
        listeners.add(listener);
        return () => listeners.delete(listener);
      },
      now: () => clock,
      statusThrottleMs: 0,
      statusIntervalMs: 60_000,
    });
    server = createServer((req, res) => feed.attach(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });

  afterEach(async () => {
    for (const r of readers.splice(0)) r.close();
    feed.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  async function open(): Promise<FeedReader> {
    const { feed: reader } = await FeedReader.open(url);
    readers.push(reader);
    return reader;
  }

  const emit = (actions: Action[]) => {
    for (const listener of listeners) listener(actions);
  };

  it('starts with a snapshot of the stored history (info and above, with row ids) and the job', async () => {
    const reader = await open();
    const snapshot = await reader.next(is('snapshot'), 'snapshot');
    expect(snapshot.runId).toBe(RUN);
    expect(snapshot.at).toBe(12_000);
    expect(snapshot.commits.map((c) => [c.step, c.samplesPerSecond, c.worldSize, c.loss])).toEqual([
      [1, null, 2, 2],
      // 16 samples in the 1 s after the first commit.
      [2, 16, 2, 1],
    ]);
    expect(snapshot.events.map((e) => [e.id, e.event, e.category])).toEqual([
      [1, 'join', 'join'],
      [3, 'message_rejected', 'rejected'],
    ]);
    expect(snapshot.job).toMatchObject({
      model: 'tiny-mlp',
      globalBatch: 16,
      epochs: 2,
      datasetSize: 160,
      stepsPerEpoch: 10,
      heartbeatMs: 2000,
    });
    expect(snapshot.status).toMatchObject({ runId: RUN, state: 'gathering', step: 0 });
    expect(snapshot.status.counts.members).toBe(0);
    expect(snapshot.workers).toEqual([]);
  });

  it('turns commits into rates by the clock, and restarts the rate after a rollback or a new round', async () => {
    const reader = await open();
    await reader.next(is('snapshot'), 'snapshot');
    clock = 13_000; // 2 s after step 2: window [1 s, 11 s… 13 s] holds steps 1..3
    emit([{ kind: 'record_commit', commit: commitRecord(3, 1, 32) }]);
    const third = await reader.next(is('commit'), 'commit 3');
    // Samples after the window's first commit (16 + 32) over its span (13 s - 10 s).
    expect(third.commit).toMatchObject({ step: 3, count: 32, at: 13_000, round: 1 });
    expect(third.commit.samplesPerSecond).toBeCloseTo(48 / 3, 10);
    // A delta follows a transition.
    await reader.next(is('delta'), 'delta after the commit');

    emit([{ kind: 'rollback_commits', afterStep: 2 }]);
    expect((await reader.next(is('rollback'), 'rollback')).afterStep).toBe(2);
    clock = 14_000;
    emit([{ kind: 'record_commit', commit: commitRecord(3, 1) }]);
    expect((await reader.next(is('commit'), 'commit 3 again')).commit.samplesPerSecond).toBeNull();
    clock = 14_500;
    emit([{ kind: 'record_commit', commit: commitRecord(4, 2, 16, 3) }]);
    const otherRound = await reader.next(is('commit'), 'commit 4 in round 2');
    expect(otherRound.commit).toMatchObject({ round: 2, worldSize: 3, samplesPerSecond: null });
    clock = 15_000;
    emit([{ kind: 'record_commit', commit: commitRecord(5, 2, 16, 3) }]);
    expect((await reader.next(is('commit'), 'commit 5')).commit.samplesPerSecond).toBe(32);
  });

  it('sends log lines at info and above with their category, checkpoint lists and evaluations', async () => {
    const reader = await open();
    await reader.next(is('snapshot'), 'snapshot');
    clock = 20_000;
    emit([
      { kind: 'log', level: 'debug', event: 'commit', data: { step: 3 } },
      {
        kind: 'log',
        level: 'warn',
        event: 'worker_failed',
        data: { workerId: 'w1', detail: 'socket closed without goodbye' },
      },
      { kind: 'log', level: 'warn', event: 'round_closed', data: { round: 1, reason: 'failure', restart: true } },
      { kind: 'log', level: 'info', event: 'round_closed', data: { round: 2, reason: 'goodbye', restart: false } },
      { kind: 'metric', name: 'tabswarm_restarts_total' },
    ]);
    const crash = await reader.next(is('event'), 'crash event');
    expect(crash.event).toMatchObject({
      id: null,
      at: 20_000,
      level: 'warn',
      event: 'worker_failed',
      category: 'crash',
    });
    expect((await reader.next(is('event'), 'restart event')).event.category).toBe('restart');
    expect((await reader.next(is('event'), 'round event')).event.category).toBe('round');

    store.checkpointRows = [
      { step: 3, epoch: 0, cursor: 48, sha256: 'ab'.repeat(32), bytes: 1234, path: '/x', createdAt: 19_000 },
    ];
    emit([{ kind: 'log', level: 'info', event: 'checkpoint_stored', data: { step: 3, sha256: 'ab'.repeat(32) } }]);
    const list = await reader.next(is('checkpoints'), 'checkpoint list');
    expect(list.checkpoints).toEqual([
      {
        step: 3,
        epoch: 0,
        cursor: 48,
        sha256: 'ab'.repeat(32),
        bytes: 1234,
        createdAt: 19_000,
        safetensorsUrl: '/api/admin/model.safetensors?step=3',
        snapshotUrl: `/api/checkpoints/${RUN}/3`,
      },
    ]);

    emit([{ kind: 'log', level: 'info', event: 'evaluation', data: { step: 3, accuracy: 0.8125, loss: 1.5 } }]);
    expect((await reader.next(is('evaluation'), 'evaluation')).evaluation).toEqual({
      step: 3,
      accuracy: 0.8125,
      loss: 1.5,
      at: 20_000,
      verified: false,
    });
    // Debug lines and metrics never reach the page.
    expect(reader.messages.some((m) => m.type === 'event' && m.event.level === 'debug')).toBe(false);

    // A page connecting now sees the live lines in its snapshot, with the stored ones.
    const later = await open();
    const snapshot = await later.next(is('snapshot'), 'second snapshot');
    expect(snapshot.events.map((e) => e.event)).toEqual([
      'join',
      'message_rejected',
      'worker_failed',
      'round_closed',
      'round_closed',
      'checkpoint_stored',
      'evaluation',
    ]);
    expect(snapshot.evaluations).toEqual([{ step: 3, accuracy: 0.8125, loss: 1.5, at: 20_000, verified: false }]);
  });

  it('ends every stream when closed and unsubscribes from the machine', async () => {
    const a = await open();
    const b = await open();
    await a.next(is('snapshot'), 'snapshot a');
    await b.next(is('snapshot'), 'snapshot b');
    expect(feed.clientCount).toBe(2);
    expect(listeners.size).toBe(1);
    feed.close();
    await Promise.all([a.ended, b.ended]);
    expect(listeners.size).toBe(0);
    expect(feed.clientCount).toBe(0);
  });
});
