/**
 * The admin feed's worker deltas (coordinator/admin/feed-workers.ts) against the full state, under
 * churn: the machine runs through the product executor (coordinator-harness.ts) with joins, goodbyes,
 * dropped sockets, heartbeats that change RTTs, paths and ICE errors, reports and commits, rounds
 * opening and closing. Pages apply every delta to what they hold (one from the start, others from a
 * snapshot taken mid-run); after every delta each page's rows must equal the rows built afresh from the
 * state (a new feed's first diff), and a delta taken with nothing changed must be empty.
 */
import { describe, expect, it } from 'vitest';
import { FeedWorkers } from '../../../../coordinator/admin/feed-workers';
import { applyWorkersDelta, type FeedWorker } from '../../../../core/protocol/admin-feed';
import { mulberry32 } from '../../../support/rng';
import { Harness } from '../machine/coordinator-harness';

const JOB = {
  model: 'tiny-mlp',
  globalBatch: 12,
  epochs: 50,
  minWorkers: 2,
  maxWorkers: 5,
  lastCallMs: 100,
  heartbeatMs: 1000,
  maxRestarts: 10_000,
};

/** The rows a new page would get now: a fresh feed's first diff adds every worker. */
function freshRows(h: Harness): FeedWorker[] {
  return new FeedWorkers().diff(h.state).added.sort((a, b) => a.id.localeCompare(b.id));
}

function rowsOf(page: Map<string, FeedWorker>): FeedWorker[] {
  return [...page.values()].sort((a, b) => a.id.localeCompare(b.id));
}

describe('admin feed worker deltas', () => {
  for (const seed of [1, 2, 3]) {
    it(`applied in order, rebuild exactly the rows of the state under churn (seed ${seed})`, () => {
      const rand = mulberry32(seed);
      const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)];
      const h = new Harness(JOB, 120);
      const names = Array.from({ length: 12 }, (_, i) => `t${i}`);
      const feed = new FeedWorkers();
      const pages: { rows: Map<string, FeedWorker>; seq: number }[] = [{ rows: new Map(), seq: 0 }];
      let deltas = 0;
      let changedFields = 0;
      for (let i = 0; i < 400; i++) {
        const connected = names.filter((n) => h.isConnected(n) && h.worker(n).workerId !== null);
        const members = h.members().filter((n) => h.isConnected(n));
        const r = rand();
        if (r < 0.1) {
          const absent = names.filter((n) => !h.isConnected(n));
          if (absent.length) h.join(pick(absent), { fresh: rand() < 0.5 });
        } else if (r < 0.5) {
          // One member's ready at a time: a delta may come between two (the round trains after the last).
          const unready = members.filter((n) => h.worker(n).round && !h.worker(n).readySent);
          if (h.state.rendezvous.phase === 'syncing' && unready.length) {
            const w = h.worker(pick(unready));
            w.readySent = true;
            h.send(w.name, { type: 'ready', runId: h.runId, workerId: w.workerId!, round: w.round!.round });
          } else if (h.state.rendezvous.phase === 'training' && members.length) h.stepAll();
        } else if (r < 0.54 && connected.length) {
          const n = pick(connected);
          h.send(n, { type: 'goodbye', runId: h.runId, workerId: h.worker(n).workerId! });
          h.disconnect(n);
        } else if (r < 0.57 && connected.length) {
          h.disconnect(pick(connected));
        } else if (r < 0.8 && connected.length) {
          const n = pick(connected);
          const peer = pick(connected);
          h.send(n, {
            type: 'heartbeat',
            runId: h.runId,
            workerId: h.worker(n).workerId!,
            peerRttMs: Math.round(rand() * 2000) / 10,
            peerLinks:
              peer === n
                ? []
                : [
                    {
                      peer: h.worker(peer).workerId!,
                      local: pick(['host', 'srflx', 'relay'] as const),
                      remote: 'host',
                      rttMs: Math.round(rand() * 100),
                    },
                  ],
            iceError: rand() < 0.1 ? 'TURN authentication failed' : null,
          });
        } else {
          h.advance(100 + Math.floor(rand() * 1500));
        }
        if (rand() < 0.35) {
          const delta = feed.diff(h.state);
          deltas += 1;
          changedFields += delta.changed.reduce((sum, c) => sum + Object.keys(c).length - 1, 0);
          for (const page of pages) {
            expect(delta.seq).toBe(page.seq + 1);
            applyWorkersDelta(page.rows, delta);
            page.seq = delta.seq;
            expect(rowsOf(page.rows)).toEqual(freshRows(h));
          }
          // Nothing happened since: the next delta carries nothing.
          const idle = feed.diff(h.state);
          for (const page of pages) page.seq = idle.seq;
          expect([idle.added, idle.changed, idle.removed]).toEqual([[], [], []]);
          // Now and then a page opens: the snapshot is the baseline rows and the last number.
          if (rand() < 0.05) pages.push({ rows: new Map(feed.rows().map((w) => [w.id, w])), seq: feed.seq });
        }
      }
      expect(deltas).toBeGreaterThan(80);
      expect(pages.length).toBeGreaterThan(1);
      expect(changedFields).toBeGreaterThan(50);
    });
  }

  it('sends a changed worker as its changed fields only, and lists members by rank then the waiting', () => {
    const h = new Harness(JOB, 120);
    for (const n of ['a', 'b', 'c']) h.join(n);
    h.advance(200);
    const feed = new FeedWorkers();
    const first = feed.diff(h.state);
    expect(first.added.map((w) => [w.state, w.rank])).toEqual([
      ['syncing', 0],
      ['syncing', 1],
      ['syncing', 2],
    ]);
    h.send('b', {
      type: 'heartbeat',
      runId: h.runId,
      workerId: h.worker('b').workerId!,
      peerRttMs: 42,
    });
    const delta = feed.diff(h.state);
    expect(delta.changed).toEqual([{ id: h.worker('b').workerId, peerRttMs: 42 }]);
    h.join('d');
    h.disconnect('a');
    const churn = feed.diff(h.state);
    expect(churn.added.map((w) => w.id)).toEqual([h.worker('d').workerId]);
    expect(churn.removed).toEqual([h.worker('a').workerId]);
    expect(feed.rows().map((w) => [w.rank, w.position])).toEqual(
      feed
        .rows()
        .map((w) => [w.rank, w.position])
        .sort((x, y) => (x[0] ?? 99) - (y[0] ?? 99) || (x[1] ?? 99) - (y[1] ?? 99)),
    );
  });
});
