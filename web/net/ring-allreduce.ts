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
 * Int8 compression (`'int8'`, core/wire/int8-blocks.ts: blocks of 256 values with a float32 scale,
 * about a quarter of float32's bytes) works the same way: each reduce-scatter hop decodes what it
 * receives, adds its own float32 values and encodes the partial sum again; the owner encodes the final
 * sum once and replaces its own copy by the decoded value of those bytes. In the allgather the bytes
 * are forwarded as received rather than re-encoded from the decoded copy, and every rank decodes them
 * with the same function: no encoding work per hop, and identical bytes that do not rest on encoding
 * being idempotent on decoded blocks (it is, for every scale tried: test/unit/core/wire/int8-blocks.test.ts;
 * forwarding just makes that a non-question). Each of the size values
 * encoded along a segment's chain (size−1 partial sums, then the final sum) is off by at most half its
 * block's scale, so an element's error against the exact sum is at most about size·M/254, M being the
 * largest Σ_r|x_r| in its block (plus float32 roundings; blocks start at each chunk's start).
 * Int8 refuses a vector holding NaN, ±Infinity or a magnitude beyond 2^127 before sending anything
 * (`protocol`, and the neighbours are told): a non-finite pseudo-gradient is a bug or an attack. A
 * partial sum leaving ±2^127 fails the collective the same way at the hop where it happens.
 *
 * No error feedback here. Error feedback keeps each rank's compression residual (what rounding took
 * away) and adds it to the next call's input. That residual is per-rank state that would have to
 * follow the committed state through rollbacks, snapshots and joins, or a rolled-back outer step would
 * leave a residual computed from uncommitted work; and with the owner re-encoding partial sums, the
 * error is not even one rank's own. Per-block scaling keeps the relative error per block near 1/254 of
 * the block's largest value, which for pseudo-gradients is far below the noise of the inner steps. A
 * caller that wants error feedback can keep the residual itself, as committed state, around this call.
 *
 * Memory: frames are produced lazily by the paced sender, so a rank holds at most the frames in the
 * channel's buffer (high water) plus the frames a neighbour sent ahead (bounded by one segment). With
 * int8, allgather frames received and not yet passed on wait in the queue: at most the int8 bytes of
 * the vector, a quarter of its float32 size.
 */
import { ringSegmentStart } from '../../core/state/sketch';
import { CollectiveError } from './collective-error';
import { CollectiveSession, type CollectiveOptions } from './collective-session';
import { addFloat16Into, decodeFloat16Into, encodeFloat16, MAX_FINITE_SCALE_EXPONENT } from '../../core/wire/fp16';
import {
  addInt8BlocksInto,
  decodeInt8BlocksInto,
  encodeInt8Blocks,
  firstUnencodable,
  INT8_BLOCK_VALUES,
  INT8_SCALE_BYTES,
  Int8BlockError,
  int8BlocksBytes,
} from '../../core/wire/int8-blocks';
import {
  allocateFrame,
  assertValidCollectiveId,
  collectiveKey,
  FRAME_HEADER_BYTES,
  FrameError,
  FrameKind,
  PayloadEncoding,
  SCALE_EXPONENT_OFFSET,
  type CollectiveId,
  type Frame,
} from './framing';
import type { Link, Ring } from './link';

import { DEFAULT_CHUNK_ELEMENTS, DEFAULT_INT8_CHUNK_ELEMENTS, type WireCompression } from '../../core/wire/ring-sum';

// The wire formats' chunking lives with the codecs (core/wire/ring-sum.ts): the verifier uses it too.
export type { WireCompression } from '../../core/wire/ring-sum';
export { chunkElementsFor, DEFAULT_CHUNK_ELEMENTS, DEFAULT_INT8_CHUNK_ELEMENTS } from '../../core/wire/ring-sum';

export interface RingAllreduceOptions extends CollectiveOptions {
  /**
   * Elements per frame; must be the same on every rank. Default fills `DEFAULT_FRAME_BYTES` with
   * float32 (also for fp16, whose frames are then half full), or with whole int8 blocks for int8.
   */
  readonly chunkElements?: number;
  /**
   * Wire format of the chunks; must be the same on every rank. Default `'none'` (float32, exact
   * sums); `'fp16'` halves the bytes, `'int8'` quarters them (see the module comment).
   */
  readonly compression?: WireCompression;
  /**
   * Copies of what this rank sent and received in the reduce-scatter, as the values the frames decode
   * to, at their element positions (the rest untouched: pass zeroed arrays of `data.length`). The
   * coordinator checks each hop with sketches of them (coordinator/machine/verification.ts).
   */
  readonly record?: { readonly sent: Float32Array; readonly received: Float32Array };
  /**
   * A left neighbour that sends nothing at all for this long is judged hung (core/training/hang.ts):
   * the call fails then, blaming it, instead of at `timeoutMs`. Only the rank right after a hung one
   * fails this way (every live rank sends its first chunks at once), and its abort frames name the hung
   * rank to the others. Absent: only the deadline.
   */
  readonly silenceMs?: number;
}

/**
 * Sum `data` in place across the ranks of `ring`; resolves when this rank holds the full sum
 * (identical bytes on every rank) and has handed all its frames to the channel. Rejects with
 * `CollectiveError` when a link closes, a neighbour aborts, a frame is malformed, ranks disagree on
 * length/chunking/compression, `opts.signal` fires, or `opts.timeoutMs` passes. On rejection `data`
 * is partly reduced: callers restore their last committed state. Size 1 (or an empty vector) is a
 * no-op, except that a non-finite input (int8: or one beyond ±2^127) is refused at any size (the same
 * outcome in every world).
 */
export async function ringAllreduce(ring: Ring, data: Float32Array, opts: RingAllreduceOptions): Promise<void> {
  const { compression, chunkElements } = checkedCall(ring, opts);
  const { rank, size } = ring;
  if (size === 1 || data.length === 0) {
    const bad = firstUnsendable(data, compression);
    if (bad >= 0) throw unsendableError(`allreduce ${collectiveKey(opts.id)}`, data, bad, compression);
    return;
  }
  const left = ring.left;
  const right = ring.right;
  if (!left || !right) throw new RangeError(`ringAllreduce: a ring of size ${size} needs left and right links`);
  if (2 * (size - 1) > 0xffff) throw new RangeError(`ringAllreduce: size ${size} exceeds the frame's ring-step field`);

  const plan = new RingPlan(rank, size, data.length, chunkElements, compression);
  const scratch = compression === 'fp16' ? new Float32Array(chunkElements) : null;
  const session = new CollectiveSession('allreduce', opts);
  const seen = plan.arrivalMarks();
  let outstanding = seen.reduce((n, chunks) => n + chunks.length, 0);
  session.timeoutPeer = () => (outstanding > 0 ? left.peer : right.peer);

  const finishIfDone = () => {
    if (outstanding === 0 && out.idle) session.succeed();
  };
  const out = session.sender(right, finishIfDone);
  if (refuseUnencodable(session, [left, right], data, compression)) return session.done;
  const record = opts.record;
  if (record && (record.sent.length !== data.length || record.received.length !== data.length))
    throw new RangeError(`ringAllreduce: record arrays must have the data's ${data.length} elements`);
  const makeFrame = (g: number, c: number) => encodeRingChunk(plan, data, opts.id, g, c, scratch, record);

  let heard = false;
  const receive = (frame: Frame) => {
    heard = true;
    const g = checkRingChunk(plan, frame, seen, session.label, left.peer);
    const c = frame.chunkIndex;
    seen[g][c] = 1;
    applyRingChunk(plan, data, frame, record);
    outstanding--;
    if (g < plan.lastStep) {
      // int8 allgather: pass the owner's bytes on as they came (see the module comment).
      const forward = compression === 'int8' && g >= plan.reduceSteps;
      out.enqueue(forward ? () => forwardRingChunk(frame, g + 1) : () => makeFrame(g + 1, c));
    }
    finishIfDone();
  };

  out.enqueueRange(0, plan.chunkCount(plan.sentSegment(0)), (c) => makeFrame(0, c));
  session.listen(left, receive);
  if (opts.silenceMs !== undefined) session.watchSilence(opts.silenceMs, () => heard, left.peer);
  if (right !== left) refuseRightFrames(session, right);
  finishIfDone();
  return session.done;
}

/** Only the left neighbour sends data: any frame from the right one fails the collective. */
function refuseRightFrames(session: CollectiveSession, right: Link): void {
  session.listen(right, (frame) => {
    throw new FrameError(
      `${right.peer} (right neighbour) sent a frame of kind ${frame.kind}; only the left neighbour sends data`,
    );
  });
}

/** The call's wire format and chunking, after checking them, the id and the ring position (RangeError). */
function checkedCall(ring: Ring, opts: RingAllreduceOptions): { compression: WireCompression; chunkElements: number } {
  assertValidCollectiveId(opts.id);
  const { rank, size } = ring;
  if (!Number.isInteger(size) || size < 1 || !Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw new RangeError(`ringAllreduce: rank ${rank} of size ${size} is not a valid ring position`);
  }
  const compression = opts.compression ?? 'none';
  if (compression !== 'none' && compression !== 'fp16' && compression !== 'int8') {
    throw new RangeError(`ringAllreduce: unknown compression ${String(compression)}`);
  }
  const chunkElements =
    opts.chunkElements ?? (compression === 'int8' ? DEFAULT_INT8_CHUNK_ELEMENTS : DEFAULT_CHUNK_ELEMENTS);
  if (!Number.isInteger(chunkElements) || chunkElements < 1 || chunkElements > 0x3fff_ffff) {
    throw new RangeError(`ringAllreduce: chunkElements must be a positive integer, got ${chunkElements}`);
  }
  return { compression, chunkElements };
}

/**
 * Refuse (and tell both neighbours, so they fail now rather than at their deadline) a vector holding a
 * value that is not finite (int8: or beyond what its codec encodes), before anything is sent: a NaN
 * gradient or pseudo-gradient is a bug or an attack, and summed it would poison every rank alike.
 * Returns true when it refused.
 */
function refuseUnencodable(
  session: CollectiveSession,
  links: Link[],
  data: Float32Array,
  compression: WireCompression,
): boolean {
  const bad = firstUnsendable(data, compression);
  if (bad < 0) return false;
  // Listening (and ignoring data) marks the id as started on both links, as a normal call would, and
  // registers them for the abort frame.
  for (const link of new Set(links)) session.listen(link, () => {});
  session.fail(unsendableError(session.label, data, bad, compression));
  return true;
}

/** The first index this rank may not send (not finite; int8: also beyond ±2^127), or -1 (the grouped allreduce's check too). */
export function firstUnsendable(data: Float32Array, compression: WireCompression): number {
  if (compression === 'int8') return firstUnencodable(data);
  return firstNonFinite(data);
}

function firstNonFinite(data: Float32Array): number {
  for (let i = 0; i < data.length; i++) if (!Number.isFinite(data[i])) return i;
  return -1;
}

/** The refusal of an input holding an unsendable value at `bad`, before anything is sent. */
export function unsendableError(
  label: string,
  data: Float32Array,
  bad: number,
  compression: WireCompression,
): CollectiveError {
  const rule = compression === 'int8' ? 'a value that is not finite or beyond ±2^127' : 'a value that is not finite';
  return new CollectiveError(
    'protocol',
    `${label}: this rank's input holds ${data[bad]} at [${bad}]; the allreduce refuses to send ${rule}`,
    { collective: label },
  );
}

const ENCODINGS: Record<WireCompression, PayloadEncoding> = {
  none: PayloadEncoding.Float32,
  fp16: PayloadEncoding.Float16,
  int8: PayloadEncoding.Int8Blocks,
};

/** The segment and chunk geometry of one allreduce: pure arithmetic, the same on every rank. */
class RingPlan {
  readonly encoding: PayloadEncoding;
  /** Steps 0 … reduceSteps−1 reduce-scatter (add), the rest allgather (copy). */
  readonly reduceSteps: number;
  readonly lastStep: number;

  constructor(
    readonly rank: number,
    readonly size: number,
    readonly n: number,
    readonly chunkElements: number,
    readonly compression: WireCompression,
  ) {
    this.encoding = ENCODINGS[compression];
    this.reduceSteps = size - 1;
    this.lastStep = 2 * (size - 1) - 1;
  }

  /** Payload bytes of a chunk of `length` elements. */
  payloadBytes(length: number): number {
    if (this.compression === 'int8') return int8BlocksBytes(length);
    return length * (this.compression === 'fp16' ? 2 : 4);
  }

  private mod(x: number): number {
    return ((x % this.size) + this.size) % this.size;
  }

  /** The segments the step's sketches are laid out by (core/state/sketch.ts). */
  segmentStart(s: number): number {
    return ringSegmentStart(s, this.n, this.size);
  }

  segmentEnd(s: number): number {
    return ringSegmentStart(s + 1, this.n, this.size);
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

  /** Per ring step g, one mark per chunk of the segment received in g (0: not arrived yet). */
  arrivalMarks(): Uint8Array[] {
    return Array.from(
      { length: this.lastStep + 1 },
      (_, g) => new Uint8Array(this.chunkCount(this.receivedSegment(g))),
    );
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
  record?: RingAllreduceOptions['record'],
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
  const frame = allocateFrame(header, plan.payloadBytes(length));
  // What the receiver will decode, for the record of a reduce-scatter send.
  const sent = record && g < plan.reduceSteps ? record.sent.subarray(start, start + length) : null;
  if (plan.compression === 'int8') {
    const bytes = new Uint8Array(frame, FRAME_HEADER_BYTES);
    // Cannot throw: the input was checked up front and every partial sum by addInt8BlocksInto.
    encodeInt8Blocks(values, bytes);
    if (g === plan.reduceSteps) decodeInt8BlocksInto(bytes, values); // the owner keeps what it sends
    if (sent) decodeInt8BlocksInto(bytes, sent);
    return frame;
  }
  if (!scratch) {
    new Float32Array(frame, FRAME_HEADER_BYTES, length).set(values);
    sent?.set(values);
    return frame;
  }
  const halves = new Uint16Array(frame, FRAME_HEADER_BYTES, length);
  const scaleExponent = encodeFloat16(values, halves, scratch);
  new DataView(frame).setInt8(SCALE_EXPONENT_OFFSET, scaleExponent);
  // The owner's first allgather send carries the final sum: keep exactly what the others will decode.
  if (g === plan.reduceSteps) decodeFloat16Into(halves, scaleExponent, values);
  if (sent) decodeFloat16Into(halves, scaleExponent, sent);
  return frame;
}

/** The frame passing a received allgather chunk on at step `g`, its payload bytes unchanged. */
function forwardRingChunk(frame: Frame, g: number): ArrayBuffer {
  const forwarded = allocateFrame({ ...frame, ringStep: g }, frame.payloadLength);
  new Uint8Array(forwarded).set(
    new Uint8Array(frame.buffer, FRAME_HEADER_BYTES, frame.payloadLength),
    FRAME_HEADER_BYTES,
  );
  return forwarded;
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
  if (frame.chunkCount !== seen[g].length || c >= seen[g].length || frame.payloadLength !== plan.payloadBytes(length)) {
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
function applyRingChunk(
  plan: RingPlan,
  data: Float32Array,
  frame: Frame,
  record?: RingAllreduceOptions['record'],
): void {
  const g = frame.ringStep;
  const { start, length } = plan.chunk(plan.receivedSegment(g), frame.chunkIndex);
  const target = data.subarray(start, start + length);
  const received = record && g < plan.reduceSteps ? record.received.subarray(start, start + length) : null;
  if (plan.compression === 'int8') {
    const bytes = new Uint8Array(frame.buffer, FRAME_HEADER_BYTES, frame.payloadLength);
    try {
      if (received) decodeInt8BlocksInto(bytes, received);
      if (g < plan.reduceSteps) addInt8BlocksInto(bytes, target);
      else decodeInt8BlocksInto(bytes, target);
    } catch (err) {
      if (err instanceof Int8BlockError) throw new FrameError(`chunk ${frame.chunkIndex} at step ${g}: ${err.message}`);
      throw err;
    }
  } else if (plan.compression === 'fp16') {
    const e = frame.scaleExponent;
    // An honest encoder never scales by more than 2^113 (fp16.ts); the frame's byte allows up to 2^127.
    if (e > MAX_FINITE_SCALE_EXPONENT)
      throw new FrameError(`chunk ${frame.chunkIndex} at step ${g}: fp16 scale exponent ${e} out of range`);
    const halves = new Uint16Array(frame.buffer, FRAME_HEADER_BYTES, length);
    if (received) decodeFloat16Into(halves, e, received);
    if (g < plan.reduceSteps) addFloat16Into(halves, e, target);
    else decodeFloat16Into(halves, e, target);
  } else {
    const values = new Float32Array(frame.buffer, FRAME_HEADER_BYTES, length);
    received?.set(values);
    if (g < plan.reduceSteps) for (let i = 0; i < length; i++) target[i] += values[i];
    else target.set(values);
  }
  // Where they arrive: a NaN or ±Inf sent by the neighbour, or a sum it pushed out of range, fails
  // the collective naming that neighbour instead of reaching the optimizer (int8's decoder refuses
  // such bytes itself).
  if (plan.compression !== 'int8') {
    const bad = firstNonFinite(target);
    if (bad >= 0)
      throw new FrameError(
        `chunk ${frame.chunkIndex} at step ${g}: ${target[bad]} at [${start + bad}] after this chunk`,
      );
  }
}

/**
 * Payload bytes each rank sends (and receives) in one allreduce of `n` float32s: 2·(size−1)/size·n·b,
 * as in NCCL's bus bandwidth, with b = 4 (none), 2 (fp16) or 1 + 4/256 (int8: a byte per value and a
 * float32 scale per block of 256). Frame headers (32 bytes per frame) are left out, and so, for int8,
 * are the scales of the short blocks that end chunks of other than a multiple of 256 values (at most
 * 4 bytes per frame; none with the default chunking).
 */
export function ringAllreduceBusBytes(n: number, size: number, compression: WireCompression = 'none'): number {
  const bytesPerValue =
    compression === 'int8' ? 1 + INT8_SCALE_BYTES / INT8_BLOCK_VALUES : compression === 'fp16' ? 2 : 4;
  return size <= 1 ? 0 : (2 * (size - 1) * n * bytesPerValue) / size;
}
