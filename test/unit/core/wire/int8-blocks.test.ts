import { describe, expect, it } from 'vitest';
import {
  addInt8BlocksInto,
  decodeInt8BlocksInto,
  encodeInt8Blocks,
  firstUnencodable,
  INT8_MAX_ABS,
  INT8_MIN_BLOCK_MAX,
  Int8BlockError,
  int8BlocksBytes,
} from '../../../../core/wire/int8-blocks';
import { mulberry32 } from '../../../support/rng';

/** Standard normal by Box–Muller, from the seeded generator. */
function gaussian(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

/** Pseudo-gradient-like values: N(0, sigma²) with 1 in 500 an outlier 100× larger. */
function pseudoGradient(rand: () => number, n: number, sigma = 1e-3): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = gaussian(rand) * sigma * (rand() < 0.002 ? 100 : 1);
  return out;
}

function encode(x: Float32Array): Uint8Array {
  const bytes = new Uint8Array(int8BlocksBytes(x.length));
  encodeInt8Blocks(x, bytes);
  return bytes;
}

function decode(bytes: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  decodeInt8BlocksInto(bytes, out);
  return out;
}

/**
 * Check the per-block bound against float64: |x − decoded| ≤ scale/2 + 2^-24·|decoded| (+ 2^-40·scale
 * for the float64 division), where scale is what the block's header says and must equal the
 * reference max|x|/127 in float32 (or 0 for a block below the flush threshold). Returns the largest
 * error as a fraction of its block's scale.
 */
function expectWithinBlockBound(x: Float32Array, bytes: Uint8Array, label: string): number {
  const back = decode(bytes, x.length);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let worst = 0;
  for (let start = 0, b = 0; start < x.length; start += 256, b++) {
    const end = Math.min(x.length, start + 256);
    let maxAbs = 0;
    for (let i = start; i < end; i++) maxAbs = Math.max(maxAbs, Math.abs(x[i]));
    const scale = view.getFloat32(b * 260, true);
    const wantScale = maxAbs < 127 * 2 ** -126 ? 0 : Math.fround(maxAbs / 127);
    if (scale !== wantScale) expect.fail(`${label} block ${b}: scale ${scale}, want ${wantScale}`);
    for (let i = start; i < end; i++) {
      const err = Math.abs(x[i] - back[i]);
      const bound = scale === 0 ? maxAbs : scale / 2 + 2 ** -24 * Math.abs(back[i]) + 2 ** -40 * scale;
      if (!(err <= bound)) expect.fail(`${label} [${i}]: ${x[i]} → ${back[i]}, |err| ${err} > ${bound}`);
      if (scale > 0) worst = Math.max(worst, err / scale);
    }
  }
  return worst;
}

describe('int8 block codec', () => {
  it('encodes a hand-worked block to the documented bytes (ties round toward +∞)', () => {
    const x = new Float32Array([127, -63.5, 0.5, -0.5, 1.5, 0, -127, 2.49]);
    const bytes = encode(x);
    expect(bytes.length).toBe(4 + 8);
    expect([...bytes.subarray(0, 4)]).toEqual([0x00, 0x00, 0x80, 0x3f]); // float32 1.0, little-endian
    expect([...new Int8Array(bytes.buffer, 4, 8)]).toEqual([127, -63, 1, 0, 2, 0, -127, 2]);
    expect([...decode(bytes, 8)]).toEqual([127, -63, 1, 0, 2, 0, -127, 2]);
  });

  it('lays out blocks of 256 with a float32 scale each, the last one shorter', () => {
    for (const [n, bytes] of [
      [0, 0],
      [1, 5],
      [255, 259],
      [256, 260],
      [257, 265],
      [3 * 256 + 7, 3 * 260 + 11],
    ] as const)
      expect(int8BlocksBytes(n)).toBe(bytes);
    const rand = mulberry32(3);
    const x = pseudoGradient(rand, 3 * 256 + 7);
    x[3 * 256 + 2] = 5e-2; // the short block's own maximum sets its scale
    const bytes = encode(x);
    expect(new DataView(bytes.buffer).getFloat32(3 * 260, true)).toBe(Math.fround(Math.fround(5e-2) / 127));
    expect(new Int8Array(bytes.buffer)[3 * 260 + 4 + 2]).toBe(127);
    expectWithinBlockBound(x, bytes, 'short last block');
  });

  it('stays within scale/2 per block of the float64 value, at every magnitude and length', () => {
    const rand = mulberry32(5);
    for (const sigma of [1e-3, 1e-30, 1, 1e30]) {
      for (const n of [1, 255, 256, 257, 10_007]) {
        const x = pseudoGradient(rand, n, sigma);
        const worst = expectWithinBlockBound(x, encode(x), `sigma ${sigma} n ${n}`);
        // The rounding is real: errors reach close to half a scale on long vectors.
        if (n > 1000) expect(worst).toBeGreaterThan(0.45);
      }
    }
  });

  it('stays within the bound for blocks of any magnitude across the float32 exponent range', () => {
    const rand = mulberry32(6);
    const x = new Float32Array(256 * 400);
    for (let b = 0; b < 400; b++) {
      const magnitude = 2 ** (-130 + Math.floor(rand() * 257)); // some below the flush threshold
      for (let i = b * 256; i < (b + 1) * 256; i++) x[i] = (rand() * 2 - 1) * magnitude;
    }
    // Decoding also checks the canonical form: every nonzero block holds a ±127.
    expectWithinBlockBound(x, encode(x), 'exponent range');
  });

  it('encodes its own decoded values to the same bytes (the scale survives the round trip)', () => {
    // The scale is fround(m/127) and the decoded maximum fround(127·scale): the round trip must give the
    // scale back for any block maximum m. Random float32 maxima across the whole range, and whole blocks.
    const rand = mulberry32(12);
    const bits = new Uint32Array(1);
    const asFloat = new Float32Array(bits.buffer);
    for (let i = 0; i < 300_000; i++) {
      bits[0] = ((1 + Math.floor(rand() * 253)) << 23) | Math.floor(rand() * 2 ** 23); // exponents 2^-126 … 2^126
      const scale = Math.fround(asFloat[0] / 127);
      if (asFloat[0] >= INT8_MIN_BLOCK_MAX && Math.fround(Math.fround(127 * scale) / 127) !== scale)
        expect.fail(`block maximum ${asFloat[0]}: scale ${scale} does not survive decode/encode`);
    }
    const x = pseudoGradient(rand, 100_000);
    const bytes = encode(x);
    const again = encode(decode(bytes, x.length));
    expect(again.length).toBe(bytes.length);
    expect(again.findIndex((b, i) => b !== bytes[i])).toBe(-1);
  });

  it('sends an all-zero block (and −0) as scale +0 and zeros', () => {
    const x = new Float32Array(300);
    x[0] = -0;
    x[299] = 1e-3;
    const bytes = encode(x);
    expect([...bytes.subarray(0, 260)].every((b) => b === 0)).toBe(true);
    const back = decode(bytes, 300);
    expect(back.subarray(0, 256).every((v) => Object.is(v, 0))).toBe(true);
    expect(back[299]).toBe(Math.fround(127 * Math.fround(Math.fround(1e-3) / 127)));
  });

  it('flushes a block whose largest value is below 127·2^-126 to zeros, and keeps one at the threshold', () => {
    const tiny = new Float32Array([1e-37, -1.4e-45, 3e-38]);
    expect(Math.max(...tiny.map(Math.abs))).toBeLessThan(INT8_MIN_BLOCK_MAX);
    expect([...decode(encode(tiny), 3)]).toEqual([0, 0, 0]);
    const edge = new Float32Array([Math.fround(INT8_MIN_BLOCK_MAX) * (1 + 2 ** -20), 1e-37]);
    const bytes = encode(edge);
    expect(new DataView(bytes.buffer).getFloat32(0, true)).toBeGreaterThanOrEqual(2 ** -126);
    expectWithinBlockBound(edge, bytes, 'threshold');
  });

  it('keeps a block with one huge outlier within its own bound, and its neighbours exact to theirs', () => {
    const rand = mulberry32(8);
    const x = pseudoGradient(rand, 768);
    x[300] = 1e3; // block 1
    const bytes = encode(x);
    const back = decode(bytes, 768);
    expectWithinBlockBound(x, bytes, 'outlier');
    expect(back[300]).toBe(Math.fround(127 * Math.fround(1000 / 127))); // the outlier itself is kept
    // Its block loses the small values (all round to 0 next to 1e3), the other blocks keep theirs.
    for (let i = 256; i < 512; i++) if (i !== 300) expect(back[i]).toBe(0);
    let maxOutside = 0;
    for (const i of [...Array(256).keys(), ...Array.from({ length: 256 }, (_, k) => 512 + k)])
      maxOutside = Math.max(maxOutside, Math.abs(x[i] - back[i]));
    expect(maxOutside).toBeLessThan(1e-4); // vs ~3.9 inside the outlier's block
  });

  it('encodes values up to ±2^127 with finite decoded values', () => {
    const x = new Float32Array([INT8_MAX_ABS, -INT8_MAX_ABS / 3, 1]);
    const back = decode(encode(x), 3);
    expect(back.every(Number.isFinite)).toBe(true);
    expectWithinBlockBound(x, encode(x), 'largest');
  });

  it.each([
    ['NaN', NaN],
    ['+Infinity', Infinity],
    ['-Infinity', -Infinity],
    ['a value beyond 2^127', -(2 ** 127) * 1.5],
  ])('refuses %s, writing nothing', (_name, bad) => {
    const x = new Float32Array(600).fill(0.5);
    x[517] = bad;
    expect(firstUnencodable(x)).toBe(517);
    const target = new Uint8Array(int8BlocksBytes(600)).fill(0xaa);
    expect(() => encodeInt8Blocks(x, target)).toThrow(Int8BlockError);
    expect(() => encodeInt8Blocks(x, target)).toThrow(/\[517\]/);
    expect(target.every((b) => b === 0xaa)).toBe(true);
  });

  it('refuses a target of the wrong size', () => {
    expect(() => encodeInt8Blocks(new Float32Array(10), new Uint8Array(13))).toThrow(Int8BlockError);
    expect(() => decodeInt8BlocksInto(new Uint8Array(15), new Float32Array(10))).toThrow(Int8BlockError);
  });

  it('adds decoded values with float32 rounding, the same as decode then add', () => {
    const rand = mulberry32(9);
    const x = pseudoGradient(rand, 1000);
    const own = pseudoGradient(rand, 1000);
    const bytes = encode(x);
    const want = decode(bytes, 1000).map((v, i) => Math.fround(own[i] + v));
    addInt8BlocksInto(bytes, own);
    expect(own).toEqual(want);
  });

  it('refuses a sum beyond ±2^127, changing nothing', () => {
    const bytes = encode(new Float32Array([1, 2 ** 126 * 1.5]));
    const target = new Float32Array([1, 2 ** 126]);
    expect(() => addInt8BlocksInto(bytes, target)).toThrow(/leaves ±2\^127/);
    expect([...target]).toEqual([1, 2 ** 126]);
  });
});

describe('int8 block decoding of hostile bytes', () => {
  /** A valid 2-block encoding (300 values) to corrupt. */
  function valid(): Uint8Array {
    const x = new Float32Array(300);
    for (let i = 0; i < 300; i++) x[i] = Math.sin(i) * 1e-3;
    return encode(x);
  }
  const corruptions: Array<[string, (b: Uint8Array, v: DataView) => void]> = [
    ['a NaN scale', (_b, v) => v.setFloat32(260, NaN, true)],
    ['an infinite scale', (_b, v) => v.setFloat32(0, Infinity, true)],
    ['a negative scale', (_b, v) => v.setFloat32(0, -1e-5, true)],
    [
      'a −0 scale',
      (b, v) => {
        v.setFloat32(0, -0, true);
        b.fill(0, 4, 260);
      },
    ],
    ['a subnormal scale', (_b, v) => v.setFloat32(0, 1e-40, true)],
    ['a scale beyond 2^127/127', (_b, v) => v.setFloat32(0, 2 ** 121, true)],
    [
      'a −128',
      (b) => {
        b[10] = 0x80;
      },
    ],
    ['a zero scale with nonzero values', (_b, v) => v.setFloat32(0, 0, true)],
    ['a scale whose block holds no ±127', (b) => b.set(new Int8Array(256).fill(3) as unknown as Uint8Array, 4)],
  ];
  it.each(corruptions)('refuses %s, leaving the target as it was', (_name, corrupt) => {
    const bytes = valid();
    corrupt(bytes, new DataView(bytes.buffer));
    for (const fn of [decodeInt8BlocksInto, addInt8BlocksInto]) {
      const target = new Float32Array(300).fill(7);
      expect(() => fn(bytes, target)).toThrow(Int8BlockError);
      expect(target.every((v) => v === 7)).toBe(true);
    }
  });

  it('accepts the uncorrupted bytes', () => {
    expect(decode(valid(), 300).some((v) => v !== 0)).toBe(true);
  });
});
