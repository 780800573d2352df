/**
 * The geometry of the grouped allreduce (web/net/group-allreduce.ts), as pure arithmetic every rank
 * and the coordinator evaluate alike: which elements of the vector each member of a group reduces
 * (its segments), how the groups' segmentations cut the vector into intervals, which member of which
 * group is the root of each piece of an interval in the exchange across groups, and so who talks to
 * whom (`groupPartners`, also shown on the admin page).
 *
 * A topology's groups are contiguous blocks of the world's ranks (`GroupLayout.sizes`); inside a group,
 * rank order is ring order, and the member at position p owns segment p of that group's segmentation
 * (`floor(s·n/k)` boundaries, as the plain ring's `ringSegmentStart`). A member excluded from the
 * collective (it died inside its group's reduce, see the allreduce) hands the segments it owned to its
 * heir: the nearest member to its left in ring order that is still in.
 */

/** The groups of one topology: sizes of contiguous blocks of ranks, in rank order. One entry: a plain ring. */
export interface GroupLayout {
  readonly sizes: readonly number[];
}

/** Where a rank sits: its group, its position in that group's ring, and the group's first rank. */
export interface GroupPlace {
  readonly group: number;
  readonly position: number;
  readonly base: number;
}

/** Check a layout: positive integer sizes, at least one group. Throws a RangeError otherwise. */
export function checkLayout(layout: GroupLayout): void {
  if (layout.sizes.length < 1) throw new RangeError('a group layout needs at least one group');
  for (const k of layout.sizes)
    if (!Number.isInteger(k) || k < 1) throw new RangeError(`group sizes must be positive integers, got ${k}`);
}

/** The first rank of every group, and the world size last. */
export function groupBases(layout: GroupLayout): number[] {
  const bases = [0];
  for (const k of layout.sizes) bases.push(bases[bases.length - 1] + k);
  return bases;
}

/** The place of `rank` in `layout` (RangeError when it is outside the world). */
export function placeOf(layout: GroupLayout, rank: number): GroupPlace {
  let base = 0;
  for (let group = 0; group < layout.sizes.length; group++) {
    const k = layout.sizes[group];
    if (rank >= base && rank < base + k) return { group, position: rank - base, base };
    base += k;
  }
  throw new RangeError(`rank ${rank} is outside a world of ${base}`);
}

/** First element of segment `s` of a group of `k` members over `n` elements. */
export function segmentStart(n: number, k: number, s: number): number {
  return Math.floor((s * n) / k);
}

/** The segment of a group of `k` members that holds element `e` of `n`. */
export function segmentOf(n: number, k: number, e: number): number {
  // floor(s·n/k) ≤ e < floor((s+1)·n/k); start from the estimate and correct rounding either way.
  let s = Math.min(k - 1, Math.floor((e * k) / n));
  while (s > 0 && segmentStart(n, k, s) > e) s--;
  while (s < k - 1 && segmentStart(n, k, s + 1) <= e) s++;
  return s;
}

/**
 * The position that plays position `p` of a ring of `k` whose `out` positions are excluded: `p` itself
 * when it is in, else the nearest position to its left that is in. −1 when every position is out.
 */
export function heirPosition(k: number, out: ReadonlySet<number>, p: number): number {
  for (let d = 0; d < k; d++) {
    const q = (((p - d) % k) + k) % k;
    if (!out.has(q)) return q;
  }
  return -1;
}

/** An interval of the vector where every group's segmentation is constant: one segment per group. */
export interface Interval {
  readonly start: number;
  readonly end: number;
  /** The segment holding the interval, by group. */
  readonly segments: readonly number[];
}

/**
 * The common refinement of every group's segmentation of `n` elements: the intervals, in order,
 * that no group's segment boundary cuts. Empty for n = 0.
 */
export function intervalsOf(layout: GroupLayout, n: number): Interval[] {
  checkLayout(layout);
  const cuts = new Set<number>([0, n]);
  for (const k of layout.sizes) for (let s = 1; s < k; s++) cuts.add(segmentStart(n, k, s));
  const sorted = [...cuts].sort((a, b) => a - b);
  const out: Interval[] = [];
  for (let i = 0; i + 1 < sorted.length; i++) {
    const start = sorted[i];
    const end = sorted[i + 1];
    if (end <= start) continue;
    out.push({ start, end, segments: layout.sizes.map((k) => segmentOf(n, k, start)) });
  }
  return out;
}

/** A piece of an interval and the group whose owner of it is the piece's root in the cross-group exchange. */
export interface Piece {
  readonly start: number;
  readonly end: number;
  readonly rootGroup: number;
  /** The interval it belongs to (index into `intervalsOf`). */
  readonly interval: number;
}

/**
 * Every interval cut into one piece per group (`floor(j·len/G)` boundaries, empty pieces left out):
 * piece j's root is group j's owner of the interval, so each owner roots about 1/G of its segments and
 * the exchange's bytes are spread like a ring's.
 */
export function piecesOf(layout: GroupLayout, n: number): Piece[] {
  const groups = layout.sizes.length;
  const pieces: Piece[] = [];
  intervalsOf(layout, n).forEach((iv, interval) => {
    const len = iv.end - iv.start;
    for (let j = 0; j < groups; j++) {
      const start = iv.start + Math.floor((j * len) / groups);
      const end = iv.start + Math.floor(((j + 1) * len) / groups);
      if (end > start) pieces.push({ start, end, rootGroup: j, interval });
    }
  });
  return pieces;
}

/**
 * The rank of group `group` that holds segment `segment` when the ranks in `excluded` are out (their
 * segments go to their heirs); −1 when the whole group is out.
 */
export function ownerRank(
  layout: GroupLayout,
  group: number,
  segment: number,
  excluded: ReadonlySet<number> = new Set(),
): number {
  const bases = groupBases(layout);
  const k = layout.sizes[group];
  const out = new Set<number>();
  for (let p = 0; p < k; p++) if (excluded.has(bases[group] + p)) out.add(p);
  const heir = heirPosition(k, out, segment);
  return heir < 0 ? -1 : bases[group] + heir;
}

/**
 * Who `rank` exchanges data with in one grouped allreduce without exclusions: its ring neighbours in its
 * group and, across groups, the owners of the intervals it owns (its partners: roots of the pieces it
 * sends, and owners it sends the pieces it roots to). Sorted, without `rank` itself. In a layout of one
 * group that is the ring's two neighbours.
 */
export function groupPartners(layout: GroupLayout, n: number, rank: number): { ring: number[]; cross: number[] } {
  const place = placeOf(layout, rank);
  const k = layout.sizes[place.group];
  const ring = [...new Set([(place.position + k - 1) % k, (place.position + 1) % k])]
    .filter((p) => p !== place.position)
    .map((p) => place.base + p)
    .sort((a, b) => a - b);
  const cross = new Set<number>();
  for (const iv of intervalsOf(layout, n)) {
    if (iv.segments[place.group] !== place.position) continue;
    for (let g = 0; g < layout.sizes.length; g++)
      if (g !== place.group) cross.add(ownerRank(layout, g, iv.segments[g]));
  }
  return { ring, cross: [...cross].sort((a, b) => a - b) };
}
