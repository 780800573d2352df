/**
 * What the grouped allreduce's parts share (group-allreduce.ts has the algorithm): the call's options and
 * result, the links a rank sees, the id of each reduce attempt, a per-rank send queue that holds frames
 * until a link to that rank exists, and the errors an Abort frame or a bad frame turn into.
 */
import type { GroupLayout } from '../../core/training/group-geometry';
import { CollectiveError } from './collective-error';
import type { CollectiveOptions } from './collective-session';
import { assertValidCollectiveId, type CollectiveId, decodeUtf8, type Frame, payloadBytes } from './framing';
import type { Link, Unsubscribe } from './link';
import type { PacedSender } from './paced-sender';
import { DEFAULT_CHUNK_ELEMENTS, DEFAULT_INT8_CHUNK_ELEMENTS, type WireCompression } from './ring-allreduce';

/** The links of one rank in a grouped topology. */
export interface GroupLinks {
  /** This rank (world ranks are in ring order; groups are contiguous blocks of them). */
  readonly rank: number;
  readonly layout: GroupLayout;
  /** An open link to `rank` (the planned ones are connected before the call), or null. */
  link(rank: number): Link | null;
  /** Open (or reuse) a link to `rank`: a retry's new neighbour, or an heir's partners. */
  connect(rank: number): Promise<Link>;
  /** Links other ranks open to this one during the call (an heir dialing in). */
  onLink(listener: (rank: number, link: Link) => void): Unsubscribe;
}

/**
 * Ranks the coordinator saw leave the round during the call (`members_lost`: their sockets closed, or a
 * survivor's report left them out). A crashed browser's data channels stay open until ICE consent fails
 * (about 30 s), so without this a lost member is found only by its group's silence watch, once for each
 * attempt it had begun. Used with `mayExclude` only.
 */
export interface LostRanks {
  /** Ranks lost so far. */
  readonly ranks: readonly number[];
  /** Calls `listener` with each later batch; returns the unsubscribe. */
  onLost(listener: (ranks: readonly number[]) => void): Unsubscribe;
}

export interface GroupAllreduceOptions extends CollectiveOptions {
  /** Values per chunk, the same on every rank. Default: a full default frame, as the ring's. */
  readonly chunkElements?: number;
  /** Wire format, the same on every rank (see ring-allreduce.ts). Default `'none'`. */
  readonly compression?: WireCompression;
  /**
   * A member lost inside its group's reduce may be left out (its contribution dropped; the caller
   * re-weights). Off (default): a lost member fails the call everywhere, as in the ring.
   */
  readonly mayExclude?: boolean;
  /**
   * A member's reduce that hears nothing from its group for this long starts again; a left neighbour
   * that sent nothing at all in the attempt is judged hung (excluded with `mayExclude`, else blamed).
   * Absent: only the deadline.
   */
  readonly silenceMs?: number;
  /** Ranks to leave out as soon as they are known lost (with `mayExclude`), as if their links had closed. */
  readonly lost?: LostRanks;
  /** Attempts of one group's reduce before the call fails. Default `DEFAULT_GROUP_ATTEMPTS`. */
  readonly maxAttempts?: number;
}

export interface GroupAllreduceResult {
  /** World ranks whose values are not in the sum (ascending), the same on every rank. */
  readonly excluded: number[];
}

export const DEFAULT_GROUP_ATTEMPTS = 4;

/** The id of attempt `attempt` of a group's ring. */
export function attemptId(id: CollectiveId, attempt: number): CollectiveId {
  return { ...id, seq: id.seq + attempt };
}

/** Frames to one rank: held until its link is there, then paced on it. */
export class OutQueue {
  private sender: PacedSender | null = null;
  private held: Array<() => ArrayBuffer> = [];

  constructor(private readonly pace: (link: Link) => PacedSender) {}

  attach(link: Link): void {
    if (this.sender?.link === link) return;
    this.sender?.dispose();
    this.sender = this.pace(link);
    for (const make of this.held.splice(0)) this.sender.enqueue(make);
  }

  enqueue(make: () => ArrayBuffer): void {
    if (this.sender) this.sender.enqueue(make);
    else this.held.push(make);
  }

  get idle(): boolean {
    return this.held.length === 0 && (this.sender?.idle ?? true);
  }

  dispose(): void {
    this.sender?.dispose();
    this.held = [];
  }
}

export const sameSet = (a: readonly number[], b: readonly number[]) =>
  a.length === b.length && a.every((x, i) => x === b[i]);
export const sorted = (xs: Iterable<number>) => [...new Set(xs)].sort((a, b) => a - b);

/** The error an Abort frame from `link` reports. */
export function abortError(link: Link, frame: Frame, label: string): CollectiveError {
  let body: { kind?: unknown; peer?: unknown; message?: unknown } = {};
  try {
    body = JSON.parse(decodeUtf8(payloadBytes(frame)));
  } catch {
    // an unreadable abort is still an abort
  }
  const kinds = ['peer_closed', 'timeout', 'protocol', 'hash_mismatch'];
  const kind = kinds.includes(body.kind as string) ? (body.kind as CollectiveError['kind']) : 'peer_closed';
  const message = typeof body.message === 'string' ? body.message : '(no message)';
  const peer = typeof body.peer === 'string' ? body.peer : link.peer;
  return new CollectiveError(kind, `${label}: ${link.peer} gave up: ${message}`, { peer, collective: label });
}

/** A bad frame (or anything thrown while handling one) from `peer`, as the call's failure. */
export function protocolError(err: unknown, peer: string, label: string): CollectiveError {
  if (err instanceof CollectiveError) return err;
  return new CollectiveError('protocol', `${label}: ${(err as Error)?.message ?? String(err)} (from ${peer})`, {
    peer,
    cause: err,
  });
}

/** `error` named after collective `label` (once). */
export function tagged(error: CollectiveError, label: string): CollectiveError {
  if (error.collective) return error;
  const message = error.message.startsWith(label) ? error.message : `${label}: ${error.message}`;
  return new CollectiveError(error.kind, message, {
    peer: error.peer,
    collective: label,
    cause: error.cause,
    unattributed: error.unattributed,
  });
}

/** The call's wire format and chunking, after checking them, the id and the deadline (RangeError). */
export function checkedOptions(opts: GroupAllreduceOptions): { compression: WireCompression; chunkElements: number } {
  assertValidCollectiveId(opts.id);
  const compression = opts.compression ?? 'none';
  if (!['none', 'fp16', 'int8'].includes(compression))
    throw new RangeError(`groupAllreduce: unknown compression ${String(compression)}`);
  const chunkElements =
    opts.chunkElements ?? (compression === 'int8' ? DEFAULT_INT8_CHUNK_ELEMENTS : DEFAULT_CHUNK_ELEMENTS);
  if (!Number.isInteger(chunkElements) || chunkElements < 1)
    throw new RangeError(`groupAllreduce: chunkElements must be a positive integer, got ${chunkElements}`);
  if (!(opts.timeoutMs > 0)) throw new RangeError(`groupAllreduce: timeoutMs must be positive, got ${opts.timeoutMs}`);
  return { compression, chunkElements };
}
