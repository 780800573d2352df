/**
 * The pure decisions of the elastic loop, kept apart from sockets, workers and timers so they can be
 * tested as tables of cases in Node:
 * - which samples this rank computes in a step (the shared sampler: tabs never receive index lists);
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
import { epochOrder, indicesForRank, isCommitPoint, positionAfter, stepPosition } from '../../core/training/sampler';
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

export interface StepWork {
  step: number;
  epoch: number;
  /** First position of the step in its epoch order. */
  cursor: number;
  /** Samples in the whole step (all ranks): what the summed gradient is divided by. */
  count: number;
  /** The dataset indices this rank computes (a view into the epoch order; may be empty). */
  indices: Uint32Array;
  /** After this step the ranks wait for `committed`. */
  commitPoint: boolean;
  /** Record position after the step (a snapshot of the step's state carries it). */
  after: { epoch: number; cursor: number };
}

/** This rank's part of `step` in a round whose world is `world` (sorted by rank). */
export function stepWork(job: JobPublic, world: readonly WorldEntry[], rank: number, step: number): StepWork {
  const { epoch, cursor, count } = stepPosition(step, job);
  const order = epochOrder(job.seed, epoch, job.datasetSize);
  const shares = world.map((w) => w.share);
  return {
    step,
    epoch,
    cursor,
    count,
    indices: indicesForRank(order, cursor, job.globalBatch, shares, rank),
    commitPoint: isCommitPoint(step, job),
    after: positionAfter(step, job),
  };
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
  /** This tab is the broadcast root: make `use` current, then send it to the other ranks. */
  | { kind: 'send'; use: 'live' | 'backup' }
  /** Receive the state from the root (it comes along the ring, see `syncRoute`). */
  | { kind: 'receive'; root: number }
  /** This tab was named the source but does not hold the state (the coordinator's view was stale). */
  | { kind: 'impossible'; reason: string };

/** Which held state (if any) is the committed state `{step, hash}`; the live one is preferred (no copy). */
export function holding(held: HeldStates, wanted: StateTag): 'live' | 'backup' | null {
  if (sameTag(held.live, wanted)) return 'live';
  if (sameTag(held.backup, wanted)) return 'backup';
  return null;
}

export function planSync(
  round: Pick<RoundMessage, 'step' | 'committedHash' | 'stateFrom'>,
  rank: number,
  held: HeldStates,
): SyncPlan {
  const wanted: StateTag = { step: round.step - 1, hash: round.committedHash };
  const have = wanted.hash === null && wanted.step > 0 ? null : holding(held, wanted);
  const from = round.stateFrom;
  switch (from.kind) {
    case 'fresh':
      return { kind: 'fresh' };
    case 'checkpoint':
      // The record was rolled back to the checkpoint; a tab that still holds that very state skips the download.
      return have
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
      if (from.rank === rank) {
        return have
          ? { kind: 'send', use: have }
          : {
              kind: 'impossible',
              reason: `named state source for step ${wanted.step} (${wanted.hash}) but holds ${describe(held)}`,
            };
      }
      return { kind: 'receive', root: from.rank };
  }
}

function describe(held: HeldStates): string {
  const tag = (t: StateTag | null) => (t ? `step ${t.step} (${t.hash})` : 'nothing');
  return `live ${tag(held.live)}, backup ${tag(held.backup)}`;
}

/**
 * A state broadcast travels along the ring from the root: every rank but the root receives it from
 * its left neighbour, and every rank whose right neighbour is not the root forwards it. Only ring
 * links are needed (no extra connections for a sync), and each link carries the state once.
 */
export function syncRoute(
  rank: number,
  size: number,
  root: number,
): { receiveFromLeft: boolean; sendToRight: boolean } {
  if (size <= 1) return { receiveFromLeft: false, sendToRight: false };
  return { receiveFromLeft: rank !== root, sendToRight: (rank + 1) % size !== root };
}

// ---------------------------------------------------------------- reconnect

/**
 * What `hello` says after a (re)connect: the committed state held (the backup once one exists) and,
 * as `pending`, a newer live state the tab reported but never saw committed (the coordinator may have
 * committed it just before it went away).
 */
export function helloHolding(
  held: HeldStates,
  lastReported: StateTag | null,
): {
  haveStep: number | null;
  haveHash: string | null;
  pending: { step: number; hash: string } | null;
} {
  const committed = held.backup ?? (held.live && held.live.step === 0 ? held.live : null);
  const pending =
    lastReported?.hash && sameTag(held.live, lastReported) && (!committed || lastReported.step > committed.step)
      ? { step: lastReported.step, hash: lastReported.hash }
      : null;
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
