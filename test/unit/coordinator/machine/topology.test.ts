/**
 * The coordinator plans each round's topology from the link RTTs the tabs report (coordinator/machine/
 * topology.ts, core/training/topology.ts): driven through the machine, invariants checked after every
 * event by the harness.
 */
import { describe, expect, it } from 'vitest';
import type { ServerMessage } from '../../../../core/protocol/coordinator-messages';
import { MAX_REMEMBERED_LINKS, rememberRtts, roundTopology } from '../../../../coordinator/machine/topology';
import type { CoordinatorState } from '../../../../coordinator/machine/state';
import { statusResponse } from '../../../../coordinator/machine/status-view';
import { FeedWorkers } from '../../../../coordinator/admin/feed-workers';
import { DEFAULT_STATUS_PAGE, statusResponseSchema } from '../../../../core/protocol/views';
import type { JobSpecInput } from '../../../../core/training/job';
import { Harness } from './coordinator-harness';

const JOB: JobSpecInput = {
  model: 'tiny-mlp',
  globalBatch: 64,
  epochs: 4,
  minWorkers: 2,
  maxWorkers: 64,
  lastCallMs: 1000,
  heartbeatMs: 1000,
  checkpointEvery: 100,
  topology: 'auto',
};

/** `names` joined and trained one step in one round. */
function world(names: string[], job: JobSpecInput = {}): Harness {
  const h = new Harness({ ...JOB, ...job }, 4096);
  for (const name of names) h.join(name);
  h.advance(JOB.lastCallMs!);
  expect(h.members()).toEqual(names);
  h.train(1);
  return h;
}

/** Every tab reports the RTT of its link to every other tab (as if it had measured them all). */
function reportRtts(h: Harness, names: string[], rtt: (a: string, b: string) => number): void {
  for (const a of names)
    h.send(a, {
      type: 'heartbeat',
      runId: h.runId,
      workerId: h.worker(a).workerId!,
      peerLinks: names
        .filter((b) => b !== a)
        .slice(0, 64)
        .map((b) => ({ peer: `peer-${b}`, local: 'host' as const, remote: 'host' as const, rttMs: rtt(a, b) })),
    });
}

/** A newcomer joins and is admitted at the next commit boundary: the round that opens then. */
function nextRound(h: Harness, newcomer: string): Extract<ServerMessage, { type: 'round' }> {
  h.join(newcomer);
  h.train(1);
  const round = h.lastReceived(newcomer);
  if (round?.type !== 'round') {
    const last = [...h.worker(newcomer).inbox].reverse().find((m) => m.type === 'round');
    if (last?.type !== 'round') throw new Error(`${newcomer} was not admitted`);
    return last;
  }
  return round;
}

describe('the topology of a round', () => {
  it('orders the ring by the RTTs the tabs measured', () => {
    // Five tabs on a line: a(0) … e(40) ms apart by position, admitted in the order a, d, b, e, c.
    const names = ['a', 'd', 'b', 'e', 'c'];
    const at: Record<string, number> = { a: 0, b: 10, c: 20, d: 30, e: 40, f: 50 };
    const h = world(names);
    reportRtts(h, names, (x, y) => Math.abs(at[x] - at[y]));
    const round = nextRound(h, 'f');
    // f measured nothing yet: its links cost the median. The known part of the ring runs along the line.
    const order = round.world.map((w) => h.nameOf(w.workerId)).filter((n) => n !== 'f');
    const path = [...order, ...order].join('');
    expect(path.includes('abcde') || path.includes('edcba')).toBe(true);
    expect(round.topology).toBeUndefined();
    expect(h.state.rendezvous.topology).toBeNull();
  });

  it('syncs a world of 16 in groups of 4, each from one cluster of tabs', () => {
    const names = Array.from({ length: 15 }, (_, i) => `t${i}`);
    // Even-numbered tabs in one cluster, odd ones and z in the other: 8 and 8.
    const cluster = (n: string) => (n === 'z' ? 1 : Number(n.slice(1)) % 2);
    const h = world(names);
    reportRtts(h, names, (x, y) => (cluster(x) === cluster(y) ? 3 : 90));
    h.join('z');
    reportRtts(h, [...names, 'z'], (x, y) => (cluster(x) === cluster(y) ? 3 : 90));
    h.train(1);
    const round = [...h.worker('z').inbox].reverse().find((m) => m.type === 'round');
    if (round?.type !== 'round') throw new Error('z was not admitted');
    expect(round.topology).toEqual({ groups: [4, 4, 4, 4] });
    expect(h.state.rendezvous.topology).toEqual([4, 4, 4, 4]);
    for (let g = 0; g < 4; g++) {
      const group = round.world.slice(4 * g, 4 * g + 4).map((w) => cluster(h.nameOf(w.workerId)));
      expect(new Set(group).size).toBe(1);
    }
    // /api/status (its bounded schema) and the admin feed's rows see it: the groups, each member's group.
    const view = statusResponseSchema.parse(statusResponse(h.state, 0, DEFAULT_STATUS_PAGE));
    const groupOf = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3];
    expect(view.topology).toEqual({ groups: [4, 4, 4, 4] });
    expect(view.world.items.map((w) => w.group)).toEqual(groupOf);
    const rows = new FeedWorkers().diff(h.state).added.filter((w) => w.rank !== null);
    expect(rows.map((w) => w.group)).toEqual(groupOf);
    // Every member got the same topology; training goes on under it.
    for (const w of round.world) {
      const theirs = [...h.worker(h.nameOf(w.workerId)).inbox].reverse().find((m) => m.type === 'round');
      expect(theirs).toMatchObject({ round: round.round, topology: { groups: [4, 4, 4, 4] } });
    }
    h.train(2);
  });

  it('keeps one ring for a job that does not ask for groups (the default topology)', () => {
    const names = Array.from({ length: 16 }, (_, i) => `t${i}`);
    const h = world(names);
    reportRtts(h, names, () => 20);
    const ids = names.map((n) => h.worker(n).workerId!);
    expect(roundTopology(h.state, ids).groups).toEqual([4, 4, 4, 4]);
    const byDefault = { ...h.state, job: { ...h.state.job, topology: 'ring' } } as CoordinatorState;
    expect(roundTopology(byDefault, ids).groups).toEqual([16]);
  });

  it('keeps the plain ring for a job that verifies the ring’s hops', () => {
    const names = Array.from({ length: 16 }, (_, i) => `t${i}`);
    const h = world(names);
    reportRtts(h, names, () => 20);
    const ids = names.map((n) => h.worker(n).workerId!);
    expect(roundTopology(h.state, ids).groups).toEqual([4, 4, 4, 4]);
    const verifying = { ...h.state, job: { ...h.state.job, verify: { probability: 0.1 } } } as CoordinatorState;
    expect(roundTopology(verifying, ids).groups).toEqual([16]);
  });

  it('remembers the latest RTT of at most 64 links per tab', () => {
    const link = (i: number, rttMs?: number) => ({
      peer: `p${i}`,
      local: 'host' as const,
      remote: 'host' as const,
      rttMs,
    });
    let known = rememberRtts(undefined, [link(1, 5), link(2), link(3, 7)]);
    expect(known).toEqual({ p1: 5, p3: 7 });
    known = rememberRtts(known, [link(1, 9)]);
    expect(known).toEqual({ p3: 7, p1: 9 });
    known = rememberRtts(
      known,
      Array.from({ length: 70 }, (_, i) => link(100 + i, i)),
    );
    expect(Object.keys(known)).toHaveLength(MAX_REMEMBERED_LINKS);
    expect(known.p169).toBe(69);
    expect(known.p1).toBeUndefined();
  });
});
