/**
 * `/api/status` bounded whatever the swarm's size (coordinator/machine/status-view.ts, the schema in
 * core/protocol/views.ts): at 1,000 workers and a world of 256 the body is the aggregates plus one page
 * of each list, valid against its zod schema, its size independent of the workers beyond the page; the
 * aggregates are counted over every worker; pages and their caps follow the query.
 */
import { describe, expect, it } from 'vitest';
import { initialState } from '../../../../coordinator/machine/machine';
import type { CoordinatorState, Participant, WorkerInfo } from '../../../../coordinator/machine/state';
import { statusResponse } from '../../../../coordinator/machine/status-view';
import { workerTableOf } from '../../../../coordinator/machine/worker-table';
import {
  DEFAULT_STATUS_PAGE,
  parseStatusPage,
  STATUS_PAGE_DEFAULT,
  STATUS_PAGE_MAX,
  statusResponseSchema,
} from '../../../../core/protocol/views';
import { parseJobSpec } from '../../../../core/training/job';

const NOW = 1_000_000;
const HEARTBEAT_MS = 1000;

function swarm(workers: number, world: number): CoordinatorState {
  const s = initialState(
    parseJobSpec({ model: 'tiny-mlp', globalBatch: 256, minWorkers: 1, maxWorkers: 4096, heartbeatMs: HEARTBEAT_MS }),
    10_000,
    'run-1',
  );
  const infos: WorkerInfo[] = Array.from({ length: workers }, (_, i) => ({
    workerId: `w${i}-abcdef`,
    peerId: `peer-${i}`,
    conn: `c${i}`,
    adapter: { vendor: 'vendor', architecture: 'arch', description: 'a long adapter description '.repeat(8) },
    joinedAt: 0,
    // Every tenth is 2 s silent (late: more than 1.5 heartbeats).
    lastSeen: i % 10 === 0 ? NOW - 2000 : NOW - 100,
    holds: [],
    throughput: i < world ? 0.5 : null,
    peerRttMs: i < world ? 10 + (i % 5) : null,
    addr: '127.0.0.1',
    invite: null,
    peerLinks:
      i < world
        ? [{ peer: `w${(i + 1) % world}-abcdef`, local: i % 4 === 0 ? 'relay' : 'host', remote: 'host', rttMs: 10 }]
        : [],
    iceError: i === world ? 'TURN authentication failed (401 Unauthorized at turn:203.0.113.2:3478)' : null,
  }));
  const participants: Participant[] = infos.slice(0, world).map((w, rank) => ({
    workerId: w.workerId,
    peerId: w.peerId,
    rank,
    slot: rank,
    share: 1 / world,
    ready: rank % 2 === 0,
    lastStep: 7,
  }));
  return {
    ...s,
    workers: workerTableOf(infos),
    rendezvous: {
      ...s.rendezvous,
      phase: 'syncing',
      round: 3,
      participants,
      waitList: infos.slice(world).map((w) => w.workerId),
    },
  };
}

const bytes = (x: unknown) => JSON.stringify(x).length;

describe('/api/status at 1,000 workers', () => {
  it('is the aggregates and a page of each list, valid, and no bigger than at 400 workers', () => {
    const big = statusResponse(swarm(1000, 256), NOW, DEFAULT_STATUS_PAGE);
    expect(() => statusResponseSchema.parse(big)).not.toThrow();
    expect(big.world).toMatchObject({ offset: 0, limit: STATUS_PAGE_DEFAULT, total: 256 });
    expect(big.world.items.map((w) => w.rank)).toEqual(Array.from({ length: STATUS_PAGE_DEFAULT }, (_, i) => i));
    expect(big.waiting).toMatchObject({ total: 744 });
    expect(big.waiting.items).toHaveLength(STATUS_PAGE_DEFAULT);
    // The same pages of a smaller swarm: the body does not grow with the workers beyond the page.
    const small = statusResponse(swarm(400, 256), NOW, DEFAULT_STATUS_PAGE);
    expect(Math.abs(bytes(big) - bytes(small))).toBeLessThan(100);
    expect(bytes(big)).toBeLessThan(64 * 1024);
  });

  it('counts every worker in its aggregates', () => {
    const { counts } = statusResponse(swarm(1000, 256), NOW, DEFAULT_STATUS_PAGE);
    expect(counts).toMatchObject({
      workers: 1000,
      members: 256,
      ready: 128,
      syncing: 128,
      waiting: 744,
      late: 100,
      iceErrors: 1,
    });
    // 256 ring links, every fourth from a relay.
    expect(counts.links).toEqual({ host: 192, srflx: 0, prflx: 0, relay: 64 });
    expect(counts.throughput).toBeCloseTo(128, 9);
    expect(counts.peerRttMs).toEqual({ median: 12, max: 14 });
  });

  it('pages on with offset and limit, and cuts a limit above the cap', () => {
    const s = swarm(1000, 256);
    const parsed = parseStatusPage(new URLSearchParams('offset=250&limit=100000&waitingOffset=740&waitingLimit=10'));
    expect(parsed).toEqual({
      ok: true,
      page: { offset: 250, limit: STATUS_PAGE_MAX, waitingOffset: 740, waitingLimit: 10 },
    });
    if (!parsed.ok) return;
    const page = statusResponse(s, NOW, parsed.page);
    expect(page.world.items.map((w) => w.rank)).toEqual([250, 251, 252, 253, 254, 255]);
    expect(page.waiting.items.map((w) => w.position)).toEqual([740, 741, 742, 743]);
    const all = statusResponse(s, NOW, { ...DEFAULT_STATUS_PAGE, limit: STATUS_PAGE_MAX });
    expect(all.world.items).toHaveLength(256);
    expect(() => statusResponseSchema.parse(all)).not.toThrow();
  });

  it('refuses a page that is not a whole number, naming the parameter', () => {
    for (const query of ['offset=-1', 'limit=1.5', 'waitingOffset=abc', 'limit=1e3', 'waitingLimit='])
      expect(parseStatusPage(new URLSearchParams(query))).toMatchObject({
        ok: false,
        error: expect.stringMatching(/must be a whole number/),
      });
  });
});
