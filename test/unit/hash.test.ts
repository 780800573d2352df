import { describe, expect, it } from 'vitest';
import { hashBytes, hashParams, hashWords, murmur3Words, xxh32Words } from '../../coordinator/core/hash';

/*
 * Independent slow references: byte-at-a-time, BigInt arithmetic mod 2^32, written from the
 * algorithms' descriptions (not from the word-wise Math.imul code under test). They also handle
 * tails, so they are checked against published vectors of odd-length strings.
 */
const M32 = (1n << 32n) - 1n;
const mul = (a: bigint, b: bigint) => (a * b) & M32;
const add = (a: bigint, b: bigint) => (a + b) & M32;
const rotl = (x: bigint, r: bigint) => ((x << r) | (x >> (32n - r))) & M32;
const word = (b: Uint8Array, i: number) =>
  BigInt(b[i]) | (BigInt(b[i + 1]) << 8n) | (BigInt(b[i + 2]) << 16n) | (BigInt(b[i + 3]) << 24n);

function murmur3Reference(bytes: Uint8Array, seed: number): number {
  const c1 = 0xcc9e2d51n;
  const c2 = 0x1b873593n;
  let h = BigInt(seed >>> 0);
  const blocks = Math.floor(bytes.length / 4);
  for (let i = 0; i < blocks; i++) {
    let k = word(bytes, i * 4);
    k = mul(rotl(mul(k, c1), 15n), c2);
    h ^= k;
    h = add(mul(rotl(h, 13n), 5n), 0xe6546b64n);
  }
  let k = 0n;
  const tail = bytes.length & 3;
  for (let j = tail - 1; j >= 0; j--) k = (k << 8n) | BigInt(bytes[blocks * 4 + j]);
  if (tail > 0) h ^= mul(rotl(mul(k, c1), 15n), c2);
  h ^= BigInt(bytes.length);
  h ^= h >> 16n;
  h = mul(h, 0x85ebca6bn);
  h ^= h >> 13n;
  h = mul(h, 0xc2b2ae35n);
  h ^= h >> 16n;
  return Number(h);
}

function xxh32Reference(bytes: Uint8Array, seed: number): number {
  const [p1, p2, p3, p4, p5] = [2654435761n, 2246822519n, 3266489917n, 668265263n, 374761393n];
  const s = BigInt(seed >>> 0);
  let i = 0;
  let h: bigint;
  if (bytes.length >= 16) {
    const v = [add(add(s, p1), p2), add(s, p2), s, (s - p1) & M32];
    for (; i + 16 <= bytes.length; i += 16) {
      for (let lane = 0; lane < 4; lane++)
        v[lane] = mul(rotl(add(v[lane], mul(word(bytes, i + lane * 4), p2)), 13n), p1);
    }
    h = add(add(rotl(v[0], 1n), rotl(v[1], 7n)), add(rotl(v[2], 12n), rotl(v[3], 18n)));
  } else {
    h = add(s, p5);
  }
  h = add(h, BigInt(bytes.length));
  for (; i + 4 <= bytes.length; i += 4) h = mul(rotl(add(h, mul(word(bytes, i), p3)), 17n), p4);
  for (; i < bytes.length; i++) h = mul(rotl(add(h, mul(BigInt(bytes[i]), p5)), 11n), p1);
  h ^= h >> 15n;
  h = mul(h, p2);
  h ^= h >> 13n;
  h = mul(h, p3);
  h ^= h >> 16n;
  return Number(h);
}

const ascii = (s: string) => new TextEncoder().encode(s);
const bytesOf = (...b: number[]) => new Uint8Array(b);
const wordsOf = (b: Uint8Array) => new Uint32Array(b.slice().buffer);

function seededBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

describe('reference hashes reproduce published vectors', () => {
  it.each([
    ['', 0, 0],
    ['', 1, 0x514e28b7],
    ['', 0xffffffff, 0x81f16f39],
    [bytesOf(0xff, 0xff, 0xff, 0xff), 0, 0x76293b50],
    [bytesOf(0x21, 0x43, 0x65, 0x87), 0, 0xf55b516b],
    [bytesOf(0x21, 0x43, 0x65, 0x87), 0x5082edee, 0x2362f9de],
    [bytesOf(0, 0, 0, 0), 0, 0x2362f9de],
    ['Hello, world!', 1234, 0xfaf6cdb3],
    ['The quick brown fox jumps over the lazy dog', 0x9747b28c, 0x2fa826cd],
  ] as const)('murmur3(%j, seed %d) = %d', (input, seed, expected) => {
    expect(murmur3Reference(typeof input === 'string' ? ascii(input) : input, seed)).toBe(expected);
  });

  it.each([
    ['', 0, 0x02cc5d05],
    ['a', 0, 0x550d7456],
    ['abc', 0, 0x32d153ff],
    ['Nobody inspects the spammish repetition', 0, 0xe2293b2f],
  ] as const)('xxh32(%j, seed %d) = %d', (input, seed, expected) => {
    expect(xxh32Reference(ascii(input), seed)).toBe(expected);
  });
});

describe('hashWords', () => {
  it('equals the byte-wise references on word-multiple inputs of every length class', () => {
    for (const n of [0, 4, 8, 12, 16, 20, 28, 32, 36, 64, 100, 1024, 4100]) {
      const bytes = seededBytes(n, n + 7);
      const words = wordsOf(bytes);
      expect(murmur3Words(words), `murmur3 n=${n}`).toBe(murmur3Reference(bytes, 0));
      expect(xxh32Words(words), `xxh32 n=${n}`).toBe(xxh32Reference(bytes, 0));
      expect(hashWords(words)).toBe(
        murmur3Reference(bytes, 0).toString(16).padStart(8, '0') +
          xxh32Reference(bytes, 0).toString(16).padStart(8, '0'),
      );
    }
  });

  it('gives fixed values for fixed parameters (a stability vector across versions and platforms)', () => {
    // Computed once with the BigInt references above; a change means snapshots and reports from older
    // builds no longer verify.
    // Exactly representable values (no Math.sin, whose last bits may differ between engines).
    const params = Float32Array.from({ length: 1000 }, (_, i) => ((i * 37) % 97) / 64 - 0.75);
    const bytes = new Uint8Array(params.buffer);
    const expected =
      murmur3Reference(bytes, 0).toString(16).padStart(8, '0') + xxh32Reference(bytes, 0).toString(16).padStart(8, '0');
    expect(hashParams(params)).toBe(expected);
    expect(hashParams(params)).toBe('e8a3733966af47a0');
  });

  it('changes when any single bit of the parameters flips', () => {
    const params = Float32Array.from({ length: 257 }, (_, i) => (i % 7) - 3.5);
    const words = new Uint32Array(params.buffer);
    const base = hashParams(params);
    const seen = new Set([base]);
    for (let i = 0; i < words.length; i += 16) {
      for (let bit = 0; bit < 32; bit++) {
        words[i] ^= 1 << bit;
        const flipped = hashParams(params);
        words[i] ^= 1 << bit;
        expect(flipped, `word ${i} bit ${bit}`).not.toBe(base);
        seen.add(flipped);
      }
    }
    expect(hashParams(params)).toBe(base);
    // Every flipped variant hashed differently from every other, too.
    expect(seen.size).toBe(1 + Math.ceil(words.length / 16) * 32);
  });

  it('distinguishes +0 from -0 and trailing zeros (it hashes bytes and length, not values)', () => {
    expect(hashParams(new Float32Array([0]))).not.toBe(hashParams(new Float32Array([-0])));
    expect(hashParams(new Float32Array(3))).not.toBe(hashParams(new Float32Array(4)));
  });

  it('hashes views at unaligned byte offsets and rejects partial words', () => {
    const bytes = seededBytes(41, 3);
    const view = bytes.subarray(1, 41);
    expect(hashBytes(view)).toBe(hashWords(wordsOf(view)));
    expect(() => hashBytes(bytes.subarray(0, 6))).toThrow(/multiple of 4/);
  });

  it('hashes a CNN-sized parameter buffer (1 MB) in milliseconds', () => {
    // Speed note: about 2 ms per MB for both lanes on this machine (2 CPU cores, Node 20); the bound
    // is loose because the machine is shared with other test processes.
    const params = new Float32Array(1 << 18).map((_, i) => i * 1e-3);
    hashParams(params);
    const start = performance.now();
    for (let r = 0; r < 5; r++) hashParams(params);
    const msPerMb = (performance.now() - start) / 5;
    expect(msPerMb).toBeLessThan(50);
  });
});
