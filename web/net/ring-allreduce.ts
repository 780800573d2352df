/**
 * Ring allreduce (sum) over `Link`s, pipelined in chunks.
 *
 * The vector is cut into `size` contiguous segments. In 2·(size−1) ring steps every rank sends one
 * segment to its right neighbour and receives one from its left: during the first size−1 steps
 * (reduce-scatter) it adds what it receives, during the last size−1 (allgather) it copies. At step g
 * rank r sends segment (r − g) mod size and receives (r − g − 1) mod size, so what it receives at step
 * g is exactly what it sends at step g+1. Pipelining therefore falls out per chunk: as soon as chunk c
 * of step g has arrived and been added, chunk c of step g+1 is queued, and sending, receiving and
 * adding overlap across the whole ring instead of advancing in lock-step.
 *
 * Bit-identical results: each segment's final sum is computed once, by its owner (rank s − 1), as a
 * chain of float32 additions in ring order, and then copied verbatim to everyone. With fp16
 * compression the owner also replaces its own copy by the fp16-rounded value it sends, so every rank
 * still ends with the same bytes.
 *
 * Memory: frames are produced lazily by the paced sender, so a rank holds at most the frames in the
 * channel's buffer (high water) plus the frames a neighbour sent ahead (bounded by one segment).
 */
import { CollectiveError } from './collective-error';
import { CollectiveSession, type CollectiveOptions } from './collective-session';
import { addFloat16Into, decodeFloat16Into, encodeFloat16 } from './fp16';
import {
  allocateFrame,
  assertValidCollectiveId,
  DEFAULT_FRAME_BYTES,
  FRAME_HEADER_BYTES,
  FrameError,
  FrameKind,
  PayloadEncoding,
  type CollectiveId,
  type Frame,
} from './framing';
import type { Ring } from './link';

export type WireCompression = 'none' | 'fp16';

export interface RingAllreduceOptions extends CollectiveOptions {
  /** Elements per frame; must be the same on every rank. Default fills `DEFAULT_FRAME_BYTES` with float32. */
  readonly chunkElements?: number;
  /** Wire format of the chunks; must be the same on every rank. Default `'none'` (float32, exact sums). */
  readonly compression?: WireCompression;
}

export const DEFAULT_CHUNK_ELEMENTS = Math.floor((DEFAULT_FRAME_BYTES - FRAME_HEADER_BYTES) / 4);

/**
 * Sum `data` in place across the ranks of `ring`; resolves when this rank holds the full sum
 * (identical bytes on every rank) and has handed all its frames to the channel. Rejects with
 * `CollectiveError` when a link closes, a neighbour aborts, a frame is malformed, ranks disagree on
 * length/chunking/compression, `opts.signal` fires, or `opts.timeoutMs` passes. On rejection `data`
 * is partly reduced: callers restore their last committed state. Size 1 (or an empty vector) is a
 * no-op.
 */
export async function ringAllreduce(ring: Ring, data: Float32Array, opts: RingAllreduceOptions): Promise<void> {
  assertValidCollectiveId(opts.id);
  const { rank, size } = ring;
  if (!Number.isInteger(size) || size < 1 || !Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw new RangeError(`ringAllreduce: rank ${rank} of size ${size} is not a valid ring position`);
  }
  const chunkElements = opts.chunkElements ?? DEFAULT_CHUNK_ELEMENTS;
  if (!Number.isInteger(chunkElements) || chunkElements < 1 || chunkElements > 0x3fff_ffff) {
    throw new RangeError(`ringAllreduce: chunkElements must be a positive integer, got ${chunkElements}`);
  }
  if (size === 1 || data.length === 0) return;
  const left = ring.left;
  const right = ring.right;
  if (!left || !right) throw new RangeError(`ringAllreduce: a ring of size ${size} needs left and right links`);
  if (2 * (size - 1) > 0xffff) throw new RangeError(`ringAllreduce: size ${size} exceeds the frame's ring-step field`);

  const plan = new RingPlan(rank, size, data.length, chunkElements, opts.compression === 'fp16');
  const scratch = plan.fp16 ? new Float32Array(chunkElements) : null;
  const session = new CollectiveSession('allreduce', opts);
  let outstanding = 0;
  const seen: Uint8Array[] = [];
  for (let g = 0; g <= plan.lastStep; g++) {
    seen.push(new Uint8Array(plan.chunkCount(plan.receivedSegment(g))));
    outstanding += seen[g].length;
  }
  session.timeoutPeer = () => (outstanding > 0 ? left.peer : right.peer);

  const finishIfDone = () => {
    if (outstanding === 0 && out.idle) session.succeed();
  };
  const out = session.sender(right, finishIfDone);
  const makeFrame = (g: number, c: number) => encodeRingChunk(plan, data, opts.id, g, c, scratch);

  const receive = (frame: Frame) => {
    const g = checkRingChunk(plan, frame, seen, session.label, left.peer);
    const c = frame.chunkIndex;
    seen[g][c] = 1;
    applyRingChunk(plan, data, frame);
    outstanding--;
    if (g < plan.lastStep) out.enqueue(() => makeFrame(g + 1, c));
    finishIfDone();
  };

  out.enqueueRange(0, plan.chunkCount(plan.sentSegment(0)), (c) => makeFrame(0, c));
  session.listen(left, receive);
  if (right !== left) {
    session.listen(right, (frame) => {
      throw new FrameError(
        `${right.peer} (right neighbour) sent a frame of kind ${frame.kind}; only the left neighbour sends data`,
      );
    });
  }
  finishIfDone();
  return session.done;
}

/** The segment and chunk geometry of one allreduce: pure arithmetic, the same on every rank. */
class RingPlan {
  readonly encoding: PayloadEncoding;
  readonly elementBytes: number;
  /** Steps 0 … reduceSteps−1 reduce-scatter (add), the rest allgather (copy). */
  readonly reduceSteps: number;
  readonly lastStep: number;

  constructor(
    readonly rank: number,
    readonly size: number,
    readonly n: number,
    readonly chunkElements: number,
    readonly fp16: boolean,
  ) {
    this.encoding = fp16 ? PayloadEncoding.Float16 : PayloadEncoding.Float32;
    this.elementBytes = fp16 ? 2 : 4;
    this.reduceSteps = size - 1;
    this.lastStep = 2 * (size - 1) - 1;
  }

  private mod(x: number): number {
    return ((x % this.size) + this.size) % this.size;
  }

  segmentStart(s: number): number {
    return Math.floor((s * this.n) / this.size);
  }

  segmentEnd(s: number): number {
    return Math.floor(((s + 1) * this.n) / this.size);
  }

  chunkCount(s: number): number {
    return Math.ceil((this.segmentEnd(s) - this.segmentStart(s)) / this.chunkElements);
  }

  sentSegment(g: number): number {
    return this.mod(this.rank - g);
  }

  receivedSegment(g: number): number {
    return this.mod(this.rank - g - 1);
  }

  /** First element and element count of chunk `c` of segment `s`. */
  chunk(s: number, c: number): { start: number; length: number } {
    const start = this.segmentStart(s) + c * this.chunkElements;
    return { start, length: Math.min(this.chunkElements, this.segmentEnd(s) - start) };
  }
}

/** The frame carrying chunk `c` of what this rank sends at step `g`, read from `data`. */
function encodeRingChunk(
  plan: RingPlan,
  data: Float32Array,
  id: CollectiveId,
  g: number,
  c: number,
  scratch: Float32Array | null,
): ArrayBuffer {
  const s = plan.sentSegment(g);
  const { start, length } = plan.chunk(s, c);
  const header = {
    kind: FrameKind.RingChunk,
    id,
    ringStep: g,
    encoding: plan.encoding,
    scaleExponent: 0,
    chunkIndex: c,
    chunkCount: plan.chunkCount(s),
  };
  const values = data.subarray(start, start + length);
  const frame = allocateFrame(header, length * plan.elementBytes);
  if (!scratch) {
    new Float32Array(frame, FRAME_HEADER_BYTES, length).set(values);
    return frame;
  }
  const halves = new Uint16Array(frame, FRAME_HEADER_BYTES, length);
  const scaleExponent = encodeFloat16(values, halves, scratch);
  new DataView(frame).setInt8(19, scaleExponent);
  // The owner's first allgather send carries the final sum: keep exactly what the others will decode.
  if (g === plan.reduceSteps) decodeFloat16Into(halves, scaleExponent, values);
  return frame;
}

/**
 * Throw unless `frame` is a chunk this rank still expects from its left neighbour `peer` (right kind,
 * step, encoding and size, not seen before); returns its ring step.
 */
function checkRingChunk(plan: RingPlan, frame: Frame, seen: Uint8Array[], label: string, peer: string): number {
  if (frame.kind !== FrameKind.RingChunk) throw new FrameError(`unexpected frame kind ${frame.kind} during allreduce`);
  const g = frame.ringStep;
  const { lastStep, encoding } = plan;
  if (g > lastStep) throw new FrameError(`ring step ${g} beyond the last step ${lastStep} of a ring of ${plan.size}`);
  if (frame.encoding !== encoding) {
    throw new CollectiveError(
      'protocol',
      `${label}: ${peer} sends encoding ${frame.encoding}, this rank expects ${encoding} (compression differs between ranks)`,
      { peer },
    );
  }
  const c = frame.chunkIndex;
  const { length } = plan.chunk(plan.receivedSegment(g), c);
  if (
    frame.chunkCount !== seen[g].length ||
    c >= seen[g].length ||
    frame.payloadLength !== length * plan.elementBytes
  ) {
    throw new CollectiveError(
      'protocol',
      `${label}: chunk ${c}/${frame.chunkCount} of ${frame.payloadLength} bytes at step ${g} from ${peer} does not fit a vector of ${plan.n} elements in chunks of ${plan.chunkElements} (ranks disagree on length or chunking)`,
      { peer },
    );
  }
  if (seen[g][c]) throw new FrameError(`duplicate chunk ${c} at step ${g}`);
  return g;
}

/** Add (reduce-scatter) or copy (allgather) a checked chunk into its place in `data`. */
function applyRingChunk(plan: RingPlan, data: Float32Array, frame: Frame): void {
  const g = frame.ringStep;
  const { start, length } = plan.chunk(plan.receivedSegment(g), frame.chunkIndex);
  const target = data.subarray(start, start + length);
  if (plan.fp16) {
    const halves = new Uint16Array(frame.buffer, FRAME_HEADER_BYTES, length);
    if (g < plan.reduceSteps) addFloat16Into(halves, frame.scaleExponent, target);
    else decodeFloat16Into(halves, frame.scaleExponent, target);
  } else {
    const values = new Float32Array(frame.buffer, FRAME_HEADER_BYTES, length);
    if (g < plan.reduceSteps) for (let i = 0; i < length; i++) target[i] += values[i];
    else target.set(values);
  }
}

/** Bytes each rank sends (and receives) in one allreduce of `n` float32s: 2·(size−1)/size·n·4, as in NCCL's bus bandwidth. */
export function ringAllreduceBusBytes(n: number, size: number, compression: WireCompression = 'none'): number {
  return size <= 1 ? 0 : (2 * (size - 1) * n * (compression === 'fp16' ? 2 : 4)) / size;
}
