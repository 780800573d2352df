/**
 * The one error type every collective rejects with, so a training loop can tell a lost peer (restore
 * and wait for the next round) from a bug (a protocol violation) without parsing messages.
 */

/**
 * - `peer_closed`: a data channel closed or a peer left the collective (it left, crashed, its own
 *   signal fired, or it gave up because *its* neighbour closed: aborts travel around the ring so every
 *   rank fails fast, not just the two next to the gap). `peer` names the one that left.
 * - `timeout`: the collective's deadline passed (a hung peer whose channel stays open).
 * - `protocol`: a malformed or unexpected frame, or ranks called the collective with different
 *   arguments (length, chunking, compression), or, with int8 compression, a value that must not be
 *   sent (a rank's non-finite input, or a partial sum beyond ±2^127): `peer` names the rank at fault
 *   where known.
 * - `hash_mismatch`: a broadcast arrived with bytes whose hash differs from the sender's.
 * - `aborted`: this rank gave up on its own: the caller's `AbortSignal` fired (e.g. the coordinator
 *   closed the round) or this side closed one of the links (the tab is leaving).
 */
export type CollectiveErrorKind = 'peer_closed' | 'timeout' | 'protocol' | 'hash_mismatch' | 'aborted';

export const COLLECTIVE_ERROR_KINDS: readonly CollectiveErrorKind[] = [
  'peer_closed',
  'timeout',
  'protocol',
  'hash_mismatch',
  'aborted',
];

export class CollectiveError extends Error {
  override readonly name = 'CollectiveError';
  /** What went wrong, as a closed set a caller can switch on. */
  readonly kind: CollectiveErrorKind;
  /** The peer involved (the one that closed, timed out, sent the bad frame), when known. */
  readonly peer: string | null;
  /** Which collective failed, e.g. `allreduce 3.17.0`. */
  readonly collective: string | null;
  /**
   * Nobody is known to be at fault, not even the rank that fails with it (a grouped call whose group
   * retried after it sealed with nobody new left out: web/net/group-call.ts). The abort telling the
   * neighbours says the rank gave up (`peer_closed`), not that it sent bad data (`abortFrame`): a rank that
   * refuses its own non-finite input is at fault, the honest rank that saw a stall is not.
   */
  readonly unattributed: boolean;

  constructor(
    kind: CollectiveErrorKind,
    message: string,
    opts: { peer?: string | null; collective?: string | null; cause?: unknown; unattributed?: boolean } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.kind = kind;
    this.peer = opts.peer ?? null;
    this.collective = opts.collective ?? null;
    this.unattributed = this.peer === null && opts.unattributed === true;
  }
}

export function isCollectiveError(err: unknown, kind?: CollectiveErrorKind): err is CollectiveError {
  return err instanceof CollectiveError && (kind === undefined || err.kind === kind);
}
