/**
 * The admin page's model (web/admin/model.ts) fed by hand: a snapshot, deltas applied in their order
 * (workers added, changed field by field, removed; the world-size line from the status), and a delta
 * that does not follow the last one asks for a resync instead of patching rows it cannot vouch for.
 */
import { describe, expect, it } from 'vitest';
import type { AdminJobSummary, AdminStatus, FeedMessage, FeedWorker } from '../../../../core/protocol/admin-feed';
import { applyFeedMessage } from '../../../../web/admin/model';

function worker(id: string, rank: number | null): FeedWorker {
  return {
    id,
    peerId: `p-${id}`,
    state: rank === null ? 'waiting' : 'training',
    rank,
    position: rank === null ? 0 : null,
    share: rank === null ? null : 0.5,
    lastStep: rank === null ? null : 3,
    throughput: null,
    utilization: null,
    bytesPerSample: null,
    peerRttMs: null,
    peerLinks: [],
    iceError: null,
    adapter: 'sim',
    kernels: null,
    invite: null,
    joinedAt: 0,
    lastSeen: 0,
  };
}

function status(members: number, at: number): AdminStatus {
  return {
    counts: {
      members,
      workers: members,
      ready: members,
      syncing: 0,
      waiting: 0,
      late: 0,
      iceErrors: 0,
      links: { host: 0, srflx: 0, prflx: 0, relay: 0 },
      throughput: null,
      peerRttMs: null,
    },
    at,
  } as AdminStatus;
}

const snapshot = (seq: number, workers: FeedWorker[]): FeedMessage => ({
  type: 'snapshot',
  seq,
  runId: 'r',
  at: 1000,
  status: status(workers.filter((w) => w.rank !== null).length, 1000),
  workers,
  job: {} as AdminJobSummary,
  commits: [],
  events: [],
  checkpoints: [],
  evaluations: [],
});

describe('admin page model', () => {
  it('applies numbered deltas to the snapshot rows and asks for a resync at a gap', () => {
    let { model } = applyFeedMessage(null, snapshot(7, [worker('a', 0), worker('b', 1)]));
    expect([...model!.workers.keys()]).toEqual(['a', 'b']);
    const next = applyFeedMessage(model, {
      type: 'delta',
      seq: 8,
      at: 2000,
      status: status(2, 2000),
      added: [worker('c', null)],
      changed: [{ id: 'a', peerRttMs: 12, lastStep: 4 }],
      removed: ['b'],
    });
    model = next.model;
    expect(next.changes).toMatchObject({ status: true, workers: true });
    expect([...model!.workers.keys()].sort()).toEqual(['a', 'c']);
    expect(model!.workers.get('a')).toMatchObject({ peerRttMs: 12, lastStep: 4, rank: 0, adapter: 'sim' });
    expect(model!.seq).toBe(8);
    expect(model!.statusAt).toBe(2000);
    // A status-only delta changes no rows.
    expect(
      applyFeedMessage(model, {
        type: 'delta',
        seq: 9,
        at: 3000,
        status: status(1, 3000),
        added: [],
        changed: [],
        removed: [],
      }).changes,
    ).toMatchObject({ status: true, workers: false });
    expect(model!.world.map((p) => p.size)).toEqual([2, 1]);
    // Delta 11 after 9: one was missed; nothing is applied.
    const gap = applyFeedMessage(model, {
      type: 'delta',
      seq: 11,
      at: 4000,
      status: status(0, 4000),
      added: [],
      changed: [{ id: 'a', peerRttMs: 99 }],
      removed: ['c'],
    });
    expect(gap.changes).toEqual({ resync: true });
    expect(model!.workers.get('a')!.peerRttMs).toBe(12);
    expect(model!.workers.has('c')).toBe(true);
  });
});
