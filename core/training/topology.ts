/**
 * The topology planner: in which order a round's members stand in the ring, and whether they sync as
 * one ring or in groups (web/net/group-allreduce.ts), from the link costs the tabs measured. A pure
 * function of plain data, run by the coordinator when it opens a round (coordinator/machine/rendezvous.ts)
 * and tested as tables (test/unit/core/topology.test.ts).
 *
 * - **Ring order** follows the costs, as PCCL orders its ring by a travelling-salesman tour over measured
 *   link costs: nearest neighbour from the first member, then 2-opt until no exchange shortens the tour.
 * - **Groups** are contiguous blocks of that tour (a good tour visits near members one after another), cut
 *   at the rotation that makes the groups' own rings cheapest; G = ⌊√N⌋ groups of sizes that differ by
 *   at most one, so a rank talks to its two ring neighbours and about G − 1 partners across groups.
 * - **Ring or groups** is decided by an estimate of the collective's latency term (its bytes are the same
 *   either way): the ring takes 2(N − 1) hops on its slowest link; the grouped allreduce 3(k − 1) hops in
 *   a group of k (reduce, seal, gather) and 2 across groups (to the piece's root and back). The plain ring
 *   stays where the groups would not save at least `GROUPED_MAX_RATIO` of it: small worlds (unless the
 *   job asks for groups always, `alwaysGroups`).
 *
 * Costs are round-trip times in ms; a pair nobody measured costs the median of the measured ones (or
 * `DEFAULT_LINK_RTT_MS` when nothing is measured), so unknown links neither attract nor repel.
 */
import { type GroupLayout, groupBases, intervalsOf } from './group-geometry';

/** A planned topology: ranks are given to members in `order`; `groups` are sizes of contiguous blocks of it. */
export interface Topology {
  /** Member indices (into the planner's input) in ring order: member `order[r]` gets rank r. */
  readonly order: number[];
  /** Group sizes over the ranks, in rank order; `[N]`: one plain ring. */
  readonly groups: number[];
}

/** The measured round-trip time (ms) between members a and b, or null when neither measured it. */
export type LinkCost = (a: number, b: number) => number | null;

/** The cost of a link when no link at all was measured: a typical internet RTT. */
export const DEFAULT_LINK_RTT_MS = 50;
/** Per hop, besides half the RTT: handling a frame in JavaScript and the data channel's own latency. */
export const HOP_OVERHEAD_MS = 2;
/** Groups only when their estimated latency is at most this fraction of the ring's. */
export const GROUPED_MAX_RATIO = 0.75;
/** Vector length the partner estimate is computed for (partners barely depend on it). */
const NOMINAL_ELEMENTS = 1 << 20;
/** 2-opt runs while the tour has at most this many members (its passes cost N² each). */
const TWO_OPT_LIMIT = 512;
/** At most this many 2-opt passes. */
const TWO_OPT_PASSES = 16;

export interface PlanOptions {
  /** Keep one plain ring whatever the costs (e.g. jobs that verify the ring's hops). */
  readonly ringOnly?: boolean;
  /** Groups whenever there are 4 members or more, whatever the latency estimate (job `topology: groups`). */
  readonly alwaysGroups?: boolean;
}

/** Plan the topology of `count` members; members are numbered 0..count−1 and `cost` is symmetric or not. */
export function planTopology(count: number, cost: LinkCost, opts: PlanOptions = {}): Topology {
  if (!Number.isInteger(count) || count < 1) throw new RangeError(`planTopology: ${count} members`);
  const c = costMatrix(count, cost);
  const tour = improveTour(nearestNeighbourTour(c), c, true);
  const ring = { order: rotateToFirst(tour), groups: [count] };
  if (opts.ringOnly || count < 4) return ring;
  const grouped = groupedPlan(tour, c);
  if (opts.alwaysGroups) return grouped;
  return estimateLatencyMs(grouped, c) <= GROUPED_MAX_RATIO * estimateLatencyMs(ring, c) ? grouped : ring;
}

/** Symmetric costs with the unknown ones filled in (see the module comment). */
export function costMatrix(count: number, cost: LinkCost): number[][] {
  const known: number[] = [];
  const raw: (number | null)[][] = [];
  for (let a = 0; a < count; a++) {
    raw.push([]);
    for (let b = 0; b < count; b++) {
      const ab = a === b ? 0 : usable(cost(a, b));
      const ba = a === b ? 0 : usable(cost(b, a));
      const value = ab === null ? ba : ba === null ? ab : (ab + ba) / 2;
      raw[a].push(value);
      if (a < b && value !== null) known.push(value);
    }
  }
  const fill = known.length === 0 ? DEFAULT_LINK_RTT_MS : median(known);
  return raw.map((row) => row.map((v) => v ?? fill));
}

function usable(v: number | null): number | null {
  return v === null || !Number.isFinite(v) || v < 0 ? null : v;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** A tour from member 0, always going to the cheapest member not visited yet (ties: the lowest index). */
function nearestNeighbourTour(c: number[][]): number[] {
  const n = c.length;
  const visited = new Uint8Array(n);
  const tour = [0];
  visited[0] = 1;
  for (let i = 1; i < n; i++) {
    const from = tour[tour.length - 1];
    let best = -1;
    for (let b = 0; b < n; b++) if (!visited[b] && (best < 0 || c[from][b] < c[from][best])) best = b;
    visited[best] = 1;
    tour.push(best);
  }
  return tour;
}

/** 2-opt on `tour` (closed: the last member links back to the first; open: a path), returned improved. */
function improveTour(tour: number[], c: number[][], closed: boolean): number[] {
  const t = [...tour];
  const n = t.length;
  if (n < 4 || n > TWO_OPT_LIMIT) return t;
  const last = closed ? n : n - 1;
  for (let pass = 0; pass < TWO_OPT_PASSES; pass++) {
    let improved = false;
    for (let i = 0; i < n - 2; i++) {
      for (let j = i + 2; j < last; j++) {
        if (closed && i === 0 && j === n - 1) continue;
        const a = t[i];
        const b = t[i + 1];
        const d = t[(j + 1) % n];
        const e = t[j];
        const joined = j + 1 < n || closed;
        const before = c[a][b] + (joined ? c[e][d] : 0);
        const after = c[a][e] + (joined ? c[b][d] : 0);
        if (after < before - 1e-9) {
          reverse(t, i + 1, j);
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
  return t;
}

function reverse(t: number[], from: number, to: number): void {
  for (let i = from, j = to; i < j; i++, j--) [t[i], t[j]] = [t[j], t[i]];
}

/** The same cyclic order, starting at member 0 (so equal inputs give equal orders). */
function rotateToFirst(tour: number[]): number[] {
  const at = tour.indexOf(0);
  return [...tour.slice(at), ...tour.slice(0, at)];
}

/** Sizes of `groups` groups over `count` members that differ by at most one (larger ones first). */
export function balancedSizes(count: number, groups: number): number[] {
  const k = Math.floor(count / groups);
  const extra = count % groups;
  return Array.from({ length: groups }, (_, g) => k + (g < extra ? 1 : 0));
}

/** The tour cut into ⌊√N⌋ blocks at its cheapest rotation, each block's ring improved on its own. */
function groupedPlan(tour: number[], c: number[][]): Topology {
  const n = tour.length;
  const sizes = balancedSizes(n, Math.floor(Math.sqrt(n)));
  let best: number[][] = [];
  let bestCost = Number.POSITIVE_INFINITY;
  // Every rotation for small worlds; about 256 evenly spread ones for large.
  const stride = Math.max(1, Math.floor(n / 256));
  for (let shift = 0; shift < n; shift += stride) {
    const blocks = cutBlocks(tour, sizes, shift);
    const total = blocks.reduce((sum, block) => sum + ringCost(block, c), 0);
    if (total < bestCost - 1e-9) {
      bestCost = total;
      best = blocks;
    }
  }
  const order = best.flatMap((block) => rotateToSmallest(improveTour(block, c, true)));
  return { order, groups: sizes };
}

function cutBlocks(tour: number[], sizes: number[], shift: number): number[][] {
  const blocks: number[][] = [];
  let at = shift;
  for (const k of sizes) {
    blocks.push(Array.from({ length: k }, (_, i) => tour[(at + i) % tour.length]));
    at += k;
  }
  return blocks;
}

function rotateToSmallest(block: number[]): number[] {
  const at = block.indexOf(Math.min(...block));
  return [...block.slice(at), ...block.slice(0, at)];
}

/** Sum of a closed ring's link costs. */
export function ringCost(ring: readonly number[], c: number[][]): number {
  if (ring.length < 2) return 0;
  let total = 0;
  for (let i = 0; i < ring.length; i++) total += c[ring[i]][ring[(i + 1) % ring.length]];
  return ring.length === 2 ? total / 2 : total;
}

/**
 * The latency term of one allreduce under `topology` (ms): hops times (half the slowest RTT involved +
 * the per-hop overhead). See the module comment for the hop counts.
 */
export function estimateLatencyMs(topology: Topology, c: number[][]): number {
  const { order, groups } = topology;
  const hop = (rtt: number) => rtt / 2 + HOP_OVERHEAD_MS;
  if (groups.length === 1) return 2 * (order.length - 1) * hop(maxRingLink(order, c));
  const layout: GroupLayout = { sizes: groups };
  let intra = 0;
  let cross = 0;
  let base = 0;
  for (const k of groups) {
    intra = Math.max(intra, maxRingLink(order.slice(base, base + k), c));
    base += k;
  }
  // Partners across groups: each interval's owners, pairwise.
  const bases = groupBases(layout);
  for (const iv of intervalsOf(layout, NOMINAL_ELEMENTS)) {
    const owners = iv.segments.map((segment, g) => order[bases[g] + segment]);
    for (let g = 0; g < owners.length; g++)
      for (let h = g + 1; h < owners.length; h++) cross = Math.max(cross, c[owners[g]][owners[h]]);
  }
  return 3 * (Math.max(...groups) - 1) * hop(intra) + 2 * hop(cross);
}

function maxRingLink(ring: readonly number[], c: number[][]): number {
  let worst = 0;
  for (let i = 0; i < ring.length; i++) worst = Math.max(worst, c[ring[i]][ring[(i + 1) % ring.length]]);
  return worst;
}
