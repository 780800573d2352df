/**
 * The grouped allreduce's exchange across groups and gather inside a group (steps 3 and 4 in
 * group-allreduce.ts), for one rank once its group sealed: partials to each piece's root, the pieces this
 * rank roots (group-roots.ts), results back to the owners, results passed round the group's ring, each
 * final chunk placed once and checked against the others' excluded sets. Where another group's excluded
 * set grows (its heir's roster or partials say so), partials that went to a lost root are sent again to
 * its heir.
 */
import { CollectiveError } from './collective-error';
import { type CollectiveId, decodeFrame, type Frame, FrameError, FrameKind } from './framing';
import {
  applyValues,
  checkValues,
  controlFrame,
  type ParsedPrefix,
  quantize,
  reframe,
  valuesFrame,
} from './group-frames';
import { type Chunk, crossRoutes, type GroupGeometry } from './group-plan';
import { type Released, RootChunks } from './group-roots';
import { sameSet } from './group-support';
import type { WireCompression } from './ring-allreduce';

/** What the exchange needs of its call. */
export interface ExchangeHost {
  readonly geo: GroupGeometry;
  readonly data: Float32Array;
  readonly compression: WireCompression;
  /** The call's id (the exchange's links use it as it is). */
  readonly id: CollectiveId;
  readonly label: string;
  /** Ranks known to be out, of every group. */
  readonly excluded: Set<number>;
  /** This rank's group's excluded ranks, ascending. */
  groupExcluded(): readonly number[];
  /** The id of the group's ring in the sealed attempt, and the next member in (null: alone). */
  ringId(): CollectiveId;
  right(): number | null;
  send(rank: number, make: () => ArrayBuffer): void;
  /** Dial `rank` unless a link to it exists (both ends of a new link ask: the lower id dials). */
  reach(rank: number): void;
  fail(error: CollectiveError): void;
  /** Something was placed or sent: the call may be done. */
  progressed(): void;
}

export class Exchange {
  private readonly roots: RootChunks;
  /** Where this rank sent each chunk's partial (a root that is lost gets it again at its heir). */
  private readonly sentTo = new Map<number, number>();
  private readonly placed = new Set<number>();
  private tag: string | null = null;
  private excludedTag: number[] = [];
  private started = false;

  constructor(private readonly host: ExchangeHost) {
    this.roots = new RootChunks(host.geo.groups, host.geo.place.group);
  }

  /** Every final chunk is in place. */
  get complete(): boolean {
    return this.placed.size === this.host.geo.pieceChunks.size;
  }

  /** The excluded ranks every placed chunk was summed without. */
  get excluded(): number[] {
    return this.excludedTag;
  }

  /** The group sealed: partials to their roots, this rank's own ones into the pieces it roots, rosters (attempt `attempt`). */
  start(attempt: number, roster: boolean): void {
    const { geo, data, compression } = this.host;
    this.started = true;
    const me = geo.rank;
    const mine = this.host.groupExcluded();
    const partners = new Set<number>();
    for (const { piece, root } of crossRoutes(geo, this.host.excluded)) {
      if (root !== me) partners.add(root);
      for (const chunk of geo.chunksOf(piece)) {
        if (root !== me) this.sendPartial(chunk, root);
        else {
          const own = new Float32Array(chunk.length);
          quantize(data.subarray(chunk.start, chunk.start + chunk.length), compression, own);
          this.addPartial(chunk.start, geo.place.group, own, mine, me);
        }
      }
    }
    if (roster) {
      const header = {
        kind: FrameKind.GroupRoster,
        id: this.host.id,
        ringStep: attempt,
        chunkIndex: geo.place.group,
        chunkCount: geo.groups,
      };
      for (const rank of partners) this.host.send(rank, () => controlFrame(header, mine));
    }
    this.host.progressed();
  }

  private sendPartial(chunk: Chunk, root: number): void {
    const { data, compression } = this.host;
    this.sentTo.set(chunk.start, root);
    const header = {
      kind: FrameKind.GroupPartial,
      id: this.host.id,
      ringStep: 0,
      chunkIndex: chunk.start,
      chunkCount: data.length,
    };
    const excluded = this.host.groupExcluded();
    this.host.send(root, () =>
      valuesFrame(header, excluded, data.subarray(chunk.start, chunk.start + chunk.length), compression),
    );
  }

  /** A frame from a rank of another group. */
  onFrame(rank: number, frame: Frame, parsed: ParsedPrefix): void {
    const group = this.host.geo.groupOf(rank);
    if (frame.kind === FrameKind.GroupRoster) this.learn(group, parsed.excluded);
    else if (frame.kind === FrameKind.GroupPartial) {
      this.learn(group, parsed.excluded);
      this.onPartial(rank, group, frame, parsed);
    } else if (frame.kind === FrameKind.GroupResult) this.onResult(rank, frame, parsed);
    else throw new FrameError(`unexpected frame kind ${frame.kind} across groups`);
  }

  /** Another group's excluded set, from its roster or partials: resend what went to a root it lost. */
  private learn(group: number, ranks: readonly number[]): void {
    const { geo, excluded } = this.host;
    let changed = false;
    for (const r of ranks) {
      if (geo.groupOf(r) !== group) throw new FrameError(`rank ${r} is not in group ${group}`);
      if (!excluded.has(r)) {
        excluded.add(r);
        changed = true;
      }
    }
    if (!changed || !this.started) return;
    for (const { piece, root } of crossRoutes(geo, excluded)) {
      if (root === geo.rank) {
        // The pieces this rank roots: their partials now come from the lost ranks' heirs, which may be
        // waiting for this rank to dial them.
        const iv = geo.intervals[piece.interval];
        for (let g = 0; g < geo.groups; g++) {
          const owner = g === geo.place.group ? -1 : geo.ownerOf(g, iv, excluded);
          if (owner >= 0) this.host.reach(owner);
        }
        continue;
      }
      for (const chunk of geo.chunksOf(piece))
        if (!this.placed.has(chunk.start) && this.sentTo.get(chunk.start) !== root) this.sendPartial(chunk, root);
    }
  }

  /**
   * The excluded set a final sum carries names ranks of other groups this rank had not heard were out:
   * a member whose links stayed open when it went silent (a crashed tab) tells its partners nothing,
   * and its heir may wait for them to dial. Learn them as from a roster. (Ranks of the world, ascending:
   * `parsePrefix` checked them.)
   */
  private learnFromTag(tag: readonly number[]): void {
    const { geo, excluded } = this.host;
    const byGroup = new Map<number, number[]>();
    for (const r of tag) {
      const g = geo.groupOf(r);
      if (g === geo.place.group || excluded.has(r)) continue;
      byGroup.set(g, [...(byGroup.get(g) ?? []), r]);
    }
    for (const [g, ranks] of byGroup) this.learn(g, ranks);
  }

  private onPartial(rank: number, group: number, frame: Frame, parsed: ParsedPrefix): void {
    const { geo, data, compression, excluded } = this.host;
    const chunk = geo.pieceChunks.get(frame.chunkIndex);
    if (
      !chunk ||
      frame.chunkCount !== data.length ||
      chunk.piece.rootGroup !== geo.place.group ||
      geo.ownerOf(geo.place.group, chunk.interval, excluded) !== geo.rank ||
      geo.ownerOf(group, chunk.interval, excluded) !== rank
    )
      throw new FrameError(`partial at ${frame.chunkIndex} from ${rank} is not one this rank roots from it`);
    checkValues(frame, parsed.data, chunk.length, compression);
    const values = new Float32Array(chunk.length);
    applyValues(frame, parsed.data, values, compression, false);
    this.addPartial(chunk.start, group, values, parsed.excluded, rank);
  }

  private addPartial(
    start: number,
    group: number,
    values: Float32Array,
    excluded: readonly number[],
    from: number,
  ): void {
    const verdict = this.roots.add(start, group, values, excluded, from);
    if (verdict === 'conflict')
      this.host.fail(
        new CollectiveError(
          'protocol',
          `${this.host.label}: group ${group} sent the piece at ${start} again, without other members, after it was summed`,
        ),
      );
    else if (typeof verdict === 'object') this.release(verdict);
  }

  /** A chunk this rank roots is summed: keep what the others will decode, send it to each group's owner. */
  private release(rel: Released): void {
    const { data, compression } = this.host;
    const target = data.subarray(rel.start, rel.start + rel.sum.length);
    const header = {
      kind: FrameKind.GroupResult,
      id: this.host.id,
      ringStep: 0,
      chunkIndex: rel.start,
      chunkCount: data.length,
    };
    const frame = valuesFrame(header, rel.excluded, rel.sum, compression, target);
    for (const owner of rel.owners) this.host.send(owner, () => frame);
    this.place(rel.start, rel.excluded, decodeFrame(frame));
  }

  /** A final chunk from its root in another group, for a segment this rank owns. */
  private onResult(rank: number, frame: Frame, parsed: ParsedPrefix): void {
    const { geo, data } = this.host;
    const chunk = geo.pieceChunks.get(frame.chunkIndex);
    if (
      !chunk ||
      frame.chunkCount !== data.length ||
      chunk.piece.rootGroup !== geo.groupOf(rank) ||
      geo.ownerOf(geo.place.group, chunk.interval, this.host.excluded) !== geo.rank
    )
      throw new FrameError(`result at ${frame.chunkIndex} from ${rank} is not one this rank waits for from it`);
    this.write(frame, parsed, chunk);
  }

  /** A final chunk passed along the group's ring from the left neighbour. */
  onGather(frame: Frame, parsed: ParsedPrefix): void {
    const { geo, data } = this.host;
    const chunk = geo.pieceChunks.get(frame.chunkIndex);
    if (
      !chunk ||
      frame.chunkCount !== data.length ||
      geo.ownerOf(geo.place.group, chunk.interval, this.host.excluded) === geo.rank
    )
      throw new FrameError(`gathered chunk at ${frame.chunkIndex} is not one this rank waits for`);
    this.write(frame, parsed, chunk);
  }

  private write(frame: Frame, parsed: ParsedPrefix, chunk: Chunk): void {
    const { data, compression } = this.host;
    checkValues(frame, parsed.data, chunk.length, compression);
    // Once a chunk is placed every other must carry its tag (`place`), so only the first can teach.
    if (this.tag === null && parsed.excluded.length > 0) this.learnFromTag(parsed.excluded);
    applyValues(frame, parsed.data, data.subarray(chunk.start, chunk.start + chunk.length), compression, false);
    this.place(chunk.start, parsed.excluded, frame);
  }

  /** A final chunk is in place: check its excluded set against the others, pass it on round the group. */
  private place(start: number, excluded: number[], frame: Frame): void {
    const { geo } = this.host;
    if (this.placed.has(start)) throw new FrameError(`chunk at ${start} arrived twice`);
    const tag = excluded.join(',');
    const ownPart = excluded.filter((r) => geo.groupOf(r) === geo.place.group);
    this.tag ??= tag;
    if (this.tag !== tag || !sameSet(ownPart, this.host.groupExcluded())) {
      this.host.fail(
        new CollectiveError(
          'protocol',
          `${this.host.label}: sums without different members reached this rank ([${tag}] vs [${this.tag}])`,
        ),
      );
      return;
    }
    this.excludedTag = excluded;
    this.placed.add(start);
    const chunk = geo.pieceChunks.get(start)!;
    const owner = geo.ownerOf(geo.place.group, chunk.interval, this.host.excluded);
    const right = this.host.right();
    if (right !== null && right !== owner) {
      const id = this.host.ringId();
      this.host.send(right, () => reframe(frame, { id, ringStep: 0 }));
    }
    this.host.progressed();
  }
}
