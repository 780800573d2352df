import { describe, expect, it } from 'vitest';
import { CollectiveError } from '../../../../web/net/collective-error';
import { FrameRouter } from '../../../../web/net/frame-router';
import {
  allocateFrame,
  compareCollectiveIds,
  decodeFrame,
  encodeFrame,
  FRAME_HEADER_BYTES,
  FRAME_MAGIC,
  FRAME_VERSION,
  FrameError,
  FrameKind,
  PayloadEncoding,
  payloadBytes,
  type FrameHeader,
} from '../../../../web/net/framing';
import { memoryLinkPair } from '../../../../web/net/memory-link';

const base: FrameHeader = {
  kind: FrameKind.RingChunk,
  id: { round: 7, step: 123_456, seq: 2 },
  ringStep: 9,
  encoding: PayloadEncoding.Float32,
  scaleExponent: 0,
  chunkIndex: 3,
  chunkCount: 10,
};

/** Write a header by hand (independently of `allocateFrame`) so a layout bug cannot cancel itself out. */
function handMadeFrame(
  fields: Partial<{
    magic: number;
    version: number;
    kind: number;
    encoding: number;
    scale: number;
    index: number;
    count: number;
    lengthField: number;
  }>,
  payload: number,
): ArrayBuffer {
  const buf = new ArrayBuffer(FRAME_HEADER_BYTES + payload);
  const v = new DataView(buf);
  v.setUint16(0, fields.magic ?? FRAME_MAGIC, true);
  v.setUint8(2, fields.version ?? FRAME_VERSION);
  v.setUint8(3, fields.kind ?? FrameKind.RingChunk);
  v.setUint32(4, 1, true);
  v.setUint32(8, 2, true);
  v.setUint32(12, 3, true);
  v.setUint16(16, 0, true);
  v.setUint8(18, fields.encoding ?? PayloadEncoding.Float32);
  v.setInt8(19, fields.scale ?? 0);
  v.setUint32(20, fields.index ?? 0, true);
  v.setUint32(24, fields.count ?? 1, true);
  v.setUint32(28, fields.lengthField ?? payload, true);
  return buf;
}

describe('frame encoding', () => {
  it('round-trips every header field and the payload', () => {
    const payload = new Uint8Array(new Float32Array([1.5, -2, 3e-9]).buffer);
    const frame = decodeFrame(encodeFrame(base, payload));
    expect(frame).toMatchObject({ ...base, payloadLength: 12 });
    expect(new Float32Array(frame.buffer, FRAME_HEADER_BYTES, 3)).toEqual(new Float32Array([1.5, -2, 3e-9]));
  });

  it('round-trips extreme field values (u32 ids, u16 ring step, negative fp16 scale)', () => {
    const extreme: FrameHeader = {
      kind: FrameKind.Abort,
      id: { round: 0xffff_ffff, step: 0, seq: 0xffff_ffff },
      ringStep: 0xffff,
      encoding: PayloadEncoding.Float16,
      scaleExponent: -128,
      chunkIndex: 0xffff_fffe,
      chunkCount: 0xffff_ffff,
    };
    expect(decodeFrame(allocateFrame(extreme, 6))).toMatchObject({ ...extreme, payloadLength: 6 });
  });

  it('puts the fields where the documented layout says (little-endian)', () => {
    const v = new DataView(encodeFrame(base, new Uint8Array(8)));
    expect([v.getUint16(0, true), v.getUint8(2), v.getUint8(3)]).toEqual([0x5754, 1, FrameKind.RingChunk]);
    expect([v.getUint32(4, true), v.getUint32(8, true), v.getUint32(12, true), v.getUint16(16, true)]).toEqual([
      7, 123_456, 2, 9,
    ]);
    expect([v.getUint32(20, true), v.getUint32(24, true), v.getUint32(28, true)]).toEqual([3, 10, 8]);
  });

  it('keeps payloads 4-byte aligned so float32 views need no copy', () => {
    expect(FRAME_HEADER_BYTES % 4).toBe(0);
    expect(payloadBytes(decodeFrame(encodeFrame(base, new Uint8Array(4)))).byteOffset % 4).toBe(0);
  });

  it('refuses to build frames it would itself reject', () => {
    expect(() => allocateFrame({ ...base, chunkIndex: 10 }, 4)).toThrow(RangeError);
    expect(() => allocateFrame(base, 6)).toThrow(RangeError); // 1.5 float32s
  });

  it('accepts a hand-made valid frame', () => {
    expect(decodeFrame(handMadeFrame({}, 8)).payloadLength).toBe(8);
    // int8 blocks are whole bytes (4 + k for a block of k); the collective checks the exact length.
    expect(decodeFrame(handMadeFrame({ encoding: PayloadEncoding.Int8Blocks }, 5)).encoding).toBe(3);
  });

  const malformed: Array<[string, () => ArrayBuffer]> = [
    ['shorter than a header', () => new ArrayBuffer(FRAME_HEADER_BYTES - 1)],
    ['empty', () => new ArrayBuffer(0)],
    ['with a bad magic', () => handMadeFrame({ magic: 0x1234 }, 4)],
    ['of another protocol version', () => handMadeFrame({ version: 2 }, 4)],
    ['of an unknown kind', () => handMadeFrame({ kind: 99 }, 4)],
    ['of kind zero', () => handMadeFrame({ kind: 0 }, 4)],
    ['with an unknown encoding', () => handMadeFrame({ encoding: 7 }, 4)],
    ['whose length field exceeds the bytes', () => handMadeFrame({ lengthField: 8 }, 4)],
    ['whose length field is short of the bytes', () => handMadeFrame({ lengthField: 0 }, 4)],
    ['with chunk index = chunk count', () => handMadeFrame({ index: 5, count: 5 }, 4)],
    ['with a scale on a float32 payload', () => handMadeFrame({ scale: 3 }, 4)],
    [
      'with a scale exponent on an int8 payload',
      () => handMadeFrame({ encoding: PayloadEncoding.Int8Blocks, scale: 1 }, 5),
    ],
    ['with half a float32', () => handMadeFrame({}, 6)],
    ['with half a float16', () => handMadeFrame({ encoding: PayloadEncoding.Float16 }, 3)],
  ];
  it.each(malformed)('rejects a frame %s with FrameError', (_name, make) => {
    expect(() => decodeFrame(make())).toThrow(FrameError);
  });

  it('rejects something that is not an ArrayBuffer (a string from a misconfigured channel)', () => {
    expect(() => decodeFrame('hello' as unknown as ArrayBuffer)).toThrow(FrameError);
  });
});

describe('collective ids', () => {
  it('order by round, then step, then seq', () => {
    const ids = [
      { round: 2, step: 0, seq: 0 },
      { round: 1, step: 5, seq: 1 },
      { round: 1, step: 5, seq: 0 },
      { round: 1, step: 4, seq: 9 },
    ];
    const sorted = [...ids].sort(compareCollectiveIds);
    expect(sorted).toEqual([ids[3], ids[2], ids[1], ids[0]]);
  });
});

describe('frame router', () => {
  const frame = (step: number, bytes = 100) =>
    encodeFrame(
      {
        ...base,
        kind: FrameKind.BroadcastChunk,
        encoding: PayloadEncoding.Bytes,
        id: { round: 1, step, seq: 0 },
        chunkIndex: 0,
        chunkCount: 1,
      },
      new Uint8Array(bytes),
    );
  const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

  it('holds early frames for a collective until it starts, and drops those of older ones', async () => {
    const [a, b] = memoryLinkPair('a', 'b');
    const router = new FrameRouter(b);
    a.send(frame(1));
    a.send(frame(3));
    a.send(frame(2));
    await tick();
    const seen: number[] = [];
    router.open({ round: 1, step: 2, seq: 0 }, { onFrame: (f) => seen.push(f.id.step), onFailure: () => {} }).close();
    expect(seen).toEqual([2]);
    // Step 1 is older than the newest started (2): gone. Step 3 is still waiting.
    router.open({ round: 1, step: 3, seq: 0 }, { onFrame: (f) => seen.push(f.id.step), onFailure: () => {} }).close();
    expect(seen).toEqual([2, 3]);
    expect(() => router.open({ round: 1, step: 1, seq: 0 }, { onFrame: () => {}, onFailure: () => {} })).toThrow(
      CollectiveError,
    );
  });

  it('breaks the link with a protocol error when a peer floods frames for collectives not started', async () => {
    const [a, b] = memoryLinkPair('a', 'b');
    const router = new FrameRouter(b, 1000);
    for (let step = 1; step <= 20; step++) a.send(frame(step));
    await tick();
    expect(() => router.open({ round: 1, step: 21, seq: 0 }, { onFrame: () => {}, onFailure: () => {} })).toThrow(
      expect.objectContaining({ kind: 'protocol', peer: 'a' }),
    );
  });

  it('tells a running collective when its link closes, naming the peer', async () => {
    const [a, b] = memoryLinkPair('a', 'b');
    const router = new FrameRouter(b);
    const failures: CollectiveError[] = [];
    router.open({ round: 1, step: 1, seq: 0 }, { onFrame: () => {}, onFailure: (e) => failures.push(e) });
    a.close();
    await tick();
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ kind: 'peer_closed', peer: 'a' });
  });
});
