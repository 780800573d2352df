/**
 * The root's side of the grouped allreduce's exchange across groups (group-allreduce.ts): for each chunk
 * of a piece this rank roots, one partial sum per group, kept until all are in, then summed once in
 * group order (group 0 first) into the chunk's final value. Pure bookkeeping, no I/O: the caller sends.
 *
 * A group may send a chunk again after a retry of its reduce: under the same excluded set the bytes are
 * the same (same inputs, same chain), so the copy is ignored; under another excluded set it replaces the
 * old one if the chunk was not released yet, and otherwise is a conflict (ranks would end with sums of
 * different members in different pieces), which fails the call everywhere.
 */

/** One chunk this rank roots. */
interface RootChunk {
  readonly length: number;
  /** Each group's partial (decoded float32), its excluded set as a key, and the rank that sent it. */
  readonly slots: (Float32Array | null)[];
  readonly tags: (string | null)[];
  readonly from: (number | null)[];
  released: boolean;
  filled: number;
}

/** A chunk ready to release: its final sum, the union of the groups' excluded sets, and who gets it. */
export interface Released {
  readonly start: number;
  readonly sum: Float32Array;
  readonly excluded: number[];
  /** The ranks (one per other group) that sent the partials: each gets the result back. */
  readonly owners: number[];
}

export type RootVerdict = 'kept' | 'duplicate' | 'conflict';

export class RootChunks {
  private readonly chunks = new Map<number, RootChunk>();

  constructor(
    private readonly groups: number,
    private readonly ownGroup: number,
  ) {}

  /**
   * Keep group `group`'s partial of the chunk at `start` (`values` is kept, not copied). Returns the
   * released chunk when this was the last partial missing, else what happened to it.
   */
  add(
    start: number,
    group: number,
    values: Float32Array,
    excluded: readonly number[],
    from: number,
  ): Released | RootVerdict {
    const chunk = this.chunkAt(start, values.length);
    const tag = excluded.join(',');
    if (chunk.released || chunk.slots[group]) {
      if (chunk.tags[group] === tag) return 'duplicate';
      if (chunk.released) return 'conflict';
    } else chunk.filled++;
    chunk.slots[group] = values;
    chunk.tags[group] = tag;
    chunk.from[group] = from;
    return chunk.filled === this.groups ? this.release(start, chunk) : 'kept';
  }

  private chunkAt(start: number, length: number): RootChunk {
    let chunk = this.chunks.get(start);
    if (!chunk) {
      chunk = {
        length,
        slots: Array(this.groups).fill(null),
        tags: Array(this.groups).fill(null),
        from: Array(this.groups).fill(null),
        released: false,
        filled: 0,
      };
      this.chunks.set(start, chunk);
    }
    return chunk;
  }

  /** The final sum in group order: ((P0 + P1) + P2) + …, one float32 rounding per addition. */
  private release(start: number, chunk: RootChunk): Released {
    chunk.released = true;
    const sum = new Float32Array(chunk.slots[0]!);
    for (let g = 1; g < this.groups; g++) {
      const part = chunk.slots[g]!;
      for (let i = 0; i < sum.length; i++) sum[i] += part[i];
    }
    const excluded = [...new Set(chunk.tags.flatMap((t) => (t ? t.split(',').map(Number) : [])))].sort((a, b) => a - b);
    const owners = chunk.from.filter((_, g) => g !== this.ownGroup) as number[];
    // The partials are not needed any more.
    chunk.slots.fill(null);
    return { start, sum, excluded, owners };
  }
}
