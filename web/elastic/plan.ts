/**
 * The pure decisions of the elastic loop, kept apart from sockets, workers and timers so they can be
 * tested as tables of cases in Node:
 * - which samples this rank computes in each step of each commit group (`StepPlanner`: the group plan
 *   of core/training/groups.ts from the record a round starts at; tabs never receive index lists);
 * - how a tab gets the committed state a round starts from (`planSync`), given the states it holds;
 * - what a tab says in `hello` after a reconnect (`helloHolding`);
 * - whether and how a failed collective is reported (`failureReport`).
 *
 * A tab holds up to two training states: the *live* one in the worker's working buffers (the last
 * step it applied) and the *backup* (the last committed step, `saveBackup`). Each is tagged with its
 * step and parameter hash (null only for the step-0 state freshly initialised from the seed).
 */
import type { JobPublic } from '../../core/training/job';
import type { RoundMessage, WorldEntry } from '../../core/protocol/coordinator-messages';
import { commitSpan, type CommitSpan } from '../../core/training/commit-schedule';
import {
  groupPlan,
  indicesAt,
  jobDone,
  positionAfterGroup,
  rankRanges,
  slotsRanges,
  slotsSamples,
  type GroupPlan,
  type PositionRange,
  type RecordPosition,
} from '../../core/training/groups';
import { overlapsNext, successorPlan } from '../../core/training/overlap';
import { holdersOf } from '../../core/training/state-route';
import { epochOrder, subtractRanges } from '../../core/training/sampler';
import { NO_HASH } from '../../core/protocol/tab-messages';
import { isCollectiveError } from '../net/collective-error';

export interface StateTag {
  step: number;
  /** Parameter hash; null for the freshly initialised step-0 state. */
  hash: string | null;
}

export interface HeldStates {
  /** The state in the worker's working buffers, or null when the worker has no model. */
  live: StateTag | null;
  /** The state in the worker's backup buffers, or null before the first `saveBackup`. */
  backup: StateTag | null;
}

export const NOTHING_HELD: HeldStates = { live: null, backup: null };

export function sameTag(a: StateTag | null, b: StateTag | null): boolean {
  return !!a && !!b && a.step === b.step && a.hash === b.hash;
}

// ---------------------------------------------------------------- steps

/** One commit group as this rank works it: its steps, its split, and what its commit will be. */
export interface GroupWork {
  firstStep: number;
  lastStep: number;
  epoch: number;
  /** The record where the group starts. */
  start: RecordPosition;
  /** The record after the group commits (the lost slots' slices as holes when it is carried on). */
  after: RecordPosition;
  /** The commit as the schedules see it (checkpoints, evaluations). */
  span: CommitSpan;
  /** Samples this rank's slot computes over the group, and all the slots still computing it: the outer weight. */
  own: number;
  total: number;
  /** Samples each rank's slot computes over the group, by rank of the round. */
  rankSamples: number[];
  /**
   * The record after the group commits without the slices of `ranks` too (an outer sum that left them
   * out: web/net/group-allreduce.ts): their slices become holes as well.
   */
  afterWithout(ranks: readonly number[]): RecordPosition;
  /** The group's plan (core/training/groups.ts). */
  plan: GroupPlan;
  /** The last step of the groups a carrying round carries on, when this group is one of them; else null. */
  carriedThrough: number | null;
}

export interface StepWork {
  step: number;
  epoch: number;
  /** The step's positions in the epoch order (its part of R = holes ++ [cursor, n)). */
  ranges: PositionRange[];
  /** Samples in the whole step (all ranks): what the summed gradient is divided by. */
  count: number;
  /** The dataset indices this rank computes (may be empty). */
  indices: Uint32Array;
  /** The group's last step: after it the ranks wait for `committed`. */
  commitPoint: boolean;
  group: GroupWork;
}

/** The split a rank computes a group under: the shares by slot, its slot, and the slots still computing it. */
export interface Split {
  shares: number[];
  slot: number;
  slots: number[];
}

/**
 * The steps of a round, group after group, for one rank: the group plan at the record the round
 * starts at, under the carried split for a carried group (`round.carry`) and the round's own shares
 * after it. Each next group starts where the previous one leaves the record when it commits (with a
 * carried group's lost slices as holes), so the rank plans ahead without waiting for `committed`
 * (which says the same position; the step runner checks it). `work` returns null once the job is done.
 *
 * An overlapped job's carry may cover two groups (`carry.through`, core/training/overlap.ts): the second
 * keeps the carried split and is planned where the first leaves the record when committed whole; the
 * first one's lost slices stay holes through its commit (`deferred`, also `carry.deferred` when the
 * round starts at the second).
 */
export class StepPlanner {
  private group: GroupPlan | null;
  private split: Split;
  private work0: GroupWork | null = null;
  /** The last step under the carried split (0: no carry). */
  private readonly through: number;
  /** Holes of the record the current group was planned without (its overlapped predecessor's lost slices). */
  private deferred: PositionRange[];

  constructor(
    private readonly job: JobPublic,
    private readonly round: Pick<RoundMessage, 'world' | 'step' | 'epoch' | 'cursor' | 'holes' | 'carry'>,
    private readonly rank: number,
  ) {
    this.deferred = round.carry?.deferred ?? [];
    const holes = subtractRanges(round.holes ?? [], this.deferred);
    const at: RecordPosition = { epoch: round.epoch, cursor: round.cursor, holes };
    this.group = jobDone(at, job) ? null : groupPlan(at, round.step, job);
    this.through = round.carry ? (round.carry.through ?? this.group?.lastStep ?? 0) : 0;
    this.split = round.carry
      ? { shares: round.carry.shares, slot: round.carry.slots[rank], slots: round.carry.slots }
      : this.ownSplit();
  }

  /**
   * Whether `work`'s group overlaps its outer step with the next group's inner steps (core/training/overlap.ts);
   * `drained`: the coordinator asked for this group's outer step to be synchronous (`committed.drain`).
   */
  overlaps(group: GroupWork, drained: boolean): boolean {
    const at = { carriedThrough: group.carriedThrough, drainedAt: drained ? group.lastStep : null };
    return overlapsNext(this.job, group.plan, this.job, at);
  }

  /** The round's own split: its shares by rank, every rank computing. */
  private ownSplit(): Split {
    return {
      shares: this.round.world.map((w) => w.share),
      slot: this.rank,
      slots: this.round.world.map((w) => w.rank),
    };
  }

  /** The group of `step` (steps only move forward), or null when the job is done before it. */
  groupOf(step: number): GroupWork | null {
    while (this.group && step > this.group.lastStep) {
      const current = this.group;
      if (current.lastStep < this.through) {
        // The second group of an overlapped carry: same split, planned as if the first committed whole.
        this.deferred = this.lostRanges(current);
        this.group = successorPlan(current, this.job);
      } else {
        const after = this.groupWork().after;
        this.group = jobDone(after, this.job) ? null : groupPlan(after, current.lastStep + 1, this.job);
        this.split = this.ownSplit();
        this.deferred = [];
      }
      this.work0 = null;
    }
    if (!this.group || step < this.group.firstStep) return null;
    return this.groupWork();
  }

  /**
   * The slices of `group` the carried split's lost slots computed, and those of the slots `without` (an
   * outer sum that left them out): holes when it commits.
   */
  private lostRanges(group: GroupPlan, without: readonly number[] = []): PositionRange[] {
    const { shares, slots } = this.split;
    const lostSlots = shares.map((_, i) => i).filter((i) => !slots.includes(i) || without.includes(i));
    return lostSlots.length > 0 ? slotsRanges(group, shares, lostSlots) : [];
  }

  /** This rank's work in `step`, or null when the job is done. */
  work(step: number): StepWork | null {
    const group = this.groupOf(step);
    if (!group || !this.group) return null;
    const span = this.group.steps[step - group.firstStep];
    const order = epochOrder(this.job.seed, group.epoch, this.job.datasetSize);
    return {
      step,
      epoch: group.epoch,
      ranges: span.ranges,
      count: span.count,
      indices: indicesAt(order, rankRanges(span, this.split.shares, this.split.slot)),
      commitPoint: step === group.lastStep,
      group,
    };
  }

  private groupWork(): GroupWork {
    if (this.work0) return this.work0;
    const g = this.group!;
    const { shares, slot, slots } = this.split;
    const deferred = this.deferred;
    const after = positionAfterGroup(g.start, g, [...this.lostRanges(g), ...deferred], this.job.datasetSize);
    this.work0 = {
      firstStep: g.firstStep,
      lastStep: g.lastStep,
      epoch: g.epoch,
      start: g.start,
      after,
      span: commitSpan(g, after, this.job.epochs),
      own: slotsSamples(g, shares, [slot]),
      total: slotsSamples(g, shares, slots),
      rankSamples: slots.map((s) => slotsSamples(g, shares, [s])),
      afterWithout: (ranks) =>
        ranks.length === 0
          ? after
          : positionAfterGroup(
              g.start,
              g,
              [
                ...this.lostRanges(
                  g,
                  ranks.map((r) => slots[r]),
                ),
                ...deferred,
              ],
              this.job.datasetSize,
            ),
      plan: g,
      carriedThrough: g.lastStep <= this.through ? this.through : null,
    };
    return this.work0;
  }
}

/** This rank's part of `step` of a round that starts at `round` (a fresh planner: tests and one-off uses). */
export function stepWork(
  job: JobPublic,
  round: Pick<RoundMessage, 'world' | 'step' | 'epoch' | 'cursor' | 'holes' | 'carry'>,
  rank: number,
  step: number,
): StepWork | null {
  return new StepPlanner(job, round, rank).work(step);
}

// ---------------------------------------------------------------- state sync

/** Where the committed state a round starts from lives, for this tab. */
export type SyncPlan =
  /** Initialise from the job seed (step 0). */
  | { kind: 'fresh' }
  /** The tab already holds it: keep the live state, or put the backup back. */
  | { kind: 'local'; use: 'live' | 'backup' }
  /** Download the durable checkpoint, verify its sha256 and the parameter hash, restore it. */
  | { kind: 'checkpoint'; url: string; sha256: string; step: number }
  /** This tab holds the state: make `use` current, then send it on if its right neighbour lacks it. */
  | { kind: 'send'; use: 'live' | 'backup'; holders: readonly number[] }
  /** Receive the state from the left neighbour (relayed from the holders, core/training/state-route.ts). */
  | { kind: 'receive'; holders: readonly number[] }
  /** This tab was named the source but does not hold the state (the coordinator's view was stale). */
  | { kind: 'impossible'; reason: string };

/** Which held state (if any) is the committed state `{step, hash}`; the live one is preferred (no copy). */
export function holding(held: HeldStates, wanted: StateTag): 'live' | 'backup' | null {
  if (sameTag(held.live, wanted)) return 'live';
  if (sameTag(held.backup, wanted)) return 'backup';
  return null;
}

/**
 * Where this rank gets the committed state a round starts from. `ownInnerState`: the job's ranks each
 * keep inner optimizer state the agreed hash does not cover (local sync mode), so a held state of the
 * right tag is not the checkpoint's state: after a rollback to a checkpoint every rank takes the
 * checkpoint's bytes, its uploader's moments and t (docs/local-steps.md), which is also what the
 * coordinator holds the rank's next check to (its inner state must be the checkpoint's).
 */
export function planSync(
  round: Pick<RoundMessage, 'step' | 'committedHash' | 'stateFrom'>,
  rank: number,
  held: HeldStates,
  worldSize: number,
  ownInnerState = false,
): SyncPlan {
  const wanted: StateTag = { step: round.step - 1, hash: round.committedHash };
  const have = wanted.hash === null && wanted.step > 0 ? null : holding(held, wanted);
  const from = round.stateFrom;
  switch (from.kind) {
    case 'fresh':
      return { kind: 'fresh' };
    case 'checkpoint':
      // The record was rolled back to the checkpoint; a tab that still holds that very state skips the download,
      // unless its inner state is its own (local mode): that part of the checkpoint only the download gives.
      return have && !ownInnerState
        ? { kind: 'local', use: have }
        : { kind: 'checkpoint', url: from.url, sha256: from.sha256, step: from.step };
    case 'held':
      return have
        ? { kind: 'local', use: have }
        : {
            kind: 'impossible',
            reason: `the coordinator counts this tab as holding step ${wanted.step} (${wanted.hash}) but it holds ${describe(held)}`,
          };
    case 'peer':
    case 'peers': {
      const holders = holdersOf(from)!; // `peer` and `peers` name them
      if (holders.some((r) => r >= worldSize))
        return { kind: 'impossible', reason: `state holders ${holders.join(',')} outside a world of ${worldSize}` };
      if (holders.includes(rank)) {
        return have
          ? { kind: 'send', use: have, holders }
          : {
              kind: 'impossible',
              reason: `named state source for step ${wanted.step} (${wanted.hash}) but holds ${describe(held)}`,
            };
      }
      return { kind: 'receive', holders };
    }
  }
}

/**
 * How a member of a carried round (`round.carry`) goes on with the group an earlier round started
 * (docs/local-steps.md), given the states it holds and the group's last step:
 * - `start`: its live state is the group's start (it applied nothing of the group): compute it all;
 * - `live`: its live state is an inner step of the group over the group's start in the backup: go on after it;
 * - `revert`: it applied the group's outer step with the old world, which never committed: put its own
 *   parameters back (`revertOuter`) and take the outer step again with the survivors;
 * - `backup`: only its backup is the group's start: put it back and compute the group again.
 * `resume`: the first step to compute (`lastStep + 1`: only the outer step is left).
 */
export type CarryPlan =
  | { kind: 'carry'; from: 'start' | 'live' | 'revert' | 'backup'; resume: number }
  | { kind: 'impossible'; reason: string };

export function planCarry(
  round: Pick<RoundMessage, 'step' | 'committedHash'>,
  held: HeldStates,
  lastStep: number,
): CarryPlan {
  const wanted: StateTag = { step: round.step - 1, hash: round.committedHash };
  if (sameTag(held.live, wanted)) return { kind: 'carry', from: 'start', resume: round.step };
  if (!sameTag(held.backup, wanted))
    return {
      kind: 'impossible',
      reason: `carrying on from step ${wanted.step} (${wanted.hash}) but this tab holds ${describe(held)}`,
    };
  const live = held.live;
  const inGroup = !!live && live.step >= round.step && live.step <= lastStep;
  if (inGroup && live.hash === NO_HASH) return { kind: 'carry', from: 'live', resume: live.step + 1 };
  if (inGroup && live.step === lastStep && live.hash !== null)
    return { kind: 'carry', from: 'revert', resume: lastStep + 1 };
  return { kind: 'carry', from: 'backup', resume: round.step };
}

function describe(held: HeldStates): string {
  const tag = (t: StateTag | null) => (t ? `step ${t.step} (${t.hash})` : 'nothing');
  return `live ${tag(held.live)}, backup ${tag(held.backup)}`;
}

// ---------------------------------------------------------------- reconnect

/**
 * What `hello` says after a (re)connect: the committed state held (the backup once one exists) and,
 * as `pending`, a newer state the tab reported but never saw committed (the coordinator may have
 * committed it just before it went away): the live state it reported, or an overlapped job's consensus
 * the worker computed and reported (`consensus`: it can make it its state, state-sync.ts).
 */
export function helloHolding(
  held: HeldStates,
  lastReported: StateTag | null,
  consensus: StateTag | null = null,
): {
  haveStep: number | null;
  haveHash: string | null;
  pending: { step: number; hash: string } | null;
} {
  const committed = held.backup ?? (held.live && held.live.step === 0 ? held.live : null);
  const newer = consensus ?? (lastReported && sameTag(held.live, lastReported) ? lastReported : null);
  const pending =
    newer?.hash && (!committed || newer.step > committed.step) ? { step: newer.step, hash: newer.hash } : null;
  return { haveStep: committed ? committed.step : null, haveHash: committed?.hash ?? null, pending };
}

// ---------------------------------------------------------------- failures

/**
 * How to report a failed round to the coordinator: `null` when the failure is not this tab's to
 * report (the round was aborted from outside: closed by the coordinator, or the socket dropped).
 * `peer` is the worker id of the peer the collective failed with, when the error names a known one.
 */
export function failureReport(
  err: unknown,
  world: readonly WorldEntry[],
  aborted: boolean,
): { reason: string; peer?: string; evidence?: 'bad_data' } | null {
  if (aborted || isCollectiveError(err, 'aborted')) return null;
  const message = err instanceof Error ? err.message : String(err);
  const reason = (isCollectiveError(err) ? `${err.kind}: ${message}` : message).slice(0, 256);
  if (isCollectiveError(err) && err.peer) {
    const entry = world.find((w) => w.peerId === err.peer || w.workerId === err.peer);
    // A protocol error names bytes the peer sent (a NaN, a malformed frame), not a peer that went away.
    if (entry) return { reason, peer: entry.workerId, ...(err.kind === 'protocol' ? { evidence: 'bad_data' } : {}) };
  }
  return { reason };
}

/** Peer ids of a ring position's neighbours (left receives from, right sends to). */
export function ringNeighbours(world: readonly WorldEntry[], rank: number): { left: WorldEntry; right: WorldEntry } {
  const size = world.length;
  return { left: world[(rank - 1 + size) % size], right: world[(rank + 1) % size] };
}
