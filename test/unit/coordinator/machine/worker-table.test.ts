/**
 * The workers table (coordinator/machine/worker-table.ts) and the copy-on-write writes of context.ts: ids
 * spread over the buckets, lookups never reach the prototype, and a transition that edits one worker of
 * a thousand copies one bucket and leaves the state it was given as it was.
 */
import { describe, expect, it } from 'vitest';
import { begin, mutParticipant, mutWorker } from '../../../../coordinator/machine/context';
import { initialState } from '../../../../coordinator/machine/machine';
import type { CoordinatorState, WorkerInfo } from '../../../../coordinator/machine/state';
import {
  bucketOf,
  TABLE_BUCKETS,
  workerCount,
  workerOf,
  workersOf,
  workerTableOf,
} from '../../../../coordinator/machine/worker-table';
import { parseJobSpec } from '../../../../core/training/job';

function worker(workerId: string, lastSeen = 0): WorkerInfo {
  return {
    workerId,
    peerId: `peer-${workerId}`,
    conn: `c-${workerId}`,
    adapter: { vendor: 'sim', architecture: '', description: '' },
    joinedAt: 0,
    lastSeen,
    holds: [],
    throughput: null,
    peerRttMs: null,
    addr: '127.0.0.1',
  };
}

/** Ids as join.ts makes them: a sequence number and a fragment of a random nonce. */
const ids = Array.from({ length: 1000 }, (_, i) => `w${i + 1}-${((i * 2654435761) >>> 0).toString(36).slice(0, 6)}`);

function stateWith(workerIds: string[]): CoordinatorState {
  const s = initialState(parseJobSpec({ model: 'tiny-mlp', globalBatch: 8 }), 64, 'run-1');
  return { ...s, workers: workerTableOf(workerIds.map((id) => worker(id))) };
}

describe('the workers table', () => {
  it('spreads 1,000 worker ids over every bucket, none with more than twice its share', () => {
    const counts = new Array<number>(TABLE_BUCKETS).fill(0);
    for (const id of ids) counts[bucketOf(id)] += 1;
    expect(Math.min(...counts)).toBeGreaterThan(0);
    expect(Math.max(...counts)).toBeLessThanOrEqual((2 * ids.length) / TABLE_BUCKETS);
  });

  it('finds every worker it holds, counts and lists them, and never answers from the prototype', () => {
    const table = workerTableOf(ids.map((id) => worker(id)));
    expect(workerCount(table)).toBe(1000);
    expect(new Set(workersOf(table).map((w) => w.workerId))).toEqual(new Set(ids));
    for (const id of ids) expect(workerOf(table, id)?.workerId).toBe(id);
    for (const hostile of ['__proto__', 'constructor', 'toString', 'hasOwnProperty'])
      expect(workerOf(table, hostile)).toBeUndefined();
  });

  it('a write to one worker of 1,000 copies its bucket only and leaves the given state untouched', () => {
    const before = stateWith(ids);
    const snapshot = JSON.stringify(before);
    const ctx = begin(before, 5);
    mutWorker(ctx, ids[7]).lastSeen = 5;
    mutWorker(ctx, ids[7]).throughput = 2; // the second edit reuses this transition's copy
    const after = ctx.s;
    expect(JSON.stringify(before)).toBe(snapshot);
    expect(workerOf(after.workers, ids[7])).toMatchObject({ lastSeen: 5, throughput: 2 });
    const shared = after.workers.filter((bucket, i) => bucket === before.workers[i]).length;
    expect(shared).toBe(TABLE_BUCKETS - 1);
    const bucket = bucketOf(ids[7]);
    for (const id of Object.keys(after.workers[bucket]).filter((id) => id !== ids[7]))
      expect(after.workers[bucket][id]).toBe(before.workers[bucket][id]);
  });

  it('an edited participant is a copy in a new array: the given round is untouched', () => {
    const s = stateWith(['a', 'b']);
    const participants = ['a', 'b'].map((workerId, rank) => ({
      workerId,
      peerId: `peer-${workerId}`,
      rank,
      slot: rank,
      share: 0.5,
      ready: false,
      lastStep: 0,
    }));
    const before: CoordinatorState = { ...s, rendezvous: { ...s.rendezvous, phase: 'syncing', participants } };
    const ctx = begin(before, 1);
    mutParticipant(ctx, 'b')!.ready = true;
    expect(mutParticipant(ctx, 'nobody')).toBeUndefined();
    expect(before.rendezvous.participants.map((p) => p.ready)).toEqual([false, false]);
    expect(ctx.s.rendezvous.participants.map((p) => p.ready)).toEqual([false, true]);
    expect(ctx.s.rendezvous.participants[0]).toBe(participants[0]);
  });
});
