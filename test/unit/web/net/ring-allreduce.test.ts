import { describe, expect, it } from 'vitest';
import { CollectiveError } from '../../../../web/net/collective-error';
import { encodeFrame, FrameKind, PayloadEncoding } from '../../../../web/net/framing';
import { abortFrame } from '../../../../web/net/collective-session';
import { memoryRing, type MemoryLink } from '../../../../web/net/memory-link';
import type { Compression } from '../../../../core/training/job';
import type { WorldEntry } from '../../../../core/protocol/coordinator-messages';
import { failureReport } from '../../../../web/elastic/plan';
import { FRAME_HEADER_BYTES } from '../../../../web/net/framing';
import { int8BlocksBytes } from '../../../../core/wire/int8-blocks';
import {
  DEFAULT_CHUNK_ELEMENTS,
  DEFAULT_INT8_CHUNK_ELEMENTS,
  ringAllreduce,
  ringAllreduceBusBytes,
  type RingAllreduceOptions,
  type WireCompression,
} from '../../../../web/net/ring-allreduce';
import { mulberry32, randomArray } from '../../../support/rng';

type RingView = ReturnType<typeof memoryRing>['rings'][number];

function inputs(size: number, n: number, seed: number): Float32Array[] {
  const rand = mulberry32(seed);
  return Array.from({ length: size }, () => randomArray(rand, n, -1, 1));
}

/** The exact sum in float64, and Σ|x| per element (the scale of float32 rounding error). */
function float64Sum(xs: Float32Array[]): { sum: Float64Array; abs: Float64Array } {
  const n = xs[0].length;
  const sum = new Float64Array(n);
  const abs = new Float64Array(n);
  for (const x of xs)
    for (let i = 0; i < n; i++) {
      sum[i] += x[i];
      abs[i] += Math.abs(x[i]);
    }
  return { sum, abs };
}

/** Throws with the first mismatches when |got − sum| > relBound·Σ|x| (+ a denormal floor). */
function expectWithinBound(
  got: Float32Array,
  ref: { sum: Float64Array; abs: Float64Array },
  relBound: number,
  label: string,
): number {
  let worst = 0;
  const bad: string[] = [];
  for (let i = 0; i < got.length; i++) {
    const err = Math.abs(got[i] - ref.sum[i]);
    const bound = relBound * ref.abs[i] + 1e-30;
    worst = Math.max(worst, err / (ref.abs[i] || 1));
    if (!(err <= bound) && bad.length < 5)
      bad.push(`[${i}] got ${got[i]} sum ${ref.sum[i]} |err| ${err.toExponential(2)} > ${bound.toExponential(2)}`);
  }
  if (bad.length) expect.fail(`${label}: outside ${relBound.toExponential(2)}·Σ|x|:\n  ${bad.join('\n  ')}`);
  return worst;
}

function expectBitIdentical(results: Float32Array[], label: string): void {
  const first = new Uint32Array(results[0].buffer, results[0].byteOffset, results[0].length);
  for (let r = 1; r < results.length; r++) {
    const other = new Uint32Array(results[r].buffer, results[r].byteOffset, results[r].length);
    for (let i = 0; i < first.length; i++) {
      if (first[i] !== other[i])
        expect.fail(`${label}: rank ${r} differs from rank 0 at [${i}]: ${results[r][i]} vs ${results[0][i]}`);
    }
  }
}

async function allreduceAll(rings: RingView[], data: Float32Array[], opts: RingAllreduceOptions): Promise<void> {
  await Promise.all(rings.map((ring, r) => ringAllreduce(ring, data[r], opts)));
}

/** Every collective must reject, and must do so by `withinMs`; returns the errors and the slowest time. */
async function expectAllReject(
  promises: Promise<unknown>[],
  withinMs: number,
): Promise<{ errors: CollectiveError[]; slowestMs: number }> {
  const t0 = performance.now();
  let slowest = 0;
  const errors = await Promise.all(
    promises.map((p) =>
      p.then(
        () => expect.fail('the collective resolved, it should have rejected'),
        (err: unknown) => {
          slowest = Math.max(slowest, performance.now() - t0);
          expect(err).toBeInstanceOf(CollectiveError);
          return err as CollectiveError;
        },
      ),
    ),
  );
  expect(slowest).toBeLessThan(withinMs);
  return { errors, slowestMs: slowest };
}

function expectListenersReleased(links: [MemoryLink, MemoryLink][]): void {
  for (const pair of links) {
    for (const link of pair) {
      if (!link.isOpen) continue;
      // What stays is the link's frame router, if a collective used the link: one message and one
      // close listener, for the link's life. Nothing per collective.
      const used = link.listenerCounts.message;
      expect(link.listenerCounts).toEqual({ message: used, close: used, bufferedAmountLow: 0 });
      expect(used).toBeLessThanOrEqual(1);
    }
  }
}

const id = (step: number, seq = 0) => ({ round: 1, step, seq });

describe('ringAllreduce over in-memory links', () => {
  const sizes = [1, 2, 3, 4, 5, 6];
  const lengths = [0, 1, 3, 1000, 100_003];
  const cases = sizes.flatMap((size) => lengths.map((n) => [size, n] as const));

  it.each(cases)('sums %i ranks × %i floats to the float64 sum, bit-identically on every rank', async (size, n) => {
    const { rings, links } = memoryRing(size);
    const data = inputs(size, n, 1000 * size + n);
    const ref = float64Sum(data);
    // Small chunks for the long vector so the pipeline really has many chunks in flight.
    await allreduceAll(rings, data, { id: id(1), timeoutMs: 10_000, chunkElements: n > 10_000 ? 4096 : 7 });
    // A chain of size−1 float32 additions: each rounding at most 2^-24 of the running |sum| ≤ Σ|x|.
    expectWithinBound(data[0], ref, size * 2 ** -24, `size ${size} n ${n}`);
    expectBitIdentical(data, `size ${size} n ${n}`);
    expectListenersReleased(links);
  });

  it('gets the same bytes whatever the delays and chunking (summation order is fixed by the ring)', async () => {
    const size = 4;
    const n = 5003;
    const original = inputs(size, n, 7);
    const runs: Float32Array[] = [];
    for (const [seed, chunkElements] of [
      [1, 5003],
      [2, 64],
      [3, 1],
    ] as const) {
      const rand = mulberry32(seed);
      const { rings } = memoryRing(size, { latencyMs: () => rand() * 2, bytesPerMs: 200_000 });
      const data = original.map((x) => x.slice());
      await allreduceAll(rings, data, { id: id(1), timeoutMs: 20_000, chunkElements });
      expectBitIdentical(data, `chunks of ${chunkElements}`);
      runs.push(data[0]);
    }
    // Chunking changes which frames carry which elements, never the order of additions per element.
    expectBitIdentical(runs, 'across runs');
  });

  it('paces the sender: the channel buffer stays near the high-water mark on a slow link', async () => {
    const size = 3;
    const n = 200_000;
    const { rings, links } = memoryRing(size, { bytesPerMs: 20_000, bufferedAmountLowThreshold: 16 * 1024 });
    const data = inputs(size, n, 3);
    const ref = float64Sum(data);
    const highWaterBytes = 64 * 1024;
    await allreduceAll(rings, data, { id: id(1), timeoutMs: 20_000, chunkElements: 2048, highWaterBytes });
    expectWithinBound(data[2], ref, size * 2 ** -24, 'paced');
    for (const [a] of links) {
      // At most one frame beyond high water (the check happens before each send).
      expect(a.peakBufferedAmount).toBeLessThanOrEqual(highWaterBytes + 2048 * 4 + 32);
      expect(a.bytesSent).toBeGreaterThan((2 * (size - 1) * n * 4) / size); // and it did send everything
    }
  });

  it('runs consecutive collectives on the same links, with a rank starting the next one early', async () => {
    const size = 3;
    const { rings } = memoryRing(size, { latencyMs: 1 });
    for (let step = 1; step <= 3; step++) {
      const data = inputs(size, 999, step);
      const ref = float64Sum(data);
      // Rank 2 starts late: its neighbours' first frames wait in its link router.
      await Promise.all(
        rings.map(async (ring, r) => {
          if (r === 2) await new Promise((resolve) => setTimeout(resolve, 15));
          await ringAllreduce(ring, data[r], { id: id(step), timeoutMs: 5000, chunkElements: 50 });
        }),
      );
      expectWithinBound(data[1], ref, size * 2 ** -24, `step ${step}`);
      expectBitIdentical(data, `step ${step}`);
    }
  });

  describe('fp16 wire compression', () => {
    it.each([2, 3, 5])('stays within its error bound of the float64 sum on %i ranks, bit-identically', async (size) => {
      const n = 20_011;
      const { rings } = memoryRing(size);
      const data = inputs(size, n, 40 + size);
      const exact = data.map((x) => x.slice());
      const ref = float64Sum(data);
      await allreduceAll(rings, data, { id: id(1), timeoutMs: 10_000, compression: 'fp16', chunkElements: 1000 });
      // size−1 partial sums and the final value each rounded to binary16 (2^-11 relative), plus float32 adds.
      const worst = expectWithinBound(data[0], ref, size * (2 ** -11 + 2 ** -24), `fp16 size ${size}`);
      expectBitIdentical(data, `fp16 size ${size}`);
      // The compression is real: the result is not the float32 one, and its error is of fp16's size.
      await allreduceAll(memoryRing(size).rings, exact, { id: id(1), timeoutMs: 10_000 });
      let differing = 0;
      for (let i = 0; i < n; i++) if (exact[0][i] !== data[0][i]) differing++;
      expect(differing).toBeGreaterThan(n / 2);
      expect(worst).toBeGreaterThan(2 ** -16);
    });

    it('keeps tiny and huge gradients (per-frame power-of-two scale, no fp16 overflow or underflow)', async () => {
      const size = 3;
      const n = 3000;
      const { rings } = memoryRing(size);
      const data = inputs(size, n, 5).map((x) => x.map((v, i) => v * (i < 1000 ? 1e-9 : i < 2000 ? 1 : 1e7)));
      const ref = float64Sum(data);
      await allreduceAll(rings, data, { id: id(1), timeoutMs: 10_000, compression: 'fp16', chunkElements: 1000 });
      expectWithinBound(data[1], ref, size * (2 ** -11 + 2 ** -24), 'fp16 wide range');
      expect(data[0].every(Number.isFinite)).toBe(true);
    });

    it('halves the bytes on the wire', async () => {
      const sent: number[] = [];
      for (const compression of ['none', 'fp16'] as const) {
        const { rings, links } = memoryRing(3);
        await allreduceAll(rings, inputs(3, 30_000, 1), { id: id(1), timeoutMs: 10_000, compression });
        sent.push(links.reduce((acc, [a]) => acc + a.bytesSent, 0));
      }
      expect(sent[1] / sent[0]).toBeGreaterThan(0.49);
      expect(sent[1] / sent[0]).toBeLessThan(0.52);
    });
  });

  describe('int8 wire compression', () => {
    // The job file's `sync.compression` is what the loop passes: tsc checks each value is a wire format.
    const fromJob = (compression: Compression): WireCompression => compression;

    /** Pseudo-gradient-like inputs: N(0, 1e-3²) by Box–Muller, 1 in 500 an outlier 100× larger. */
    function pseudoGradients(size: number, n: number, seed: number): Float32Array[] {
      const rand = mulberry32(seed);
      return Array.from({ length: size }, () => {
        const x = new Float32Array(n);
        for (let i = 0; i < n; i++) {
          const g = Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
          x[i] = g * 1e-3 * (rand() < 0.002 ? 100 : 1);
        }
        return x;
      });
    }

    /**
     * Per element: the largest Σ_r|x_r| over its int8 block (blocks of 256 from each chunk's start, chunks
     * from each segment's start, segments ⌊s·n/size⌋), recomputed here from the documented geometry.
     */
    function blockMaxOfAbsSums(abs: Float64Array, size: number, chunkElements: number): Float64Array {
      const n = abs.length;
      const out = new Float64Array(n);
      for (let s = 0; s < size; s++) {
        const segEnd = Math.floor(((s + 1) * n) / size);
        for (let chunk = Math.floor((s * n) / size); chunk < segEnd; chunk += chunkElements) {
          const chunkEnd = Math.min(segEnd, chunk + chunkElements);
          for (let block = chunk; block < chunkEnd; block += 256) {
            const blockEnd = Math.min(chunkEnd, block + 256);
            let m = 0;
            for (let i = block; i < blockEnd; i++) m = Math.max(m, abs[i]);
            out.fill(m, block, blockEnd);
          }
        }
      }
      return out;
    }

    /**
     * size values are encoded along each element's chain (size−1 partial sums, the final sum), each off
     * by at most half its block's scale ≈ M/254, M the block's largest Σ|x| (the partial sums can exceed
     * it by the errors so far: the (1 + size/127) factor), plus float32 roundings of the adds and decodes.
     */
    function expectWithinInt8Bound(got: Float32Array, data: Float32Array[], chunkElements: number, label: string) {
      const size = data.length;
      const ref = float64Sum(data);
      const blockMax = blockMaxOfAbsSums(ref.abs, size, chunkElements);
      let worst = 0;
      for (let i = 0; i < got.length; i++) {
        const err = Math.abs(got[i] - ref.sum[i]);
        const bound = size * (1 / 254 + 2 ** -22) * blockMax[i] * (1 + size / 127);
        if (!(err <= bound)) expect.fail(`${label} [${i}]: got ${got[i]}, sum ${ref.sum[i]}, |err| ${err} > ${bound}`);
        if (blockMax[i] > 0) worst = Math.max(worst, err / (blockMax[i] / 254));
      }
      return worst; // in units of half a block scale
    }

    const sizes = [2, 3, 4, 5];
    const lengths = [1, 255, 777, 20_011];
    const cases = sizes.flatMap((size) => lengths.map((n) => [size, n] as const));
    it.each(cases)(
      'sums %i ranks × %i values within its bound of the float64 sum, bit-identically',
      async (size, n) => {
        for (const chunkElements of [DEFAULT_INT8_CHUNK_ELEMENTS, 1000]) {
          const { rings, links } = memoryRing(size, { latencyMs: 0 });
          const data = pseudoGradients(size, n, 100 * size + n);
          const original = data.map((x) => x.slice());
          const opts = { id: id(1), timeoutMs: 10_000, compression: fromJob('int8'), chunkElements };
          await allreduceAll(rings, data, opts);
          expectBitIdentical(data, `int8 size ${size} n ${n} chunks ${chunkElements}`);
          const worst = expectWithinInt8Bound(data[0], original, chunkElements, `int8 size ${size} n ${n}`);
          // The rounding is real: on long vectors some element is off by a good part of half a scale.
          if (n > 10_000) expect(worst).toBeGreaterThan(0.5);
          expectListenersReleased(links);
        }
      },
    );

    it('gets the same bytes whatever the delays (a hop re-encodes only its own partial sums)', async () => {
      const size = 4;
      const original = pseudoGradients(size, 5003, 77);
      const runs: Float32Array[] = [];
      for (const seed of [1, 2]) {
        const rand = mulberry32(seed);
        const { rings } = memoryRing(size, { latencyMs: () => rand() * 2, bytesPerMs: 50_000 });
        const data = original.map((x) => x.slice());
        await allreduceAll(rings, data, { id: id(1), timeoutMs: 20_000, compression: 'int8', chunkElements: 600 });
        expectBitIdentical(data, `int8 delays seed ${seed}`);
        runs.push(data[0]);
      }
      expectBitIdentical(runs, 'int8 across runs');
    });

    it('hands the link about a quarter of float32: the bus bytes for int8 plus the frame headers', async () => {
      const n = 100_003;
      for (const size of [3, 4]) {
        const sent: Record<string, number[]> = {};
        for (const compression of ['none', 'int8'] as const) {
          const { rings } = memoryRing(size);
          await allreduceAll(rings, pseudoGradients(size, n, 5), { id: id(1), timeoutMs: 10_000, compression });
          sent[compression] = rings.map((ring) => ring.right?.bytesSent ?? 0);
        }
        // Frames per rank: 2·(size−1) steps, each a segment of ~n/size values in default chunks.
        const frames = 2 * (size - 1) * Math.ceil(n / size / DEFAULT_INT8_CHUNK_ELEMENTS);
        const predicted = ringAllreduceBusBytes(n, size, 'int8') + frames * FRAME_HEADER_BYTES;
        for (let r = 0; r < size; r++) {
          expect(sent.int8[r] / predicted).toBeGreaterThan(0.98);
          expect(sent.int8[r] / predicted).toBeLessThan(1.02);
          const ratio = sent.int8[r] / sent.none[r];
          expect(ratio).toBeGreaterThan(0.25);
          expect(ratio).toBeLessThan(0.26);
        }
      }
      // The formula itself: (1 + 4/256) bytes per value against 4.
      expect(ringAllreduceBusBytes(256_000, 4, 'int8') / ringAllreduceBusBytes(256_000, 4)).toBeCloseTo(
        1.015625 / 4,
        12,
      );
      expect(int8BlocksBytes(DEFAULT_INT8_CHUNK_ELEMENTS) + FRAME_HEADER_BYTES).toBeLessThanOrEqual(
        DEFAULT_CHUNK_ELEMENTS * 4 + FRAME_HEADER_BYTES,
      );
    });

    it.each([[['int8', 'none', 'int8']], [['int8', 'fp16']], [['fp16', 'int8', 'int8', 'int8']]] as const)(
      'ranks that disagree on compression (%j) reject with protocol',
      async (compressions) => {
        const { rings } = memoryRing(compressions.length);
        const data = pseudoGradients(compressions.length, 3000, 1);
        const { errors } = await expectAllReject(
          rings.map((ring, r) =>
            ringAllreduce(ring, data[r], { id: id(1), timeoutMs: 5000, compression: compressions[r] }),
          ),
          1000,
        );
        for (const err of errors) expect(err.kind).toBe('protocol');
      },
    );

    it.each([NaN, Infinity, -Infinity])(
      'a rank whose input holds %s sends nothing of it and every rank rejects with protocol',
      async (bad) => {
        const size = 4;
        const n = 100_000;
        const { rings, links } = memoryRing(size, { latencyMs: 1 });
        const data = pseudoGradients(size, n, 2);
        data[2][n - 5] = bad;
        const { errors } = await expectAllReject(
          rings.map((ring, r) => ringAllreduce(ring, data[r], { id: id(1), timeoutMs: 10_000, compression: 'int8' })),
          1000,
        );
        expect(errors[2].message).toMatch(/refuses to send/);
        for (const err of errors) expect(err.kind).toBe('protocol');
        for (const r of [1, 3]) expect(errors[r].peer).toBe('rank2'); // its neighbours name it
        // Rank 2 handed its links nothing but the abort frames (a data frame alone is ~16 KB).
        expect(links[2][0].bytesSent).toBeLessThan(1000);
        expect(links[1][1].bytesSent).toBeLessThan(1000);
        expectListenersReleased(links);
      },
    );

    it('a world of one refuses a non-finite input too, and leaves a finite one as it is', async () => {
      const { rings } = memoryRing(1);
      const data = new Float32Array([1e-3, NaN]);
      await expect(ringAllreduce(rings[0], data, { id: id(1), timeoutMs: 1000, compression: 'int8' })).rejects.toThrow(
        CollectiveError,
      );
      const finite = new Float32Array([1e-3, -2e-4]);
      await ringAllreduce(rings[0], finite, { id: id(2), timeoutMs: 1000, compression: 'int8' });
      expect([...finite]).toEqual([Math.fround(1e-3), Math.fround(-2e-4)]);
    });

    it('a partial sum leaving ±2^127 fails the collective instead of sending infinity', async () => {
      const { rings } = memoryRing(3);
      const data = [0, 1, 2].map(() => new Float32Array(600).fill(1e-3));
      for (const x of data) x[10] = 2 ** 126 * 0.9; // each fine alone, 2.7·2^126 together
      const { errors } = await expectAllReject(
        rings.map((ring, r) => ringAllreduce(ring, data[r], { id: id(1), timeoutMs: 5000, compression: 'int8' })),
        1000,
      );
      for (const err of errors) expect(err.kind).toBe('protocol');
      expect(errors.some((err) => /leaves ±2\^127/.test(err.message))).toBe(true);
    });

    it('a hostile int8 chunk (NaN scale) rejects with protocol naming its sender', async () => {
      const { rings, links } = memoryRing(3);
      const data = pseudoGradients(3, 100, 1);
      const opts = { id: id(1), timeoutMs: 5000, compression: 'int8' } as const;
      const p0 = ringAllreduce(rings[0], data[0], opts);
      const p1 = ringAllreduce(rings[1], data[1], opts);
      // Rank 2 is not running the collective; a well-framed chunk for rank 0 (segment 2, 34 values)
      // arrives from it, with a NaN scale.
      const payload = new Uint8Array(int8BlocksBytes(34));
      new DataView(payload.buffer).setFloat32(0, NaN, true);
      links[2][0].send(
        encodeFrame(
          {
            kind: FrameKind.RingChunk,
            id: id(1),
            ringStep: 0,
            encoding: PayloadEncoding.Int8Blocks,
            scaleExponent: 0,
            chunkIndex: 0,
            chunkCount: 1,
          },
          payload,
        ),
      );
      await expect(p0).rejects.toMatchObject({ kind: 'protocol', peer: 'rank2', message: /scale NaN/ });
      await expect(p1).rejects.toMatchObject({ kind: 'protocol' });
    });

    it.each(['none', 'fp16'] as const)(
      'float wires too (%s): a NaN input is refused before sending, and every rank rejects with protocol',
      async (compression) => {
        const { rings, links } = memoryRing(3, { latencyMs: 1 });
        const data = pseudoGradients(3, 50_000, 3);
        data[1][77] = Number.NaN;
        const { errors } = await expectAllReject(
          rings.map((ring, r) => ringAllreduce(ring, data[r], { id: id(1), timeoutMs: 10_000, compression })),
          1000,
        );
        expect(errors[1].message).toMatch(/refuses to send a value that is not finite/);
        for (const err of errors) expect(err.kind).toBe('protocol');
        expect(links[1][0].bytesSent).toBeLessThan(1000);
      },
    );

    it.each([
      [
        'a float32 NaN',
        PayloadEncoding.Float32,
        0,
        (p: Uint8Array) => new DataView(p.buffer).setFloat32(8, NaN, true),
        /NaN/,
      ],
      [
        'an fp16 infinity',
        PayloadEncoding.Float16,
        0,
        (p: Uint8Array) => new DataView(p.buffer).setUint16(4, 0x7c00, true),
        /Infinity/,
      ],
      [
        'an fp16 scale exponent no honest encoder sends',
        PayloadEncoding.Float16,
        120,
        () => undefined,
        /scale exponent 120 out of range/,
      ],
    ] as const)(
      'a hostile chunk carrying %s is refused where it arrives, naming its sender',
      async (_what, encoding, exponent, poison, message) => {
        const compression = encoding === PayloadEncoding.Float32 ? 'none' : 'fp16';
        const { rings, links } = memoryRing(3);
        const data = pseudoGradients(3, 100, 1);
        const opts = { id: id(1), timeoutMs: 5000, compression } as const;
        const p0 = ringAllreduce(rings[0], data[0], opts);
        const p1 = ringAllreduce(rings[1], data[1], opts);
        // Rank 2 does not run the collective; a well-framed chunk for rank 0 (segment 2, 34 values) arrives from it.
        const payload = new Uint8Array(34 * (encoding === PayloadEncoding.Float32 ? 4 : 2));
        poison(payload);
        links[2][0].send(
          encodeFrame(
            {
              kind: FrameKind.RingChunk,
              id: id(1),
              ringStep: 0,
              encoding,
              scaleExponent: exponent,
              chunkIndex: 0,
              chunkCount: 1,
            },
            payload,
          ),
        );
        await expect(p0).rejects.toMatchObject({ kind: 'protocol', peer: 'rank2', ...(message ? { message } : {}) });
        await expect(p1).rejects.toMatchObject({ kind: 'protocol' });
      },
    );

    it.each([3, 5])('a link closed mid-collective makes all %i ranks reject with peer_closed', async (size) => {
      const n = 1_000_000;
      const cutAfter = 100_000; // of the ~0.4 MB of int8 rank 1 sends
      const { rings, links } = memoryRing(size, {
        latencyMs: 1,
        linkOptions: (from) => (from === 1 ? { a: { closeAfterSentBytes: cutAfter } } : {}),
      });
      const data = pseudoGradients(size, n, 9);
      const { errors } = await expectAllReject(
        rings.map((ring, r) => ringAllreduce(ring, data[r], { id: id(1), timeoutMs: 10_000, compression: 'int8' })),
        1000,
      );
      expect(links[1][0].bytesSent).toBeGreaterThan(cutAfter);
      for (const err of errors) expect(err.kind).toBe('peer_closed');
      expect(errors[1].peer).toBe('rank2');
      expect(errors[2].peer).toBe('rank1');
      expectListenersReleased(links);
    });
  });

  describe('failures', () => {
    it.each([3, 4, 6])(
      'a link closed mid-collective makes all %i ranks reject with peer_closed, well before the deadline',
      async (size) => {
        const n = 300_000;
        const cutAfter = 200_000; // bytes from rank 1 to rank 2: a fraction of what it must send
        const { rings, links } = memoryRing(size, {
          latencyMs: 1,
          linkOptions: (from) => (from === 1 ? { a: { closeAfterSentBytes: cutAfter } } : {}),
        });
        const data = inputs(size, n, 9);
        const timeoutMs = 10_000;
        const { errors } = await expectAllReject(
          rings.map((ring, r) => ringAllreduce(ring, data[r], { id: id(1), timeoutMs, chunkElements: 2048 })),
          timeoutMs / 10,
        );
        expect(links[1][0].bytesSent).toBeGreaterThan(cutAfter); // the cut really happened mid-transfer
        for (const err of errors) expect(err.kind).toBe('peer_closed');
        // The two ends of the cut name each other; the others learn who failed from the abort frames.
        expect(errors[1].peer).toBe('rank2');
        expect(errors[2].peer).toBe('rank1');
        for (const err of errors) expect(['rank1', 'rank2']).toContain(err.peer);
        expectListenersReleased(links);
      },
    );

    it('a rank that never arrives makes the others reject with timeout at the deadline', async () => {
      const { rings, links } = memoryRing(3);
      const data = inputs(3, 1000, 1);
      const timeoutMs = 150;
      const t0 = performance.now();
      const { errors } = await expectAllReject(
        [
          ringAllreduce(rings[0], data[0], { id: id(1), timeoutMs }),
          ringAllreduce(rings[1], data[1], { id: id(1), timeoutMs }),
        ],
        timeoutMs + 500,
      );
      expect(performance.now() - t0).toBeGreaterThanOrEqual(timeoutMs - 5);
      for (const err of errors) expect(err.kind).toBe('timeout');
      expect(errors[0].peer).toBe('rank2'); // rank 0 waits on its left neighbour, the absent rank 2
      expectListenersReleased(links);
    });

    it('an AbortSignal rejects every rank with aborted', async () => {
      const { rings } = memoryRing(3, { latencyMs: 2 });
      const data = inputs(3, 100_000, 1);
      const controller = new AbortController();
      const promises = rings.map((ring, r) =>
        ringAllreduce(ring, data[r], {
          id: id(1),
          timeoutMs: 10_000,
          chunkElements: 1000,
          signal: r === 0 ? controller.signal : undefined,
        }),
      );
      setTimeout(() => controller.abort(new Error('round closed')), 5);
      const { errors } = await expectAllReject(promises, 1000);
      expect(errors[0].kind).toBe('aborted');
      // To the others, rank 0 left the collective.
      for (const err of errors.slice(1)) expect(err).toMatchObject({ kind: 'peer_closed', peer: 'rank0' });
    });

    it('a rank closing its own link (leaving) aborts locally and looks like a closed peer to the others', async () => {
      const { rings, links } = memoryRing(4, { latencyMs: 1 });
      const data = inputs(4, 100_000, 1);
      const promises = rings.map((ring, r) =>
        ringAllreduce(ring, data[r], { id: id(1), timeoutMs: 10_000, chunkElements: 1000 }),
      );
      setTimeout(() => links[2][0].close(), 5); // rank 2 closes its link to rank 3
      const { errors } = await expectAllReject(promises, 1000);
      expect(errors[2]).toMatchObject({ kind: 'aborted', peer: null });
      for (const r of [0, 1, 3]) expect(errors[r]).toMatchObject({ kind: 'peer_closed', peer: 'rank2' });
    });

    it('a link that is already closed rejects at once', async () => {
      const { rings, links } = memoryRing(3);
      links[0][0].close();
      await new Promise((resolve) => setTimeout(resolve, 1));
      await expect(
        ringAllreduce(rings[0], new Float32Array(10), { id: id(1), timeoutMs: 10_000 }),
      ).rejects.toMatchObject({ kind: 'peer_closed', peer: 'rank1' });
    });

    it('ranks that disagree on the length reject with protocol instead of mixing data', async () => {
      const { rings } = memoryRing(2);
      const { errors } = await expectAllReject(
        [
          ringAllreduce(rings[0], new Float32Array(100), { id: id(1), timeoutMs: 5000 }),
          ringAllreduce(rings[1], new Float32Array(101), { id: id(1), timeoutMs: 5000 }),
        ],
        1000,
      );
      for (const err of errors) expect(err.kind).toBe('protocol');
    });

    it('ranks that disagree on compression reject with protocol', async () => {
      const { rings } = memoryRing(3);
      const data = inputs(3, 100, 1);
      const { errors } = await expectAllReject(
        rings.map((ring, r) =>
          ringAllreduce(ring, data[r], { id: id(1), timeoutMs: 5000, compression: r === 1 ? 'fp16' : 'none' }),
        ),
        1000,
      );
      for (const err of errors) expect(err.kind).toBe('protocol');
    });

    it('a malformed frame rejects with protocol and names the sender', async () => {
      const { rings, links } = memoryRing(3);
      const data = inputs(3, 100, 1);
      const p0 = ringAllreduce(rings[0], data[0], { id: id(1), timeoutMs: 5000 });
      const p1 = ringAllreduce(rings[1], data[1], { id: id(1), timeoutMs: 5000 });
      // rank 2 is not running the collective; garbage arrives at rank 0 from it instead.
      links[2][0].send(
        new Uint8Array([
          1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30,
          31, 32,
        ]).buffer,
      );
      await expect(p0).rejects.toMatchObject({ kind: 'protocol', peer: 'rank2' });
      await expect(p1).rejects.toMatchObject({ kind: 'protocol' }); // told by rank 0's abort frame
    });

    it('late frames of a failed collective do not leak into the next one', async () => {
      const size = 3;
      const { rings } = memoryRing(size, { latencyMs: 1 });
      const first = inputs(size, 50_000, 1);
      const controller = new AbortController();
      const failed = rings.map((ring, r) =>
        ringAllreduce(ring, first[r], {
          id: id(1),
          timeoutMs: 5000,
          chunkElements: 500,
          signal: r === 1 ? controller.signal : undefined,
        }),
      );
      setTimeout(() => controller.abort(), 3);
      await Promise.allSettled(failed);
      const second = inputs(size, 50_000, 2);
      const ref = float64Sum(second);
      await allreduceAll(rings, second, { id: id(2), timeoutMs: 5000, chunkElements: 500 });
      expectWithinBound(second[0], ref, size * 2 ** -24, 'after a failed collective');
      expectBitIdentical(second, 'after a failed collective');
    });

    it('refuses an id that does not grow on a link', async () => {
      const { rings } = memoryRing(2);
      await allreduceAll(rings, inputs(2, 10, 1), { id: id(5), timeoutMs: 5000 });
      await expect(ringAllreduce(rings[0], new Float32Array(10), { id: id(4), timeoutMs: 5000 })).rejects.toMatchObject(
        { kind: 'protocol' },
      );
    });

    it('an error with no culprit is relayed as its sender giving up, not as bad data; one with no peer names its sender at fault', async () => {
      const { rings, links } = memoryRing(3);
      const world = [0, 1, 2].map((r) => ({ workerId: `w${r}`, peerId: `rank${r}` })) as unknown as WorldEntry[];
      const abort = (body: unknown, n: number) =>
        links[2][0].send(
          encodeFrame(
            {
              kind: FrameKind.Abort,
              id: id(n),
              ringStep: 0,
              encoding: PayloadEncoding.Bytes,
              scaleExponent: 0,
              chunkIndex: 0,
              chunkCount: 1,
            },
            new TextEncoder().encode(JSON.stringify(body)),
          ),
        );
      const failed = (n: number) =>
        ringAllreduce(rings[0], new Float32Array(10), { id: id(n), timeoutMs: 5000 }).catch((e: unknown) => e);
      // A grouped call that retried after it sealed knows no culprit: its own report names nobody, and the
      // neighbour that hears its abort reports it as having given up, with no evidence of bad data.
      const stalled = new CollectiveError('protocol', 'the group retried after it sealed', { unattributed: true });
      expect(failureReport(stalled, world, false)).toEqual({ reason: expect.any(String) });
      links[2][0].send(abortFrame(id(11), stalled));
      const heard = await failed(11);
      expect(heard).toMatchObject({ kind: 'peer_closed', peer: 'rank2' });
      expect(failureReport(heard, world, false)).toEqual({ reason: expect.any(String), peer: 'w2' });
      // No peer at all: the sender is the one at fault (a rank refusing its own non-finite input).
      abort({ kind: 'protocol', peer: null, message: 'refuses to send a value that is not finite' }, 13);
      expect(failureReport(await failed(13), world, false)).toEqual({
        reason: expect.any(String),
        peer: 'w2',
        evidence: 'bad_data',
      });
      // A named peer is the one charged.
      abort({ kind: 'protocol', peer: 'rank1', message: 'NaN from rank1' }, 14);
      expect(failureReport(await failed(14), world, false)).toEqual({
        reason: expect.any(String),
        peer: 'w1',
        evidence: 'bad_data',
      });
    });

    it('an abort frame for a collective not yet started fails it as soon as it starts', async () => {
      const { rings, links } = memoryRing(3);
      links[2][0].send(
        encodeFrame(
          {
            kind: FrameKind.Abort,
            id: id(9),
            ringStep: 0,
            encoding: PayloadEncoding.Bytes,
            scaleExponent: 0,
            chunkIndex: 0,
            chunkCount: 1,
          },
          new TextEncoder().encode(JSON.stringify({ kind: 'peer_closed', peer: 'rank7', message: 'gone' })),
        ),
      );
      await new Promise((resolve) => setTimeout(resolve, 5));
      await expect(ringAllreduce(rings[0], new Float32Array(10), { id: id(9), timeoutMs: 5000 })).rejects.toMatchObject(
        { kind: 'peer_closed', peer: 'rank7' },
      );
    });
  });
});
