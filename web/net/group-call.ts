/**
 * One call of the grouped allreduce (the algorithm and its guarantees are in group-allreduce.ts): its
 * group's reduce attempts and retries, the seal, and settling the call exactly once with every listener,
 * timer and sender it added removed. Its links and routes are group-routes.ts, the exchange across groups
 * and the gather group-exchange.ts (roots in group-roots.ts), the frames group-frames.ts, the plan
 * group-plan.ts.
 */
import { groupPartners, heirPosition, placeOf } from '../../core/training/group-geometry';
import { CollectiveError } from './collective-error';
import { trySend, watchDeadline } from './collective-session';
import { type CollectiveId, collectiveKey, type Frame, FrameError, FrameKind } from './framing';
import { Exchange } from './group-exchange';
import { GroupRoutes } from './group-routes';
import {
  applyValues,
  ChecksumError,
  checkValues,
  controlFrame,
  type ParsedPrefix,
  parsePrefix,
  valuesFrame,
} from './group-frames';
import { type Chunk, GroupGeometry, ReducePlan } from './group-plan';
import {
  abortError,
  attemptId,
  checkedOptions,
  DEFAULT_GROUP_ATTEMPTS,
  type GroupAllreduceOptions,
  type GroupAllreduceResult,
  type GroupLinks,
  protocolError,
  sameSet,
  sorted,
  tagged,
} from './group-support';
import type { Link } from './link';
import { firstUnsendable, unsendableError, type WireCompression } from './ring-allreduce';

export class GroupCall {
  readonly geo: GroupGeometry;
  readonly compression: WireCompression;
  readonly label: string;
  /** Ranks known to be out, of every group (this group's change only by retries). */
  readonly excluded = new Set<number>();
  /** `groupExcluded()`, as of `excluded` holding `mineOf` ranks. */
  private mine: readonly number[] = [];
  private mineOf = 0;
  private readonly maxAttempts: number;
  private readonly mayExclude: boolean;
  private readonly input: Float32Array;
  private readonly done: Promise<GroupAllreduceResult>;
  private resolve!: (r: GroupAllreduceResult) => void;
  private reject!: (e: CollectiveError) => void;
  private settled = false;
  private readonly cleanups: Array<() => void> = [];
  private readonly routes: GroupRoutes;
  private attempt = 0;
  private plan!: ReducePlan;
  private arrived = new Set<number>();
  private ownedLeft = 0;
  private seals = new Set<number>();
  private sealSent = false;
  private heardLeft = false;
  private silenceTimer: ReturnType<typeof setTimeout> | null = null;
  /** When the last progress of this rank's reduce was seen (the silence `silenceTimer` watches began). */
  private quietSince = 0;
  private sealed = false;
  private gatherSeen = false;
  /** Ranks of other groups this rank saw lost (closed links, the coordinator's report). */
  private readonly lostElsewhere = new Set<number>();
  private readonly exchange: Exchange;

  constructor(
    private readonly links: GroupLinks,
    readonly data: Float32Array,
    private readonly opts: GroupAllreduceOptions,
  ) {
    const { compression, chunkElements } = checkedOptions(opts);
    this.compression = compression;
    this.geo = new GroupGeometry(links.layout, data.length, links.rank, chunkElements);
    this.maxAttempts = opts.maxAttempts ?? DEFAULT_GROUP_ATTEMPTS;
    this.mayExclude = opts.mayExclude ?? false;
    this.label = `group allreduce ${collectiveKey(opts.id)}`;
    this.input = data.slice();
    this.exchange = new Exchange(this);
    this.routes = new GroupRoutes(links, this, opts.highWaterBytes);
    this.done = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  run(): Promise<GroupAllreduceResult> {
    const bad = firstUnsendable(this.data, this.compression);
    if (this.geo.world === 1 || this.data.length === 0) {
      if (bad >= 0) return Promise.reject(unsendableError(this.label, this.data, bad, this.compression));
      return Promise.resolve({ excluded: [] });
    }
    this.cleanups.push(watchDeadline(this.opts, this.label, (error) => this.failGlobal(error)));
    // Routing a link replays the frames its peer sent early: attempt 0's state must exist first (its
    // sends wait in their queues for the links). A rank refusing its input sends nothing but aborts.
    if (bad < 0) this.prepareAttempt(0);
    else this.plan = this.planFor(new Set());
    const { ring, cross } = groupPartners(this.links.layout, this.data.length, this.geo.rank);
    for (const rank of [...ring, ...cross]) {
      const link = this.links.link(rank);
      if (link) this.routes.register(rank, link);
    }
    this.cleanups.push(
      this.links.onLink((rank, link) => {
        if (rank !== this.geo.rank && rank >= 0 && rank < this.geo.world) this.routes.register(rank, link);
      }),
    );
    if (bad >= 0) this.failGlobal(unsendableError(this.label, this.data, bad, this.compression));
    else this.beginAttempt(0);
    // Ranks the coordinator reports lost, now and during the call (a settled call has cleaned up already).
    const lost = this.mayExclude && !this.settled ? this.opts.lost : undefined;
    if (lost) this.cleanups.push(lost.onLost((ranks) => this.onLost(ranks)));
    if (lost) this.onLost(lost.ranks);
    return this.done;
  }

  private isMate(rank: number): boolean {
    return this.geo.groupOf(rank) === this.geo.place.group;
  }

  routeId(rank: number): CollectiveId {
    return this.isMate(rank) ? attemptId(this.opts.id, this.attempt) : this.opts.id;
  }

  onDrained(): void {
    this.checkDone();
  }

  onFailure(rank: number, link: Link, error: CollectiveError): void {
    if (this.settled) return;
    this.routes.lost(rank, link);
    if (error.kind !== 'peer_closed') this.failGlobal(error);
    else this.peerGone(rank, error, `its link to ${link.peer} closed`);
  }

  onUnreachable(rank: number): void {
    if (!this.lostElsewhere.has(rank)) this.onLost([rank], 'a dial to it failed');
  }

  /** Ranks out as if their links had closed: the coordinator lost them (a crashed tab's close after ~30 s), or a dial failed. */
  private onLost(ranks: readonly number[], why = 'the coordinator lost it'): void {
    for (const rank of ranks) {
      if (this.settled) return;
      if (rank === this.geo.rank || rank < 0 || rank >= this.geo.world || this.excluded.has(rank)) continue;
      const peer = this.routes.peerName(rank);
      this.routes.forget(rank);
      this.peerGone(
        rank,
        new CollectiveError('peer_closed', `${this.label}: rank ${rank} is out: ${why}`, { peer }),
        why,
      );
    }
  }

  /** `rank`'s link closed (or the coordinator lost it): its group retries without it, or the call fails. */
  private peerGone(rank: number, error: CollectiveError, why: string): void {
    if (this.isMate(rank)) {
      if (this.plan.members.includes(rank)) this.retryFault(rank, why);
    } else if (!this.mayExclude) this.failGlobal(error);
    else {
      // A partner in another group: its group retries without it; its heir (the nearest member on its left
      // still in, as this rank knows) dials in, and is dialed too (PeerMesh: only the lower id dials, both
      // ask). A group with nobody left fails the call (its part of the sum is gone) instead of the deadline.
      const group = this.geo.groupOf(rank);
      const place = placeOf(this.geo.layout, rank);
      this.lostElsewhere.add(rank);
      const out = this.geo.outPositions(group, new Set([...this.excluded, ...this.lostElsewhere]));
      const heir = heirPosition(this.geo.layout.sizes[group], out, place.position);
      if (heir >= 0) this.routes.ensure(place.base + heir);
      else
        this.failGlobal(
          new CollectiveError('peer_closed', `${this.label}: group ${group} lost every member`, { peer: error.peer }),
        );
    }
  }

  onFrame(rank: number, link: Link, frame: Frame): void {
    if (this.settled) return;
    const mate = this.isMate(rank);
    try {
      if (frame.kind === FrameKind.Abort) {
        this.failGlobal(abortError(link, frame, this.label));
        return;
      }
      const parsed = parsePrefix(frame, this.geo.world);
      if (mate) this.onMateFrame(rank, frame, parsed);
      else this.exchange.onFrame(rank, frame, parsed);
    } catch (err) {
      if (mate && err instanceof ChecksumError && !this.sealed && !this.gatherSeen)
        this.retryFault(null, `a corrupted frame from ${link.peer}`);
      else this.failGlobal(protocolError(err, link.peer, this.label));
    }
  }

  private onMateFrame(rank: number, frame: Frame, parsed: ParsedPrefix): void {
    if (frame.kind === FrameKind.GroupRetry) {
      this.onRetry(frame.ringStep, parsed.excluded);
      return;
    }
    if (rank !== this.plan.left)
      throw new FrameError(`frame of kind ${frame.kind} from ${rank}, not the left neighbour`);
    this.heardLeft = true;
    this.armSilence();
    if (frame.kind === FrameKind.GroupResult) {
      this.gatherSeen = true;
      this.clearSilence();
      this.exchange.onGather(frame, parsed);
      return;
    }
    const mine = this.groupExcluded();
    if (!sameSet(parsed.excluded, mine))
      this.moveTo(this.attempt + 1, sorted([...mine, ...this.mateRanks(parsed.excluded)]));
    else if (frame.kind === FrameKind.GroupReduce) this.onReduce(frame, parsed);
    else if (frame.kind === FrameKind.GroupSeal) this.onSeal(frame.chunkIndex);
    else throw new FrameError(`unexpected frame kind ${frame.kind} inside the group`);
  }

  // ------------------------------------------------------------------ the group's reduce

  /**
   * This group's excluded ranks, ascending: asked for every frame sent or received, so kept and made
   * again only when `excluded` has grown (it never shrinks).
   */
  groupExcluded(): readonly number[] {
    if (this.mineOf !== this.excluded.size) {
      this.mine = sorted([...this.excluded].filter((r) => this.isMate(r)));
      this.mineOf = this.excluded.size;
    }
    return this.mine;
  }

  private mateRanks(ranks: readonly number[]): number[] {
    for (const r of ranks) if (!this.isMate(r)) throw new FrameError(`rank ${r} is not in this group`);
    return [...ranks];
  }

  /** A new attempt of the group's reduce: its state, then its links routed under its id (replaying early frames). */
  private startAttempt(attempt: number): void {
    if (!this.prepareAttempt(attempt)) return;
    // They may even start a later attempt, which then carries on.
    for (const [rank, link] of this.routes.entries()) if (this.isMate(rank)) this.routes.route(rank, link);
    this.beginAttempt(attempt);
  }

  /** Attempt `attempt`'s plan and fresh state, and this rank's first sends queued; false: it is left out. */
  private prepareAttempt(attempt: number): boolean {
    this.attempt = attempt;
    if (attempt > 0) this.data.set(this.input);
    const g = this.geo.place.group;
    const out = this.geo.outPositions(g, this.excluded);
    if (out.has(this.geo.place.position)) {
      this.failGlobal(new CollectiveError('peer_closed', `${this.label}: left out by its group`, { peer: null }), true);
      return false;
    }
    this.plan = this.planFor(out);
    this.arrived = new Set();
    this.ownedLeft = this.plan.ownedChunks;
    this.seals = new Set();
    this.sealSent = false;
    this.heardLeft = false;
    this.routes.dropWhere((rank) => this.isMate(rank));
    this.routes.ensure(this.plan.left);
    if (this.plan.right !== null) {
      const right = this.routes.to(this.plan.right);
      for (const chunk of this.plan.starts) right.enqueue(() => this.reduceFrame(chunk, 0));
    }
    return true;
  }

  /** The attempt's links are routed: watch for silence, and seal if replayed frames completed the reduce. */
  private beginAttempt(attempt: number): void {
    if (this.settled || this.attempt !== attempt) return;
    this.armSilence();
    this.afterReduceProgress();
  }

  private planFor(out: ReadonlySet<number>): ReducePlan {
    const { place, layout, chunkElements } = this.geo;
    return new ReducePlan(place, layout.sizes[place.group], this.data.length, out, chunkElements);
  }

  private reduceFrame(chunk: Chunk, hop: number): ArrayBuffer {
    const header = {
      kind: FrameKind.GroupReduce,
      id: attemptId(this.opts.id, this.attempt),
      ringStep: hop,
      chunkIndex: chunk.start,
      chunkCount: this.data.length,
    };
    const values = this.data.subarray(chunk.start, chunk.start + chunk.length);
    return valuesFrame(header, this.groupExcluded(), values, this.compression);
  }

  private onReduce(frame: Frame, parsed: ParsedPrefix): void {
    const start = frame.chunkIndex;
    const role = this.plan.receives.get(start);
    if (!role || frame.chunkCount !== this.data.length || frame.ringStep !== role.hop)
      throw new FrameError(`reduce chunk at ${start} (hop ${frame.ringStep}) is not one this rank expects`);
    if (this.arrived.has(start)) throw new FrameError(`duplicate reduce chunk at ${start}`);
    checkValues(frame, parsed.data, role.length, this.compression);
    applyValues(frame, parsed.data, this.data.subarray(start, start + role.length), this.compression, true);
    this.arrived.add(start);
    if (role.forward) {
      const chunk = { start, length: role.length };
      this.routes.to(this.plan.right!).enqueue(() => this.reduceFrame(chunk, role.hop + 1));
    } else this.ownedLeft--;
    this.afterReduceProgress();
  }

  private afterReduceProgress(): void {
    if (this.ownedLeft > 0 || this.sealSent) return;
    this.sealSent = true;
    if (!this.mayExclude) {
      this.onSealed();
      return;
    }
    this.seals.add(this.geo.rank);
    if (this.plan.right !== null) this.sendSeal(this.geo.rank);
    this.checkSealed();
  }

  private sendSeal(origin: number): void {
    const header = {
      kind: FrameKind.GroupSeal,
      id: attemptId(this.opts.id, this.attempt),
      ringStep: 0,
      chunkIndex: origin,
      chunkCount: this.geo.world,
    };
    const excluded = this.groupExcluded();
    this.routes.to(this.plan.right!).enqueue(() => controlFrame(header, excluded));
  }

  private onSeal(origin: number): void {
    if (!this.plan.members.includes(origin) || origin === this.geo.rank || this.seals.has(origin))
      throw new FrameError(`seal of ${origin} is not one this rank expects`);
    this.seals.add(origin);
    if (this.plan.right !== origin) this.sendSeal(origin);
    this.checkSealed();
  }

  private checkSealed(): void {
    if (this.sealSent && this.seals.size === this.plan.members.length) this.onSealed();
  }

  private onSealed(): void {
    if (this.sealed) return;
    this.sealed = true;
    this.clearSilence();
    this.exchange.start(this.attempt, this.mayExclude);
  }

  // ------------------------------------------------------------------ retries

  private retryFault(dead: number | null, why: string): void {
    if (this.sealed || this.gatherSeen || (dead !== null && !this.mayExclude)) {
      // A stall with nobody to name (the seals, the reduce): `unattributed`, its aborts say this rank gave up.
      const peer = dead === null ? null : this.routes.peerName(dead);
      const kind = dead === null ? 'protocol' : 'peer_closed';
      this.failGlobal(new CollectiveError(kind, `${this.label}: ${why}`, { peer, unattributed: dead === null }));
      return;
    }
    const mine = this.groupExcluded();
    this.moveTo(this.attempt + 1, dead === null ? mine : sorted([...mine, dead]));
  }

  /** A retry frame: join the newest attempt of the largest excluded set anyone knows. */
  private onRetry(attempt: number, theirs: number[]): void {
    const mine = this.groupExcluded();
    const union = sorted([...mine, ...this.mateRanks(theirs)]);
    if (sameSet(union, mine) && attempt <= this.attempt) return;
    if (sameSet(union, theirs) && attempt > this.attempt) this.moveTo(attempt, union);
    else this.moveTo(Math.max(this.attempt, attempt) + 1, union);
  }

  private moveTo(attempt: number, excluded: readonly number[]): void {
    if (this.sealed || this.gatherSeen) {
      // A mate lost after the seal is named, so relayed aborts name it and not this honest rank; a retry that
      // left nobody new out is a `protocol` error naming nobody (`unattributed`: its aborts say it gave up).
      const lost = excluded.find((r) => !this.excluded.has(r));
      const [kind, peer] =
        lost === undefined ? (['protocol', null] as const) : (['peer_closed', this.routes.peerName(lost)] as const);
      const why = `${this.label}: the group retried after it sealed`;
      this.failGlobal(new CollectiveError(kind, why, { peer, unattributed: lost === undefined }));
      return;
    }
    if (attempt >= this.maxAttempts) {
      this.failGlobal(
        new CollectiveError('timeout', `${this.label}: the group's reduce failed ${this.maxAttempts} times`),
      );
      return;
    }
    for (const r of excluded) this.excluded.add(r);
    // Tell every member reachable, on the attempt it may still be in and on the new one.
    for (const [rank, link] of this.routes.entries()) {
      if (!this.isMate(rank) || !link.isOpen) continue;
      for (const id of [attemptId(this.opts.id, this.attempt), attemptId(this.opts.id, attempt)]) {
        const header = { kind: FrameKind.GroupRetry, id, ringStep: attempt, chunkIndex: 0, chunkCount: 1 };
        trySend(link, controlFrame(header, excluded));
      }
    }
    this.startAttempt(attempt);
  }

  /** Progress: the silence starts again (per frame from the left: moves a start time; one timer runs). */
  private armSilence(): void {
    const ms = this.opts.silenceMs;
    if (ms === undefined || this.sealed || !(ms > 0)) {
      this.clearSilence();
      return;
    }
    this.quietSince = performance.now();
    this.silenceTimer ??= setTimeout(() => this.onSilence(), ms);
  }

  private clearSilence(): void {
    if (this.silenceTimer !== null) clearTimeout(this.silenceTimer);
    this.silenceTimer = null;
  }

  private onSilence(): void {
    this.silenceTimer = null;
    const waitMore = this.quietSince + this.opts.silenceMs! - performance.now();
    if (waitMore > 0) {
      this.silenceTimer = setTimeout(() => this.onSilence(), waitMore);
      return;
    }
    if (this.settled || this.sealed || this.plan.left === null) return;
    const left = this.plan.left;
    // Own reduce complete, a mate's seal never came: a member went silent after its last frame to this
    // side (a crashed tab's links stay open). Start again: the silent one sends nothing, so it is left out.
    if (this.ownedLeft === 0) this.retryFault(null, `the group's seals stalled for ${this.opts.silenceMs} ms`);
    else if (!this.heardLeft) this.retryFault(left, `${left} sent nothing for ${this.opts.silenceMs} ms (hung)`);
    else this.retryFault(null, `the group's reduce stalled for ${this.opts.silenceMs} ms`);
  }

  // ------------------------------------------------------------------ settling

  /** The exchange's view of this call (group-exchange.ts `ExchangeHost`). */
  get id(): CollectiveId {
    return this.opts.id;
  }

  ringId(): CollectiveId {
    return attemptId(this.opts.id, this.attempt);
  }

  right(): number | null {
    return this.plan.right;
  }

  send(rank: number, make: () => ArrayBuffer): void {
    this.routes.to(rank).enqueue(make);
  }

  reach(rank: number): void {
    this.routes.ensure(rank);
  }

  fail(error: CollectiveError): void {
    this.failGlobal(error);
  }

  progressed(): void {
    this.checkDone();
  }

  private checkDone(): void {
    if (this.settled || !this.exchange.complete || !this.routes.idle) return;
    this.settled = true;
    this.cleanUp();
    this.resolve({ excluded: this.exchange.excluded });
  }

  /**
   * Fail here and, unless `alone`, tell every rank this one talks to (not when it gave up on its own: it
   * is leaving; nor when it was left out by its group, which knows).
   */
  private failGlobal(error: CollectiveError, alone = false): void {
    if (this.settled) return;
    this.settled = true;
    const named = tagged(error, this.label);
    if (!alone && error.kind !== 'aborted') this.routes.abortAll(named);
    this.cleanUp();
    this.reject(named);
  }

  private cleanUp(): void {
    this.clearSilence();
    this.routes.close();
    for (const cleanup of this.cleanups.splice(0)) cleanup();
  }
}
