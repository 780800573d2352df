/**
 * The broadcast's Begin frame (what the root announces: length, chunk size, its hash of the bytes, and the
 * manifest, one SHA-256 per block of chunks) and a receiver's assembly of the chunks (web/net/broadcast.ts
 * says how the collective uses them). Everything a sender could put in a frame is checked here: an honest
 * root never trips these, a hostile or corrupted one gets a `FrameError` or `CollectiveError` naming it.
 */
import { sha256Digest } from '../../core/state/hash';
import { CollectiveError } from './collective-error';
import {
  DEFAULT_FRAME_BYTES,
  decodeUtf8,
  encodeUtf8,
  FRAME_HEADER_BYTES,
  FrameError,
  FrameKind,
  payloadBytes,
  type Frame,
} from './framing';

/** A receiver refuses a Begin frame announcing more than this by default. */
export const DEFAULT_MAX_BROADCAST_BYTES = 1024 * 1024 * 1024;
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
export function manifestOf(bytes: Uint8Array, chunkBytes: number, blockChunks: number): Uint8Array {
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

/**
 * A Begin frame's payload (little-endian): float64 total bytes, uint32 chunk size, uint32 chunks per
 * block, uint16 length of the root's hash, the root's hash in UTF-8, then the manifest (one SHA-256 per block).
 */
export function beginPayload(
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

/**
 * A receiver's broadcast in the making: the Begin frame's announcement, the chunks placed at their
 * indices in whatever order they come, and the chunks that came before the Begin frame. Throws
 * `FrameError`/`CollectiveError` for anything an honest root would not send.
 */
export class ChunkAssembly {
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
