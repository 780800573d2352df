/**
 * Broadcast of a byte buffer (the committed training state: parameters, optimizer moments, sampler
 * position — megabytes) from one root to one or more receivers, like Horovod's `state.sync()`, and its
 * relay (`broadcastRelay`): a receiver that passes each verified block on to the next receiver while
 * the rest still arrives, so a chain of L receivers costs about one transfer, not L
 * (core/training/state-route.ts says who relays to whom).
 *
 * The root sends a Begin frame (total length, chunk size, its hash of the bytes, and the SHA-256 of every
 * block of `blockChunks` chunks: the manifest), then the bytes in chunks, paced per receiver. Frames may
 * arrive in any order (a striped link reorders them; web/net/link.ts): each receiver puts every chunk at
 * its index, holds chunks that overtook the Begin frame (at most the receiver's `maxBytes` of them),
 * refuses a chunk seen twice or of the wrong length, checks each block against the manifest as soon as
 * it is whole (a relay forwards only checked blocks, so a corrupted chunk is caught at the first honest
 * receiver after the one that corrupted it, which names its left neighbour), hashes what arrived, and
 * answers with an Ack frame saying whether its hash matched (and the `expectedHash` it was told to
 * expect, if any). The root resolves only when every receiver has acknowledged a verified copy, a relay
 * only when it verified its own copy and its receiver acknowledged, so a training loop knows the
 * joiners really hold the state before it moves on.
 */
import { CollectiveError } from './collective-error';
import { CollectiveSession, type CollectiveOptions } from './collective-session';
import {
  assertValidCollectiveId,
  decodeUtf8,
  DEFAULT_FRAME_BYTES,
  encodeFrame,
  encodeUtf8,
  FRAME_HEADER_BYTES,
  FrameError,
  FrameKind,
  PayloadEncoding,
  payloadBytes,
  type Frame,
  type FrameHeader,
} from './framing';
import type { Link } from './link';
import {
  beginPayload,
  blockChunksFor,
  ChunkAssembly,
  DEFAULT_MAX_BROADCAST_BYTES,
  manifestOf,
} from './broadcast-frames';

export interface BroadcastOptions extends CollectiveOptions {
  /**
   * Hash of the state bytes, computed alike on root and receivers (e.g. `hashBytes`). A root that knows
   * the hash of what it sends may return it without hashing; the state sync's receivers compute it by
   * restoring the snapshot (web/elastic/state-sync.ts).
   */
  readonly hash: (bytes: Uint8Array) => string | Promise<string>;
  /** Payload bytes per frame (root only). Default fills `DEFAULT_FRAME_BYTES`. */
  readonly chunkBytes?: number;
  /** Root: bytes handed to all links so far, of `size · receivers`. Receiver: bytes received, of `size`. */
  readonly onProgress?: (doneBytes: number, totalBytes: number) => void;
  /** Receiver: the hash it must get besides the root's own claim (e.g. the committed hash from the coordinator). */
  readonly expectedHash?: string;
  /** Receiver: refuse a Begin frame announcing more than this many bytes. Default 1 GiB. */
  readonly maxBytes?: number;
}

export const DEFAULT_BROADCAST_CHUNK_BYTES = DEFAULT_FRAME_BYTES - FRAME_HEADER_BYTES;

function header(kind: FrameKind, opts: CollectiveOptions, chunkIndex: number, chunkCount: number): FrameHeader {
  return { kind, id: opts.id, ringStep: 0, encoding: PayloadEncoding.Bytes, scaleExponent: 0, chunkIndex, chunkCount };
}

/**
 * Root side: send `buffer` to every receiver; resolves when all acknowledged a verified copy. The
 * caller must not modify `buffer` until then (chunks are read from it as the links drain).
 */
export async function broadcastSend(
  receivers: readonly Link[],
  buffer: ArrayBuffer,
  opts: BroadcastOptions,
): Promise<void> {
  assertValidCollectiveId(opts.id);
  const chunkBytes = opts.chunkBytes ?? DEFAULT_BROADCAST_CHUNK_BYTES;
  if (!Number.isInteger(chunkBytes) || chunkBytes < 1)
    throw new RangeError(`broadcast: chunkBytes must be a positive integer, got ${chunkBytes}`);
  if (new Set(receivers).size !== receivers.length) throw new RangeError('broadcast: the same link is listed twice');
  if (receivers.length === 0) return;
  const session = new CollectiveSession('broadcast', opts);
  const hash = await Promise.resolve(opts.hash(new Uint8Array(buffer))).catch((err: unknown) => {
    session.fail(
      new CollectiveError('protocol', `${session.label}: hashing the state failed: ${(err as Error)?.message ?? err}`, {
        cause: err,
      }),
    );
    return null;
  });
  if (hash === null) return session.done;

  const total = buffer.byteLength;
  const count = Math.ceil(total / chunkBytes);
  const waitingForAck = new Set(receivers);
  session.timeoutPeer = () => waitingForAck.values().next().value?.peer ?? null;
  let handedOver = 0;
  const blockChunks = blockChunksFor(count);
  const begin = beginPayload(
    total,
    chunkBytes,
    blockChunks,
    hash,
    manifestOf(new Uint8Array(buffer), chunkBytes, blockChunks),
  );

  for (const link of receivers) {
    const sender = session.sender(link);
    listenForAck(
      session,
      link,
      () => hash,
      () => {
        waitingForAck.delete(link);
        if (waitingForAck.size === 0) session.succeed();
      },
    );
    sender.enqueue(() => encodeFrame(header(FrameKind.BroadcastBegin, opts, 0, Math.max(count, 1)), begin));
    sender.enqueueRange(0, count, (i) => {
      const start = i * chunkBytes;
      const bytes = new Uint8Array(buffer, start, Math.min(chunkBytes, total - start));
      handedOver += bytes.length;
      opts.onProgress?.(handedOver, total * receivers.length);
      return encodeFrame(header(FrameKind.BroadcastChunk, opts, i, count), bytes);
    });
  }
  return session.done;
}

/**
 * The sender's side of `link`'s Ack frame: `acked` when its receiver verified a copy hashing to what was
 * sent; a `hash_mismatch` failure naming the receiver when it did not. `sentHash` is read when the Ack
 * comes (a relay learns it from the Begin frame, which comes first).
 */
function listenForAck(session: CollectiveSession, link: Link, sentHash: () => string, acked: () => void): void {
  session.listen(link, (frame) => {
    if (frame.kind !== FrameKind.BroadcastAck)
      throw new FrameError(`unexpected frame kind ${frame.kind} from a broadcast receiver`);
    const payload = payloadBytes(frame);
    if (payload.length < 1) throw new FrameError('empty broadcast ack');
    if (payload[0] !== 1) {
      throw new CollectiveError(
        'hash_mismatch',
        `${session.label}: ${link.peer} received bytes hashing to ${decodeUtf8(payload.subarray(1))}, sent ${sentHash()}`,
        { peer: link.peer },
      );
    }
    acked();
  });
}

/** Receiver side: the root's buffer, after its hash was verified. */
export async function broadcastReceive(root: Link, opts: BroadcastOptions): Promise<ArrayBuffer> {
  assertValidCollectiveId(opts.id);
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_BROADCAST_BYTES;
  const session = new CollectiveSession('broadcast', opts);
  session.timeoutPeer = () => root.peer;
  const assembly = new ChunkAssembly(maxBytes, session.label, root.peer, opts.onProgress);
  receiveInto(session, root, assembly, opts, () => session.succeed());
  await session.done;
  return assembly.bytes!.buffer as ArrayBuffer;
}

/**
 * Take the broadcast's frames from `sender` into `assembly`; once it is complete, hash it, acknowledge to
 * the sender, then `onVerified` (or fail the session).
 */
function receiveInto(
  session: CollectiveSession,
  sender: Link,
  assembly: ChunkAssembly,
  opts: BroadcastOptions,
  onVerified: () => void,
): void {
  let verifying = false;
  session.listen(sender, (frame: Frame) => {
    if (verifying) throw new FrameError(`frame of kind ${frame.kind} after the last broadcast chunk`);
    assembly.take(frame);
    if (assembly.complete) {
      verifying = true;
      verifyAndAcknowledge(session, sender, opts, assembly.bytes!, assembly.rootHash, onVerified);
    }
  });
}

/**
 * A receiver that relays: receives the broadcast from `left` like `broadcastReceive` and sends it on to
 * `right` as it comes, the Begin frame as the root sent it and each chunk once its block matched the
 * manifest, except the block that completes the copy: that one goes on only once this relay's own copy
 * verified (its hash and `expectedHash`). So nothing behind a relay ever completes a copy the relay
 * refused, and a receiver whose whole copy fails its check can name its left neighbour: that neighbour
 * either sent what it had verified itself (then it lied) or is the root. Resolves with the bytes when its
 * own copy verified (acknowledged to the left) and `right` acknowledged a verified copy; fails if either
 * does not happen (`right`'s failure names `right`).
 */
export async function broadcastRelay(left: Link, right: Link, opts: BroadcastOptions): Promise<ArrayBuffer> {
  assertValidCollectiveId(opts.id);
  if (left === right) throw new RangeError('broadcast relay: the left and right links are the same');
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_BROADCAST_BYTES;
  const session = new CollectiveSession('broadcast', opts);
  let verified = false;
  let acknowledged = false;
  const settle = () => {
    if (verified && acknowledged) session.succeed();
  };
  session.timeoutPeer = () => (verified ? right.peer : left.peer);
  const sender = session.sender(right);
  let lastBlock: (() => void) | null = null;
  const assembly = new ChunkAssembly(maxBytes, session.label, left.peer, opts.onProgress, {
    begin: (frame) => {
      const copy = frame.buffer.slice(0, FRAME_HEADER_BYTES + frame.payloadLength);
      sender.enqueue(() => copy);
    },
    block: (first, end, count) => {
      const forward = () =>
        sender.enqueueRange(first, end, (i) => {
          const start = i * assembly.chunkBytes;
          const bytes = assembly.bytes!.subarray(start, Math.min(start + assembly.chunkBytes, assembly.bytes!.length));
          return encodeFrame(header(FrameKind.BroadcastChunk, opts, i, count), bytes);
        });
      // The block that completes the copy waits for the verdict on the whole (see above).
      if (assembly.complete) lastBlock = forward;
      else forward();
    },
  });
  listenForAck(
    session,
    right,
    () => assembly.rootHash,
    () => {
      acknowledged = true;
      settle();
    },
  );
  receiveInto(session, left, assembly, opts, () => {
    verified = true;
    lastBlock?.();
    settle();
  });
  await session.done;
  return assembly.bytes!.buffer as ArrayBuffer;
}

/** Hash the received `target` (asynchronously), acknowledge to the sender, then `onVerified` or fail `session`. */
function verifyAndAcknowledge(
  session: CollectiveSession,
  root: Link,
  opts: BroadcastOptions,
  target: Uint8Array,
  rootHash: string,
  onVerified: () => void,
): void {
  Promise.resolve()
    .then(() => opts.hash(target))
    .then(
      (ours) => acknowledge(session, root, opts, ours, rootHash, onVerified),
      (err: unknown) =>
        session.fail(
          new CollectiveError(
            'protocol',
            `${session.label}: hashing the state from ${root.peer} failed: ${(err as Error)?.message ?? err}`,
            // Bytes the hash cannot read (a malformed snapshot) are the sender's: it verified its own copy.
            { cause: err, collective: session.label, peer: root.peer },
          ),
        ),
    );
}

/** Tell the sender whether our hash `ours` matched, then `onVerified` or fail `session`. */
function acknowledge(
  session: CollectiveSession,
  root: Link,
  opts: BroadcastOptions,
  ours: string,
  rootHash: string,
  onVerified: () => void,
): void {
  if (session.isSettled) return;
  const ok = ours === rootHash && (opts.expectedHash === undefined || ours === opts.expectedHash);
  const ack = encodeFrame(
    header(FrameKind.BroadcastAck, opts, 0, 1),
    new Uint8Array([ok ? 1 : 0, ...encodeUtf8(ours)]),
  );
  try {
    root.send(ack);
  } catch (err) {
    session.fail(
      new CollectiveError(
        'peer_closed',
        `${session.label}: acknowledging to ${root.peer} failed: ${(err as Error).message}`,
        { peer: root.peer },
      ),
    );
    return;
  }
  if (ok) onVerified();
  else {
    const expected =
      opts.expectedHash !== undefined && opts.expectedHash !== rootHash ? ` (expected ${opts.expectedHash})` : '';
    session.fail(
      new CollectiveError(
        'hash_mismatch',
        `${session.label}: bytes from ${root.peer} hash to ${ours}, root says ${rootHash}${expected}`,
        { peer: root.peer, collective: session.label },
      ),
    );
  }
}

/**
 * Either side of a broadcast: the root passes its receivers' links and the buffer; a receiver passes
 * `[linkToRoot]` and `null`. Resolves with the state (the root's own buffer on the root).
 */
export async function broadcast(
  links: readonly Link[],
  isRoot: boolean,
  buffer: ArrayBuffer | null,
  opts: BroadcastOptions,
): Promise<ArrayBuffer> {
  if (isRoot) {
    if (!buffer) throw new RangeError('broadcast: the root needs a buffer to send');
    await broadcastSend(links, buffer, opts);
    return buffer;
  }
  if (links.length !== 1)
    throw new RangeError(`broadcast: a receiver needs exactly one link (to the root), got ${links.length}`);
  return broadcastReceive(links[0], opts);
}
