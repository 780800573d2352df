/**
 * The bookkeeping every collective shares: a deadline, routes on its links, paced senders, abort
 * frames, and — above all — one place that settles the promise exactly once and removes every
 * listener and timer it added, whether the collective succeeded or failed.
 *
 * Failure spreads: a rank that fails sends an Abort frame on each of its links, so a ring where one
 * channel closed fails everywhere within a hop or two instead of leaving the far ranks waiting for
 * their deadline.
 */
import { CollectiveError, COLLECTIVE_ERROR_KINDS, type CollectiveErrorKind } from './collective-error';
import {
  collectiveKey,
  decodeUtf8,
  encodeFrame,
  encodeUtf8,
  FrameError,
  FrameKind,
  PayloadEncoding,
  payloadBytes,
  type CollectiveId,
  type Frame,
} from './framing';
import { routerFor, type Route } from './frame-router';
import type { Link } from './link';
import { DEFAULT_HIGH_WATER_BYTES, PacedSender } from './paced-sender';

/**
 * Fail a collective (`fail`) at its deadline (`timeout`, naming whom it waited on when `timeoutPeer` knows)
 * or when the caller's signal aborts (`aborted`). Returns the cleanup. Every collective's one deadline
 * watch: `CollectiveSession` (ring, broadcast) and the grouped allreduce (group-call.ts).
 */
export function watchDeadline(
  opts: { readonly timeoutMs: number; readonly signal?: AbortSignal },
  label: string,
  fail: (error: CollectiveError) => void,
  timeoutPeer: () => string | null = () => null,
): () => void {
  const timer = setTimeout(() => {
    const peer = timeoutPeer();
    const waiting = peer ? ` waiting on ${peer}` : '';
    fail(
      new CollectiveError('timeout', `${label} timed out after ${opts.timeoutMs} ms${waiting}`, {
        peer,
        collective: label,
      }),
    );
  }, opts.timeoutMs);
  const signal = opts.signal;
  const onAbort = () =>
    fail(
      new CollectiveError('aborted', `${label} aborted: ${String(signal?.reason ?? 'signal')}`, {
        collective: label,
        cause: signal?.reason,
      }),
    );
  if (signal?.aborted) queueMicrotask(onAbort);
  else signal?.addEventListener('abort', onAbort, { once: true });
  return () => {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  };
}

/** Send `frame` unless the link throws: it is going, and its own close tells the peer. */
export function trySend(link: Link, frame: ArrayBuffer): void {
  try {
    link.send(frame);
  } catch {
    // the link is going away; its close says so
  }
}

/**
 * The Abort frame telling the neighbours of collective `id` why this rank gave up (any collective's:
 * the grouped allreduce sends it too). A rank that gave up on its own (its signal fired, it is leaving)
 * is, to the others, a peer that left: `peer: null` makes the receiver name the sender. So is one whose
 * error names nobody at fault (`unattributed`: a grouped call that stalled after its seal): relayed as its
 * own kind (`protocol`) with no peer, it named the honest sender as the source of bad data. Relayed as
 * `peer_closed`, the sender is named as having given up, which a failure report charges only when
 * corroborated (coordinator/machine/penalties.ts), no more than a closed link. An error with no peer that
 * is not `unattributed` (a rank refusing its own non-finite input) keeps its kind: the sender is at fault.
 */
export function abortFrame(id: CollectiveId, error: CollectiveError): ArrayBuffer {
  const header = {
    kind: FrameKind.Abort,
    id,
    ringStep: 0,
    encoding: PayloadEncoding.Bytes,
    scaleExponent: 0,
    chunkIndex: 0,
    chunkCount: 1,
  };
  const gaveUp = error.kind === 'aborted' || error.unattributed;
  const body = { kind: gaveUp ? 'peer_closed' : error.kind, peer: gaveUp ? null : error.peer, message: error.message };
  return encodeFrame(header, encodeUtf8(JSON.stringify(body)));
}

export interface CollectiveOptions {
  /** The same on every rank for the same call; must grow on each link (see `CollectiveId`). */
  readonly id: CollectiveId;
  /** Deadline for the whole collective, from the call. It includes waiting for slower ranks to arrive. */
  readonly timeoutMs: number;
  /** Abort from outside (e.g. the coordinator closed the round): rejects with kind `aborted`. */
  readonly signal?: AbortSignal;
  /** Bytes allowed in a channel's send buffer before the sender waits (default 256 KiB). */
  readonly highWaterBytes?: number;
}

export class CollectiveSession {
  readonly label: string;
  readonly done: Promise<void>;
  /** Which peer to blame when the deadline passes (the one this rank is waiting on). */
  timeoutPeer: () => string | null = () => null;
  private settled = false;
  private resolve!: () => void;
  private reject!: (error: CollectiveError) => void;
  private readonly routes: Route[] = [];
  private readonly senders = new Map<Link, PacedSender>();
  private readonly links = new Set<Link>();
  private readonly cleanups: Array<() => void> = [];
  private readonly highWaterBytes: number;

  constructor(
    name: string,
    readonly opts: CollectiveOptions,
  ) {
    this.label = `${name} ${collectiveKey(opts.id)}`;
    this.highWaterBytes = opts.highWaterBytes ?? DEFAULT_HIGH_WATER_BYTES;
    this.done = new Promise<void>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    if (!(opts.timeoutMs > 0) || !Number.isFinite(opts.timeoutMs))
      throw new RangeError(`${this.label}: timeoutMs must be a positive number, got ${opts.timeoutMs}`);
    this.cleanups.push(
      watchDeadline(
        opts,
        this.label,
        (error) => this.fail(error),
        () => this.timeoutPeer(),
      ),
    );
  }

  get isSettled(): boolean {
    return this.settled;
  }

  /**
   * Fail with a timeout blaming `peer` if `heard()` is still false after `silenceMs`: a neighbour that
   * sends nothing at all is hung, one that sent something is alive (it may wait on a hung rank further
   * up the ring). Cleared when the collective settles.
   */
  watchSilence(silenceMs: number, heard: () => boolean, peer: string): void {
    if (this.settled || !(silenceMs > 0) || !Number.isFinite(silenceMs)) return;
    const timer = setTimeout(() => {
      if (heard()) return;
      this.fail(
        new CollectiveError('timeout', `${this.label}: ${peer} sent nothing for ${silenceMs} ms (hung)`, {
          peer,
          collective: this.label,
        }),
      );
    }, silenceMs);
    this.cleanups.push(() => clearTimeout(timer));
  }

  /**
   * Receive this collective's frames from `link` (early frames are replayed synchronously, so set up
   * state first). Abort frames and link failures are handled here; `onFrame` sees the rest and may
   * throw `CollectiveError`/`FrameError` to fail the collective.
   */
  listen(link: Link, onFrame: (frame: Frame) => void): void {
    if (this.settled) return;
    this.links.add(link);
    try {
      const route = routerFor(link).open(this.opts.id, {
        onFrame: (frame) => {
          if (this.settled) return;
          this.guard(link, () => (frame.kind === FrameKind.Abort ? this.receiveAbort(link, frame) : onFrame(frame)));
        },
        onFailure: (error) => this.fail(this.tag(error)),
      });
      // Replayed early frames may already have settled the collective: then close at once.
      if (this.settled) route.close();
      else this.routes.push(route);
    } catch (err) {
      this.fail(
        this.tag(
          err instanceof CollectiveError
            ? err
            : new CollectiveError('protocol', String(err), { peer: link.peer, cause: err }),
        ),
      );
    }
  }

  /** The paced sender for `link` (one per link, shared when left and right are the same link). */
  sender(link: Link, onDrained: () => void = () => {}): PacedSender {
    let sender = this.senders.get(link);
    if (!sender) {
      this.links.add(link);
      sender = new PacedSender(link, this.highWaterBytes, onDrained, (error) => this.fail(this.tag(error)));
      // After the collective settled, a sender must not hold a listener: hand back a dead one.
      if (this.settled) sender.dispose();
      else this.senders.set(link, sender);
    }
    return sender;
  }

  /** Run `fn`, turning anything it throws into this collective's failure. */
  guard(link: Link | null, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      if (err instanceof CollectiveError) this.fail(this.tag(err));
      else if (err instanceof FrameError)
        this.fail(
          new CollectiveError('protocol', `${this.label}: ${err.message} (from ${link?.peer ?? 'unknown'})`, {
            peer: link?.peer ?? null,
            collective: this.label,
            cause: err,
          }),
        );
      else
        this.fail(
          new CollectiveError('protocol', `${this.label}: ${(err as Error)?.message ?? String(err)}`, {
            peer: link?.peer ?? null,
            collective: this.label,
            cause: err,
          }),
        );
    }
  }

  succeed(): void {
    if (this.settled) return;
    this.settled = true;
    this.cleanUp();
    this.resolve();
  }

  fail(error: CollectiveError): void {
    if (this.settled) return;
    this.settled = true;
    this.cleanUp();
    // Tell the neighbours, so ranks not adjacent to the fault stop too. Best effort: a closed or
    // failing link is skipped; the frame queues behind data already in the channel, which is fine.
    const abort = abortFrame(this.opts.id, error);
    for (const link of this.links) if (link.isOpen) trySend(link, abort);
    this.reject(error);
  }

  private tag(error: CollectiveError): CollectiveError {
    if (error.collective) return error;
    return new CollectiveError(error.kind, `${this.label}: ${error.message}`, {
      peer: error.peer,
      collective: this.label,
      cause: error.cause,
      unattributed: error.unattributed,
    });
  }

  private receiveAbort(link: Link, frame: Frame): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(decodeUtf8(payloadBytes(frame)));
    } catch (err) {
      throw new FrameError(`unreadable abort frame: ${(err as Error).message}`);
    }
    const body = parsed as { kind?: unknown; peer?: unknown; message?: unknown };
    const claimed = COLLECTIVE_ERROR_KINDS.includes(body.kind as CollectiveErrorKind)
      ? (body.kind as CollectiveErrorKind)
      : 'protocol';
    // 'aborted' describes the sender's own situation; to us its leaving is a closed peer.
    const kind = claimed === 'aborted' ? 'peer_closed' : claimed;
    const message = typeof body.message === 'string' ? body.message : '(no message)';
    this.fail(
      new CollectiveError(kind, `${this.label}: ${link.peer} gave up: ${message}`, {
        peer: typeof body.peer === 'string' ? body.peer : link.peer,
        collective: this.label,
      }),
    );
  }

  private cleanUp(): void {
    for (const route of this.routes) route.close();
    this.routes.length = 0;
    for (const sender of this.senders.values()) sender.dispose();
    this.senders.clear();
    for (const cleanup of this.cleanups) cleanup();
    this.cleanups.length = 0;
  }
}
