/**
 * The admin feed's deltas against the full state, on a real coordinator process under churn: workers
 * join, say goodbye, drop their sockets and report link RTTs while one page follows the feed from the
 * start (applying every delta to its rows) and new pages connect now and then. Each new page's
 * snapshot (the coordinator's rows when it connected, with the number of the last delta) must equal
 * the rows the first page holds after applying that delta; no delta may be missing; and at the end the
 * rows name exactly the workers `/api/status` lists.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FeedWorker } from '../../core/protocol/admin-feed';
import { type CoordinatorProcess, spawnCoordinator, TEST_ADMIN_TOKEN } from '../support/coordinator-process';
import { mulberry32 } from '../support/rng';
import { SimTrainer } from '../support/sim-trainer';
import { FeedReader, is } from './admin-feed-reader';

const JOB = {
  model: 'tiny-mlp',
  globalBatch: 32,
  epochs: 10_000,
  minWorkers: 2,
  maxWorkers: 6,
  lastCallMs: 50,
  heartbeatMs: 500,
  maxRestarts: 100_000,
};

const byId = (rows: FeedWorker[]) => [...rows].sort((a, b) => a.id.localeCompare(b.id));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('admin feed deltas under churn', () => {
  let proc: CoordinatorProcess;
  const trainers = new Set<SimTrainer>();
  const readers: FeedReader[] = [];

  beforeAll(async () => {
    proc = await spawnCoordinator({ job: JOB, extraArgs: ['--joins-per-minute', '100000'] });
  });

  afterAll(async () => {
    for (const r of readers) r.close();
    for (const t of trainers) await t.worker.terminate();
    await proc?.stop();
  });

  async function open(): Promise<FeedReader> {
    const { feed } = await FeedReader.open(`${proc.url}/api/admin/feed?token=${TEST_ADMIN_TOKEN}`);
    readers.push(feed);
    return feed;
  }

  it("a new page's snapshot equals the rows the first page built from every delta, with no delta missed", async () => {
    const rand = mulberry32(23);
    const first = await open();
    await first.next(is('snapshot'), 'first snapshot');
    const join = async (i: number) => {
      const rtt = 5 + Math.round(rand() * 80);
      const t = await SimTrainer.join(proc.wsUrl, {
        httpUrl: proc.url,
        computeMs: 20,
        keepReceived: false,
        heartbeatMs: 150,
        heartbeatFields: (me) => (me.rank === null ? {} : { peerRttMs: rtt + (Date.now() % 7) }),
      });
      trainers.add(t);
      void t.worker.closed.then(() => trainers.delete(t));
      return i;
    };
    for (let i = 0; i < 8; i++) await join(i);
    const checks: { seq: number; rows: FeedWorker[] }[] = [];
    for (let round = 0; round < 12; round++) {
      // Churn: a goodbye, a dropped socket or a newcomer, then time for reports and heartbeats.
      const list = [...trainers];
      const r = rand();
      if (r < 0.35 && list.length > 3) {
        const victim = list[Math.floor(rand() * list.length)];
        victim.stop();
        victim.worker.goodbye();
        void victim.worker.close();
      } else if (r < 0.7 && list.length > 3) {
        void list[Math.floor(rand() * list.length)].worker.terminate();
      } else await join(round);
      await sleep(150 + Math.floor(rand() * 250));
      if (round % 3 === 2) {
        const late = await open();
        const snapshot = await late.next(is('snapshot'), 'a later page snapshot');
        checks.push({ seq: snapshot.seq, rows: snapshot.workers });
        late.close();
      }
    }
    await sleep(600);
    expect(checks.length).toBe(4);
    for (const check of checks) {
      const held = first.rowsAt.get(check.seq);
      expect(held, `the first page reached delta ${check.seq}`).toBeDefined();
      expect(byId(held!)).toEqual(byId(check.rows));
    }
    expect(first.gaps).toBe(0);
    // Several deltas changed rows between the checks (not a feed that sends nothing).
    const deltas = first.messages.filter((m) => m.type === 'delta');
    expect(deltas.filter((m) => m.type === 'delta' && m.changed.length > 0).length).toBeGreaterThan(5);
    expect(deltas.some((m) => m.type === 'delta' && m.removed.length > 0)).toBe(true);
    // And the rows name the workers the coordinator has now.
    await sleep(1200);
    const status = await proc.status('?limit=256&waitingLimit=256');
    const ids = [...status.world.items, ...status.waiting.items].map((w) => w.id).sort();
    expect([...first.workers.keys()].sort()).toEqual(ids);
  });
});
