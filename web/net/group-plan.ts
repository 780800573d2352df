/**
 * One rank's plan of a grouped allreduce (group-allreduce.ts): pure arithmetic over the layout
 * (core/training/group-geometry.ts), the vector's length, the chunking and who is excluded, the same on
 * every rank.
 *
 * - `ReducePlan` (one attempt of the rank's group): a segment's chain is the group's members still in,
 *   in ring order from the one after the segment's position round to its owner (the heir of that
 *   position): the first sends its own values, each next one adds its own to what it received and passes
 *   the sum on, the owner keeps it. All sends go to the next member still in (`right`), all receives come
 *   from the previous one (`left`).
 * - `CrossPlan` (the exchange across groups, under every group's excluded set as this rank knows it):
 *   which pieces this rank sends to which root, which it roots and from whom it expects them, and where
 *   each chunk of a piece starts. A piece's final sum travels from its root to each group's owner of it,
 *   and from each owner along its group's ring (the gather).
 */
import {
  type GroupLayout,
  type GroupPlace,
  groupBases,
  heirPosition,
  intervalsOf,
  type Interval,
  ownerRank,
  type Piece,
  piecesOf,
  placeOf,
  segmentStart,
} from '../../core/training/group-geometry';

/** A chunk: its first element and its length. */
export interface Chunk {
  readonly start: number;
  readonly length: number;
}

/** Chunks of `chunkElements` covering [start, end) from its start. */
export function chunksOf(start: number, end: number, chunkElements: number): Chunk[] {
  const out: Chunk[] = [];
  for (let at = start; at < end; at += chunkElements)
    out.push({ start: at, length: Math.min(chunkElements, end - at) });
  return out;
}

/** What this rank does with one chunk of a segment in its group's reduce. */
export interface ReduceRole {
  readonly segment: number;
  readonly length: number;
  /** Its place in the segment's chain (0: the first, who only sends). */
  readonly hop: number;
  /** It passes the sum on (false: it owns the segment and keeps it). */
  readonly forward: boolean;
}

export class ReducePlan {
  /** World ranks of the previous and next member still in (null when this rank is alone). */
  readonly left: number | null;
  readonly right: number | null;
  /** Segments (positions) this rank owns: its own and those of the excluded members it is heir to. */
  readonly owned: number[];
  /** Chunks this rank sends first (its own values). */
  readonly starts: Chunk[] = [];
  /** Chunks it receives from `left`, by first element. */
  readonly receives = new Map<number, ReduceRole>();
  /** Members still in, world ranks, in ring order. */
  readonly members: number[];

  constructor(
    readonly place: GroupPlace,
    readonly k: number,
    readonly n: number,
    readonly out: ReadonlySet<number>,
    chunkElements: number,
  ) {
    const alive = Array.from({ length: k }, (_, p) => p).filter((p) => !out.has(p));
    const me = alive.indexOf(place.position);
    if (me < 0) throw new RangeError(`rank ${place.base + place.position} is excluded from its own group's plan`);
    this.members = alive.map((p) => place.base + p);
    const m = alive.length;
    this.left = m > 1 ? place.base + alive[(me + m - 1) % m] : null;
    this.right = m > 1 ? place.base + alive[(me + 1) % m] : null;
    this.owned = [];
    for (let s = 0; s < k; s++) {
      // The chain starts at the first member in after position s (wrapping to the first one of all).
      const first = Math.max(
        0,
        alive.findIndex((p) => p > s),
      );
      const hop = (me - first + m) % m;
      const ownsIt = hop === m - 1;
      if (ownsIt) this.owned.push(s);
      const chunks = chunksOf(segmentStart(n, k, s), segmentStart(n, k, s + 1), chunkElements);
      if (m === 1) continue;
      for (const chunk of chunks) {
        if (hop === 0) this.starts.push(chunk);
        else this.receives.set(chunk.start, { segment: s, length: chunk.length, hop: hop - 1, forward: !ownsIt });
      }
    }
  }

  /** The world rank owning segment `s` of this group under this plan. */
  ownerOf(s: number): number {
    return this.place.base + heirPosition(this.k, this.out, s);
  }

  /** Chunks of owned segments that must arrive before this rank's reduce is complete. */
  get ownedChunks(): number {
    let count = 0;
    for (const role of this.receives.values()) if (!role.forward) count++;
    return count;
  }
}

/** A chunk of a piece, with the piece and the interval it belongs to. */
export interface PieceChunk extends Chunk {
  readonly piece: Piece;
  readonly interval: Interval;
}

/** The geometry this rank's whole call shares: its place, the intervals, pieces and their chunks. */
export class GroupGeometry {
  readonly place: GroupPlace;
  readonly bases: number[];
  readonly groups: number;
  readonly world: number;
  readonly intervals: Interval[];
  readonly pieces: Piece[];
  /** Every piece's chunks by first element (results are placed and forwarded chunk by chunk). */
  readonly pieceChunks = new Map<number, PieceChunk>();
  private readonly byPiece = new Map<Piece, PieceChunk[]>();

  constructor(
    readonly layout: GroupLayout,
    readonly n: number,
    readonly rank: number,
    readonly chunkElements: number,
  ) {
    this.place = placeOf(layout, rank);
    this.bases = groupBases(layout);
    this.groups = layout.sizes.length;
    this.world = this.bases[this.groups];
    this.intervals = intervalsOf(layout, n);
    this.pieces = piecesOf(layout, n);
    for (const piece of this.pieces) {
      const chunks = chunksOf(piece.start, piece.end, chunkElements).map((chunk) => ({
        ...chunk,
        piece,
        interval: this.intervals[piece.interval],
      }));
      this.byPiece.set(piece, chunks);
      for (const chunk of chunks) this.pieceChunks.set(chunk.start, chunk);
    }
  }

  /** The chunks of one piece, in order. */
  chunksOf(piece: Piece): PieceChunk[] {
    return this.byPiece.get(piece) ?? [];
  }

  /** The group of a world rank. */
  groupOf(rank: number): number {
    return placeOf(this.layout, rank).group;
  }

  /** The positions of group `g` whose ranks are in `excluded`. */
  outPositions(g: number, excluded: ReadonlySet<number>): Set<number> {
    const out = new Set<number>();
    for (let p = 0; p < this.layout.sizes[g]; p++) if (excluded.has(this.bases[g] + p)) out.add(p);
    return out;
  }

  /** The rank of group `g` owning interval `iv` when `excluded` are out (−1: the whole group is out). */
  ownerOf(g: number, iv: Interval, excluded: ReadonlySet<number>): number {
    return ownerRank(this.layout, g, iv.segments[g], excluded);
  }
}

/** Where one piece goes in the exchange across groups, for this rank. */
export interface CrossRoute {
  readonly piece: Piece;
  /** The root's rank (this rank when it roots the piece). */
  readonly root: number;
}

/**
 * The pieces of the intervals this rank owns in its group, and each one's root, under `excluded` (every
 * group's excluded ranks as this rank knows them); the partners are the other ranks it exchanges with.
 */
export function crossRoutes(geo: GroupGeometry, excluded: ReadonlySet<number>): CrossRoute[] {
  const g = geo.place.group;
  const routes: CrossRoute[] = [];
  for (const piece of geo.pieces) {
    const iv = geo.intervals[piece.interval];
    if (geo.ownerOf(g, iv, excluded) !== geo.rank) continue;
    routes.push({ piece, root: geo.ownerOf(piece.rootGroup, iv, excluded) });
  }
  return routes;
}
