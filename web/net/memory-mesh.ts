/**
 * A mesh of in-memory links among `size` ranks, for tests and simulations of the grouped allreduce
 * (group-allreduce.ts): pairs are made on demand (as a tab's `PeerMesh` dials), a rank sees the links
 * others open to it (`onLink`), and a rank can be killed (all its links close under it, and nobody can
 * dial it any more), as a crashed tab.
 */
import type { GroupLayout } from '../../core/training/group-geometry';
import { groupPartners } from '../../core/training/group-geometry';
import type { GroupLinks } from './group-allreduce';
import { ListenerSet, type Link } from './link';
import { type MemoryLink, type MemoryLinkEndOptions, memoryLinkPair, type MemoryLinkOptions } from './memory-link';

export interface MemoryMeshOptions extends MemoryLinkOptions {
  /** Options of the pair between `a` and `b` (a < b): `a` for a's sending end, `b` for b's. */
  readonly pairOptions?: (a: number, b: number) => { a?: MemoryLinkEndOptions; b?: MemoryLinkEndOptions };
  /**
   * Only the lower rank of a pair dials, as `PeerMesh` (web/net/peer-mesh.ts: the lower id dials, the other
   * waits for the call): a higher rank's `connect` to a lower one without a link waits until the lower
   * rank connects. Default false: either end makes the pair at once.
   */
  readonly lowerDials?: boolean;
}

export class MemoryMesh {
  private readonly pairs = new Map<string, [MemoryLink, MemoryLink]>();
  private readonly arrivals: ListenerSet<[number, Link]>[];
  private readonly dead = new Set<number>();

  constructor(
    readonly size: number,
    private readonly opts: MemoryMeshOptions = {},
  ) {
    this.arrivals = Array.from({ length: size }, () => new ListenerSet<[number, Link]>());
  }

  static rankName(rank: number): string {
    return `rank${rank}`;
  }

  /** The pair between `a` and `b`, made if needed: `[a's end, b's end]`. */
  pair(a: number, b: number): [MemoryLink, MemoryLink] {
    const [lo, hi] = a < b ? [a, b] : [b, a];
    const key = `${lo}-${hi}`;
    let pair = this.pairs.get(key);
    if (!pair?.[0].isOpen) {
      const { pairOptions, ...shared } = this.opts;
      pair = memoryLinkPair(MemoryMesh.rankName(lo), MemoryMesh.rankName(hi), { ...shared, ...pairOptions?.(lo, hi) });
      this.pairs.set(key, pair);
    }
    return a < b ? pair : [pair[1], pair[0]];
  }

  /** Every pair made so far (to check listeners and bytes). */
  get allPairs(): [MemoryLink, MemoryLink][] {
    return [...this.pairs.values()];
  }

  /** Make the links a grouped allreduce starts with: ring neighbours and partners across groups. */
  connectPlanned(layout: GroupLayout, n: number): void {
    for (let r = 0; r < this.size; r++) {
      const { ring, cross } = groupPartners(layout, n, r);
      for (const q of [...ring, ...cross]) this.pair(r, q);
    }
  }

  /** Rank `rank`'s view, for `groupAllreduce`. */
  groupLinks(rank: number, layout: GroupLayout): GroupLinks {
    return {
      rank,
      layout,
      link: (q) => {
        const [lo, hi] = rank < q ? [rank, q] : [q, rank];
        const pair = this.pairs.get(`${lo}-${hi}`);
        const end = pair ? pair[rank < q ? 0 : 1] : null;
        return end?.isOpen ? end : null;
      },
      connect: async (q) => {
        if (this.dead.has(q) || this.dead.has(rank)) throw new Error(`rank ${q} is gone`);
        if (this.opts.lowerDials && rank > q && !this.pairs.get(`${q}-${rank}`)?.[1].isOpen)
          return new Promise<Link>((resolve) => {
            const stop = this.arrivals[rank].add((from, link) => {
              if (from !== q) return;
              stop();
              resolve(link);
            });
          });
        const existing = this.pairs.get(rank < q ? `${rank}-${q}` : `${q}-${rank}`);
        const fresh = !existing?.[0].isOpen;
        const [mine, theirs] = this.pair(rank, q);
        if (fresh) this.arrivals[q].emit(rank, theirs);
        return mine;
      },
      onLink: (listener) => this.arrivals[rank].add(listener),
    };
  }

  /** A crash: every link of `rank` closes under it and nobody reaches it again. */
  kill(rank: number): void {
    this.dead.add(rank);
    for (const [key, [a]] of this.pairs) {
      const [lo, hi] = key.split('-').map(Number);
      if (lo === rank || hi === rank) a.closeAsFault(`rank ${rank} crashed`);
    }
  }
}
