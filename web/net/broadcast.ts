/**
 * Broadcast of a byte buffer (the committed training state: parameters, optimizer moments, sampler
 * position — megabytes) from one root to one or more receivers, like Horovod's `state.sync()`.
 *
 * The root sends a Begin frame (total length, chunk size and its hash of the bytes), then the bytes in
 * chunks, paced per receiver. Frames may arrive in any order (a striped link reorders them; web/net/link.ts):
 * each receiver puts every chunk at its index, holds chunks that overtook the Begin frame (at most the
 * receiver's `maxBytes` of them), refuses a chunk seen twice or of the wrong length, hashes what arrived, and answers
 * with an Ack frame saying whether its hash matched (and the `expectedHash` it was told to expect,
 * if any). The root resolves only when every receiver has acknowledged a verified copy, so a
 * training loop knows the joiners really hold the state before it moves on.
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
  const begin = beginPayload(total, chunkBytes, hash);

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

/** A Begin frame's payload: float64 total bytes, uint32 chunk size (little-endian), the root's hash in UTF-8. */
function beginPayload(total: number, chunkBytes: number, hash: string): Uint8Array {
  const head = new DataView(new ArrayBuffer(12));
  head.setFloat64(0, total, true);
  head.setUint32(8, chunkBytes, true);
  return new Uint8Array([...new Uint8Array(head.buffer), ...encodeUtf8(hash)]);
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
    if (frame.kind === FrameKind.BroadcastBegin) assembly.begin(frame);
    else if (frame.kind === FrameKind.BroadcastChunk) assembly.chunk(frame);
    else throw new FrameError(`unexpected frame kind ${frame.kind} during a broadcast`);
    if (assembly.complete) {
      verifying = true;
      verifyAndAcknowledge(session, root, opts, assembly.bytes!, assembly.rootHash);
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
  private chunkBytes = 0;
  private count = 0;
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
  ) {}

  get complete(): boolean {
    return this.bytes !== null && this.placed === this.count;
  }

  begin(frame: Frame): void {
    if (this.bytes) throw new FrameError('second broadcast Begin frame');
    const begin = parseBegin(frame, this.maxBytes, this.label, this.peer);
    this.rootHash = begin.rootHash;
    this.chunkBytes = begin.chunkBytes;
    this.count = begin.total === 0 ? 0 : Math.ceil(begin.total / begin.chunkBytes);
    if (begin.total > 0 && frame.chunkCount !== this.count)
      throw new FrameError(`broadcast Begin announces ${frame.chunkCount} chunks, ${this.count} by its sizes`);
    this.bytes = new Uint8Array(begin.total);
    this.seen = new Uint8Array(this.count);
    this.onProgress?.(0, begin.total);
    for (const early of this.early.splice(0)) this.chunk(early);
    this.earlyBytes = 0;
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
  }
}

/** The announced length, chunk size and root hash of a Begin frame from `peer`; throws if it is malformed or over `maxBytes`. */
function parseBegin(
  frame: Frame,
  maxBytes: number,
  label: string,
  peer: string,
): { total: number; chunkBytes: number; rootHash: string } {
  const payload = payloadBytes(frame);
  if (payload.length < 12) throw new FrameError('broadcast Begin frame too short');
  const view = new DataView(frame.buffer, FRAME_HEADER_BYTES, 12);
  const total = view.getFloat64(0, true);
  const chunkBytes = view.getUint32(8, true);
  if (!Number.isInteger(total) || total < 0) throw new FrameError(`broadcast announces ${total} bytes`);
  if (chunkBytes < 1) throw new FrameError('broadcast announces chunks of 0 bytes');
  if (total > maxBytes)
    throw new CollectiveError(
      'protocol',
      `${label}: ${peer} announces ${total} bytes, more than the limit ${maxBytes}`,
      {
        peer,
      },
    );
  return { total, chunkBytes, rootHash: decodeUtf8(payload.subarray(12)) };
}

/** Hash the received `target` (asynchronously), acknowledge to the root, and settle `session` by the verdict. */
function verifyAndAcknowledge(
  session: CollectiveSession,
  root: Link,
  opts: BroadcastOptions,
  target: Uint8Array,
  rootHash: string,
): void {
  Promise.resolve()
    .then(() => opts.hash(target))
    .then(
      (ours) => acknowledge(session, root, opts, ours, rootHash),
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

/** Tell the root whether our hash `ours` matched, then succeed or fail `session` accordingly. */
function acknowledge(
  session: CollectiveSession,
  root: Link,
  opts: BroadcastOptions,
  ours: string,
  rootHash: string,
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
  if (ok) session.succeed();
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
