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
import { sha256Digest } from '../../core/state/hash';

export interface BroadcastOptions extends CollectiveOptions {
  /** Hash of the state bytes, the same function on root and receivers (the project's is `hashBytes`). */
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
const DEFAULT_MAX_BROADCAST_BYTES = 1024 * 1024 * 1024;
/** Bytes of one block digest in the manifest (SHA-256). */
const DIGEST_BYTES = 32;
/** Begin payload before the root's hash: float64 total, uint32 chunk bytes, uint32 chunks per block, uint16 hash length. */
const BEGIN_FIXED_BYTES = 18;
/** Room for the root's hash text in a Begin frame. */
const MAX_ROOT_HASH_BYTES = 128;

/**
 * Chunks per manifest block for a broadcast of `count` chunks: 1 while every chunk's digest fits the
 * Begin frame (states up to about 8 MB in 16-kB frames), else as few as make the manifest fit.
 */
export function blockChunksFor(count: number, frameBytes = DEFAULT_FRAME_BYTES): number {
  const room = Math.floor((frameBytes - FRAME_HEADER_BYTES - BEGIN_FIXED_BYTES - MAX_ROOT_HASH_BYTES) / DIGEST_BYTES);
  return Math.max(1, Math.ceil(count / Math.max(1, room)));
}

/** The manifest: SHA-256 of each block of `blockChunks` chunks of `chunkBytes` of `bytes`, concatenated. */
function manifestOf(bytes: Uint8Array, chunkBytes: number, blockChunks: number): Uint8Array {
  const blockBytes = chunkBytes * blockChunks;
  const blocks = Math.ceil(bytes.length / blockBytes);
  const out = new Uint8Array(blocks * DIGEST_BYTES);
  for (let b = 0; b < blocks; b++)
    out.set(
      sha256Digest(bytes.subarray(b * blockBytes, Math.min(bytes.length, (b + 1) * blockBytes))),
      b * DIGEST_BYTES,
    );
  return out;
}

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
    session.listen(link, (frame) => {
      if (frame.kind !== FrameKind.BroadcastAck)
        throw new FrameError(`unexpected frame kind ${frame.kind} from a broadcast receiver`);
      const payload = payloadBytes(frame);
      if (payload.length < 1) throw new FrameError('empty broadcast ack');
      const theirs = decodeUtf8(payload.subarray(1));
      if (payload[0] !== 1) {
        throw new CollectiveError(
          'hash_mismatch',
          `${session.label}: ${link.peer} received bytes hashing to ${theirs}, sent ${hash}`,
          { peer: link.peer },
        );
      }
      waitingForAck.delete(link);
      if (waitingForAck.size === 0) session.succeed();
    });
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
 * A Begin frame's payload (little-endian): float64 total bytes, uint32 chunk size, uint32 chunks per
 * block, uint16 length of the root's hash, the root's hash in UTF-8, then the manifest (one SHA-256 per block).
 */
function beginPayload(
  total: number,
  chunkBytes: number,
  blockChunks: number,
  hash: string,
  manifest: Uint8Array,
): Uint8Array {
  const hashBytes = encodeUtf8(hash);
  if (hashBytes.length > MAX_ROOT_HASH_BYTES) throw new RangeError(`broadcast: a hash of ${hashBytes.length} bytes`);
  const out = new Uint8Array(BEGIN_FIXED_BYTES + hashBytes.length + manifest.length);
  const head = new DataView(out.buffer);
  head.setFloat64(0, total, true);
  head.setUint32(8, chunkBytes, true);
  head.setUint32(12, blockChunks, true);
  head.setUint16(16, hashBytes.length, true);
  out.set(hashBytes, BEGIN_FIXED_BYTES);
  out.set(manifest, BEGIN_FIXED_BYTES + hashBytes.length);
  return out;
}

/** Receiver side: the root's buffer, after its hash was verified. */
export async function broadcastReceive(root: Link, opts: BroadcastOptions): Promise<ArrayBuffer> {
  assertValidCollectiveId(opts.id);
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_BROADCAST_BYTES;
  const session = new CollectiveSession('broadcast', opts);
  session.timeoutPeer = () => root.peer;
  const assembly = new ChunkAssembly(maxBytes, session.label, root.peer, opts.onProgress);
  let verifying = false;
  session.listen(root, (frame: Frame) => {
    if (verifying) throw new FrameError(`frame of kind ${frame.kind} after the last broadcast chunk`);
    assembly.take(frame);
    if (assembly.complete) {
      verifying = true;
      verifyAndAcknowledge(session, root, opts, assembly.bytes!, assembly.rootHash, () => session.succeed());
    }
  });
  await session.done;
  return assembly.bytes!.buffer as ArrayBuffer;
}

/**
 * A receiver that relays: receives the broadcast from `left` like `broadcastReceive` and sends it on to
 * `right` as it comes, the Begin frame as the root sent it and each chunk once its block matched the
 * manifest. Resolves with the bytes when its own copy verified (acknowledged to the left) and `right`
 * acknowledged a verified copy; fails if either does not happen (`right`'s failure names `right`).
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
  const assembly = new ChunkAssembly(maxBytes, session.label, left.peer, opts.onProgress, {
    begin: (frame) => {
      const copy = frame.buffer.slice(0, FRAME_HEADER_BYTES + frame.payloadLength);
      sender.enqueue(() => copy);
    },
    block: (first, end, count) =>
      sender.enqueueRange(first, end, (i) => {
        const start = i * assembly.chunkBytes;
        const bytes = assembly.bytes!.subarray(start, Math.min(start + assembly.chunkBytes, assembly.bytes!.length));
        return encodeFrame(header(FrameKind.BroadcastChunk, opts, i, count), bytes);
      }),
  });
  session.listen(right, (frame) => {
    if (frame.kind !== FrameKind.BroadcastAck)
      throw new FrameError(`unexpected frame kind ${frame.kind} from a broadcast receiver`);
    const payload = payloadBytes(frame);
    if (payload.length < 1) throw new FrameError('empty broadcast ack');
    if (payload[0] !== 1)
      throw new CollectiveError(
        'hash_mismatch',
        `${session.label}: ${right.peer} received bytes hashing to ${decodeUtf8(payload.subarray(1))} from this relay, sent ${assembly.rootHash}`,
        { peer: right.peer },
      );
    acknowledged = true;
    settle();
  });
  let verifying = false;
  session.listen(left, (frame: Frame) => {
    if (verifying) throw new FrameError(`frame of kind ${frame.kind} after the last broadcast chunk`);
    assembly.take(frame);
    if (assembly.complete) {
      verifying = true;
      verifyAndAcknowledge(session, left, opts, assembly.bytes!, assembly.rootHash, () => {
        verified = true;
        settle();
      });
    }
  });
  await session.done;
  return assembly.bytes!.buffer as ArrayBuffer;
}

/**
 * A receiver's broadcast in the making: the Begin frame's announcement, the chunks placed at their
 * indices in whatever order they come, and the chunks that came before the Begin frame. Throws
 * `FrameError`/`CollectiveError` for anything an honest root would not send.
 */
class ChunkAssembly {
  bytes: Uint8Array | null = null;
  rootHash = '';
  chunkBytes = 0;
  private count = 0;
  private blockChunks = 1;
  private manifest: Uint8Array = new Uint8Array(0);
  /** Chunks still missing per block. */
  private missing = new Uint32Array(0);
  private seen = new Uint8Array(0);
  private placed = 0;
  private received = 0;
  private early: Frame[] = [];
  private earlyBytes = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly label: string,
    private readonly peer: string,
    private readonly onProgress?: (doneBytes: number, totalBytes: number) => void,
    /** A relay's hooks: the Begin frame as received (before any chunk), and each block once it matched the manifest. */
    private readonly relay?: {
      begin(frame: Frame): void;
      block(firstChunk: number, endChunk: number, count: number): void;
    },
  ) {}

  get complete(): boolean {
    return this.bytes !== null && this.placed === this.count;
  }

  /** A frame from the sender: Begin or chunk; anything else is refused. */
  take(frame: Frame): void {
    if (frame.kind === FrameKind.BroadcastBegin) this.begin(frame);
    else if (frame.kind === FrameKind.BroadcastChunk) this.chunk(frame);
    else throw new FrameError(`unexpected frame kind ${frame.kind} during a broadcast`);
  }

  begin(frame: Frame): void {
    if (this.bytes) throw new FrameError('second broadcast Begin frame');
    const begin = parseBegin(frame, this.maxBytes, this.label, this.peer);
    this.rootHash = begin.rootHash;
    this.chunkBytes = begin.chunkBytes;
    this.count = begin.total === 0 ? 0 : Math.ceil(begin.total / begin.chunkBytes);
    if (begin.total > 0 && frame.chunkCount !== this.count)
      throw new FrameError(`broadcast Begin announces ${frame.chunkCount} chunks, ${this.count} by its sizes`);
    this.blockChunks = begin.blockChunks;
    const blocks = Math.ceil(this.count / this.blockChunks);
    if (begin.manifest.length !== blocks * DIGEST_BYTES)
      throw new FrameError(`broadcast manifest of ${begin.manifest.length} bytes for ${blocks} blocks`);
    this.manifest = begin.manifest;
    this.missing = new Uint32Array(blocks);
    for (let b = 0; b < blocks; b++)
      this.missing[b] = Math.min(this.count, (b + 1) * this.blockChunks) - b * this.blockChunks;
    this.bytes = new Uint8Array(begin.total);
    this.seen = new Uint8Array(this.count);
    this.relay?.begin(frame);
    this.onProgress?.(0, begin.total);
    for (const early of this.early.splice(0)) this.chunk(early);
    this.earlyBytes = 0;
  }

  /** Block `b` is whole: it must match its manifest digest (a mismatch names the sender), then a relay passes it on. */
  private blockDone(b: number): void {
    const first = b * this.blockChunks;
    const end = Math.min(this.count, first + this.blockChunks);
    const bytes = this.bytes!.subarray(first * this.chunkBytes, Math.min(this.bytes!.length, end * this.chunkBytes));
    const digest = sha256Digest(bytes);
    const expected = this.manifest.subarray(b * DIGEST_BYTES, (b + 1) * DIGEST_BYTES);
    if (!digest.every((x, i) => x === expected[i]))
      throw new CollectiveError(
        'hash_mismatch',
        `${this.label}: block ${b} from ${this.peer} does not match its manifest digest`,
        {
          peer: this.peer,
        },
      );
    this.relay?.block(first, end, this.count);
  }

  chunk(frame: Frame): void {
    if (!this.bytes) {
      this.earlyBytes += frame.payloadLength;
      if (this.earlyBytes > this.maxBytes)
        throw new FrameError(`${this.earlyBytes} bytes of broadcast chunks before their Begin frame`);
      this.early.push(frame);
      return;
    }
    const i = frame.chunkIndex;
    const start = i * this.chunkBytes;
    const length = Math.min(this.chunkBytes, this.bytes.length - start);
    if (frame.chunkCount !== this.count || i >= this.count)
      throw new FrameError(`broadcast chunk ${i}/${frame.chunkCount} of a broadcast of ${this.count} chunks`);
    if (this.seen[i]) throw new FrameError(`broadcast chunk ${i} arrived twice`);
    if (frame.payloadLength !== length)
      throw new FrameError(`broadcast chunk ${i} holds ${frame.payloadLength} bytes, ${length} expected`);
    this.bytes.set(payloadBytes(frame), start);
    this.seen[i] = 1;
    this.placed++;
    this.received += length;
    this.onProgress?.(this.received, this.bytes.length);
    const b = Math.floor(i / this.blockChunks);
    if (--this.missing[b] === 0) this.blockDone(b);
  }
}

/**
 * The announced length, chunk size, block size, root hash and manifest of a Begin frame from `peer`;
 * throws if it is malformed or over `maxBytes`.
 */
function parseBegin(
  frame: Frame,
  maxBytes: number,
  label: string,
  peer: string,
): { total: number; chunkBytes: number; blockChunks: number; rootHash: string; manifest: Uint8Array } {
  const payload = payloadBytes(frame);
  if (payload.length < BEGIN_FIXED_BYTES) throw new FrameError('broadcast Begin frame too short');
  const view = new DataView(frame.buffer, FRAME_HEADER_BYTES, BEGIN_FIXED_BYTES);
  const total = view.getFloat64(0, true);
  const chunkBytes = view.getUint32(8, true);
  const blockChunks = view.getUint32(12, true);
  const hashLength = view.getUint16(16, true);
  if (!Number.isInteger(total) || total < 0) throw new FrameError(`broadcast announces ${total} bytes`);
  if (chunkBytes < 1) throw new FrameError('broadcast announces chunks of 0 bytes');
  if (blockChunks < 1) throw new FrameError('broadcast announces blocks of 0 chunks');
  if (hashLength > MAX_ROOT_HASH_BYTES || BEGIN_FIXED_BYTES + hashLength > payload.length)
    throw new FrameError(`broadcast Begin frame announces a root hash of ${hashLength} bytes`);
  if (total > maxBytes)
    throw new CollectiveError(
      'protocol',
      `${label}: ${peer} announces ${total} bytes, more than the limit ${maxBytes}`,
      {
        peer,
      },
    );
  return {
    total,
    chunkBytes,
    blockChunks,
    rootHash: decodeUtf8(payload.subarray(BEGIN_FIXED_BYTES, BEGIN_FIXED_BYTES + hashLength)),
    // A copy: the frame's buffer may be handed on (a relay forwards it).
    manifest: payload.slice(BEGIN_FIXED_BYTES + hashLength),
  };
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
            `${session.label}: hashing the received state failed: ${(err as Error)?.message ?? err}`,
            { cause: err, collective: session.label },
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
