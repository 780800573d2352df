/**
 * The topology planner (core/training/topology.ts: ring order from measured link costs, ring or groups,
 * group sizes) and the group geometry every rank derives from a plan (core/training/group-geometry.ts:
 * places, segments, pieces, heirs of an excluded member, partners), on hand-built cost maps.
 */
import { describe, expect, it } from 'vitest';
import {
  groupPartners,
  heirPosition,
  intervalsOf,
  ownerRank,
  piecesOf,
  placeOf,
  segmentOf,
  segmentStart,
} from '../../../core/training/group-geometry';
import {
  balancedSizes,
  costMatrix,
  DEFAULT_LINK_RTT_MS,
  estimateLatencyMs,
  type LinkCost,
  planTopology,
  ringCost,
} from '../../../core/training/topology';
import { mulberry32 } from '../../support/rng';

/** Members at points of the plane: the RTT is their distance (ms). */
function planar(points: [number, number][]): LinkCost {
  return (a, b) => Math.hypot(points[a][0] - points[b][0], points[a][1] - points[b][1]);
}

/** Members in clusters: `inside` ms within a cluster, `across` between clusters. */
function clustered(cluster: number[], inside: number, across: number): LinkCost {
  return (a, b) => (cluster[a] === cluster[b] ? inside : across);
}

function groupsOf(plan: { order: number[]; groups: number[] }): number[][] {
  const out: number[][] = [];
  let at = 0;
  for (const k of plan.groups) {
    out.push(plan.order.slice(at, at + k));
    at += k;
  }
  return out;
}

function expectPermutation(order: number[], n: number): void {
  expect([...order].sort((a, b) => a - b)).toEqual(Array.from({ length: n }, (_, i) => i));
}

describe('planTopology: ring order follows the link costs', () => {
  it.each([5, 12, 40])('orders %i members on a line into a tour as short as going there and back', (n) => {
    const rand = mulberry32(n);
    const xs = Array.from({ length: n }, () => rand() * 100);
    const plan = planTopology(n, (a, b) => Math.abs(xs[a] - xs[b]), { ringOnly: true });
    expectPermutation(plan.order, n);
    expect(plan.groups).toEqual([n]);
    const span = Math.max(...xs) - Math.min(...xs);
    const c = costMatrix(n, (a, b) => Math.abs(xs[a] - xs[b]));
    // The optimal closed tour on a line costs twice its span; 2-opt reaches it.
    expect(ringCost(plan.order, c)).toBeCloseTo(2 * span, 6);
  });

  it('puts the members of each city next to each other in the ring', () => {
    // Three cities of four tabs, 1 ms inside a city, 60–120 ms between them; members interleaved.
    const city = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2];
    const between = [
      [0, 60, 120],
      [60, 0, 80],
      [120, 80, 0],
    ];
    const cost: LinkCost = (a, b) => (city[a] === city[b] ? 1 : between[city[a]][city[b]]);
    const plan = planTopology(12, cost, { ringOnly: true });
    const cities = plan.order.map((m) => city[m]);
    // Going round the ring, the city changes exactly three times (each city one contiguous arc).
    const changes = cities.filter((c, i) => c !== cities[(i + 1) % cities.length]).length;
    expect(changes).toBe(3);
  });

  it('averages what the two ends of a link measured, and fills links nobody measured with the median', () => {
    const measured: Record<string, number> = { '0-1': 10, '1-0': 30, '1-2': 40 };
    const c = costMatrix(3, (a, b) => measured[`${a}-${b}`] ?? null);
    expect(c[0][1]).toBe(20);
    expect(c[1][0]).toBe(20);
    expect(c[1][2]).toBe(40);
    expect(c[2][1]).toBe(40);
    expect(c[0][2]).toBe(30); // the median of 20 and 40
    expect(costMatrix(2, () => null)[0][1]).toBe(DEFAULT_LINK_RTT_MS);
    // Garbage (negative, NaN, infinite) counts as not measured.
    expect(costMatrix(2, () => Number.NaN)[0][1]).toBe(DEFAULT_LINK_RTT_MS);
    expect(costMatrix(2, () => -1)[0][1]).toBe(DEFAULT_LINK_RTT_MS);
  });
});

describe('planTopology: ring or groups', () => {
  const uniform: LinkCost = () => 50;

  it.each([
    [1, [1]],
    [2, [2]],
    [3, [3]],
    [4, [4]],
    [6, [6]],
    [8, [8]],
    [9, [3, 3, 3]],
    [10, [4, 3, 3]],
    [16, [4, 4, 4, 4]],
    [64, [8, 8, 8, 8, 8, 8, 8, 8]],
    [128, [12, 12, 12, 12, 12, 12, 12, 11, 11, 11, 11]],
  ])('with %i members on equal links plans groups of sizes %j', (n, sizes) => {
    const plan = planTopology(n, uniform);
    expectPermutation(plan.order, n);
    expect(plan.groups).toEqual(sizes);
  });

  it('keeps the plain ring when asked to, whatever the size', () => {
    expect(planTopology(64, uniform, { ringOnly: true }).groups).toEqual([64]);
  });

  it.each([
    [3, [3]],
    [4, [2, 2]],
    [6, [3, 3]],
    [8, [4, 4]],
  ])('with %i members and groups asked for always, plans %j where the estimate keeps the ring', (n, sizes) => {
    expect(planTopology(n, uniform).groups, 'the estimate alone').toEqual([n]);
    const plan = planTopology(n, uniform, { alwaysGroups: true });
    expectPermutation(plan.order, n);
    expect(plan.groups).toEqual(sizes);
  });

  it('plans groups whose latency estimate is far below the ring’s at 64 members', () => {
    const c = costMatrix(64, uniform);
    const grouped = planTopology(64, uniform);
    const ring = { order: grouped.order, groups: [64] };
    // 3·7 + 2 hops against 2·63.
    expect(estimateLatencyMs(grouped, c) / estimateLatencyMs(ring, c)).toBeCloseTo(23 / 126, 6);
  });

  it('groups the members of one cluster together', () => {
    // 16 tabs in two clusters of 8, interleaved; 4 groups of 4: none may mix the clusters.
    const cluster = Array.from({ length: 16 }, (_, i) => i % 2);
    const plan = planTopology(16, clustered(cluster, 2, 90));
    expect(plan.groups).toEqual([4, 4, 4, 4]);
    for (const group of groupsOf(plan)) expect(new Set(group.map((m) => cluster[m])).size).toBe(1);
  });

  it('groups by distance on a map, and each group’s ring is short', () => {
    // Nine cities on a 3×3 grid 100 ms apart, three tabs in each city (jittered within 3 ms).
    const rand = mulberry32(7);
    const points: [number, number][] = [];
    for (let cx = 0; cx < 3; cx++)
      for (let cy = 0; cy < 3; cy++)
        for (let t = 0; t < 3; t++) points.push([cx * 100 + rand() * 3, cy * 100 + rand() * 3]);
    const shuffled = points.map((p, i) => ({ p, key: mulberry32(i + 1)() })).sort((a, b) => a.key - b.key);
    const cost = planar(shuffled.map((s) => s.p));
    const plan = planTopology(27, cost);
    // ⌊√27⌋ = 5 groups: 6, 6, 5, 5, 5 members; no group can hold all of one city plus others cheaply,
    // but no group spans cities more than one grid step apart.
    expect(plan.groups).toEqual([6, 6, 5, 5, 5]);
    const c = costMatrix(27, cost);
    for (const group of groupsOf(plan)) {
      const widest = Math.max(...group.flatMap((a) => group.map((b) => c[a][b])));
      expect(widest).toBeLessThan(150);
    }
  });

  it('is deterministic: the same costs give the same plan', () => {
    const rand = mulberry32(3);
    const table = Array.from({ length: 30 }, () => Array.from({ length: 30 }, () => 5 + rand() * 100));
    const cost: LinkCost = (a, b) => table[a][b];
    expect(planTopology(30, cost)).toEqual(planTopology(30, cost));
  });

  it('refuses a world of no members', () => {
    expect(() => planTopology(0, uniform)).toThrow(RangeError);
  });

  it.each([
    [10, 3, [4, 3, 3]],
    [7, 7, [1, 1, 1, 1, 1, 1, 1]],
    [12, 4, [3, 3, 3, 3]],
  ])('balances %i members over %i groups as %j', (n, g, sizes) => {
    expect(balancedSizes(n, g)).toEqual(sizes);
  });
});

describe('group geometry', () => {
  it('places ranks in contiguous groups', () => {
    const layout = { sizes: [3, 2] };
    expect([0, 1, 2, 3, 4].map((r) => placeOf(layout, r))).toEqual([
      { group: 0, position: 0, base: 0 },
      { group: 0, position: 1, base: 0 },
      { group: 0, position: 2, base: 0 },
      { group: 1, position: 0, base: 3 },
      { group: 1, position: 1, base: 3 },
    ]);
    expect(() => placeOf(layout, 5)).toThrow(RangeError);
  });

  it('finds every element’s segment, whatever the rounding', () => {
    for (const [n, k] of [
      [10, 3],
      [7, 7],
      [5, 8],
      [1000, 13],
    ])
      for (let e = 0; e < n; e++) {
        const s = segmentOf(n, k, e);
        expect(segmentStart(n, k, s)).toBeLessThanOrEqual(e);
        expect(segmentStart(n, k, s + 1)).toBeGreaterThan(e);
      }
  });

  it('cuts the vector where any group’s segment ends', () => {
    // k = 3: 0, 4, 8, 12; k = 2: 0, 6, 12.
    expect(intervalsOf({ sizes: [3, 2] }, 12)).toEqual([
      { start: 0, end: 4, segments: [0, 0] },
      { start: 4, end: 6, segments: [1, 0] },
      { start: 6, end: 8, segments: [1, 1] },
      { start: 8, end: 12, segments: [2, 1] },
    ]);
    expect(intervalsOf({ sizes: [2, 2] }, 0)).toEqual([]);
  });

  it('gives each group the root of one piece of every interval, the pieces covering the vector once', () => {
    const layout = { sizes: [4, 3, 3] };
    const pieces = piecesOf(layout, 1001);
    let at = 0;
    for (const piece of pieces) {
      expect(piece.start).toBe(at);
      at = piece.end;
    }
    expect(at).toBe(1001);
    const rooted = [0, 0, 0];
    for (const piece of pieces) rooted[piece.rootGroup] += piece.end - piece.start;
    // Each group roots about a third of the elements.
    for (const share of rooted) expect(Math.abs(share - 1001 / 3)).toBeLessThan(12);
  });

  it('hands an excluded member’s segments to the nearest member on its left that is still in', () => {
    expect(heirPosition(4, new Set([2]), 2)).toBe(1);
    expect(heirPosition(4, new Set([1, 2]), 2)).toBe(0);
    expect(heirPosition(4, new Set([0]), 0)).toBe(3);
    expect(heirPosition(2, new Set([0, 1]), 1)).toBe(-1);
    const layout = { sizes: [3, 4] };
    expect(ownerRank(layout, 1, 2)).toBe(5);
    expect(ownerRank(layout, 1, 2, new Set([5]))).toBe(4);
    expect(ownerRank(layout, 1, 0, new Set([3]))).toBe(6);
    expect(ownerRank(layout, 0, 1, new Set([0, 1, 2]))).toBe(-1);
  });

  it('names ring neighbours and the partners across groups', () => {
    const layout = { sizes: [2, 2] };
    // n = 4: both groups cut at 2, so position p of one group pairs with position p of the other.
    expect(groupPartners(layout, 4, 0)).toEqual({ ring: [1], cross: [2] });
    expect(groupPartners(layout, 4, 3)).toEqual({ ring: [2], cross: [1] });
    expect(groupPartners({ sizes: [5] }, 100, 0)).toEqual({ ring: [1, 4], cross: [] });
    // Unequal groups: the middle member of 3 overlaps both members of the group of 2.
    expect(groupPartners({ sizes: [3, 2] }, 12, 1).cross).toEqual([3, 4]);
  });
});
