import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  chunkDigestBytes,
  chunkDigests,
  hashBytes,
  hashParams,
  sha256Digest,
  stateHash,
  stepCountBytes,
  trainingStateHash,
  trainingStateHashOfDigests,
  treeHash,
  treeRoot,
} from '../../../core/state/hash';
import { nodeSha256 as nodeSha256Factory } from '../../../node/sha256';
import { hashSchema } from '../../../core/protocol/control-fields';
import { NO_HASH } from '../../../core/protocol/tab-messages';
import { chunkDigestsReference, treeHashReference } from '../../support/tree-hash-reference';

/*
 * Independent references: the published SHA-256 test vectors (FIPS 180-2 appendix B / NIST CAVS), and
 * Node's OpenSSL `createHash('sha256')` over the same bytes — not the `@noble/hashes` code under test.
 */
const nodeSha256 = (...parts: Uint8Array[]) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest('hex');
};
const bytesOf = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
const ascii = (s: string) => new TextEncoder().encode(s);

function seededBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

describe('hashBytes is SHA-256', () => {
  it.each([
    ['', 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'],
    ['abc', 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'],
    [
      'abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq',
      '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1',
    ],
  ])('matches the published vector for %j', (input, expected) => {
    expect(hashBytes(ascii(input))).toBe(expected);
  });

  it('matches the published vector for one million "a" (multi-block input)', () => {
    expect(hashBytes(new Uint8Array(1_000_000).fill(0x61))).toBe(
      'cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0',
    );
  });

  it('equals node:crypto on every length around the 64-byte block and padding boundaries', () => {
    for (const n of [1, 3, 4, 54, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4100]) {
      const bytes = seededBytes(n, n + 7);
      expect(hashBytes(bytes), `n=${n}`).toBe(nodeSha256(bytes));
      expect(hashBytes(bytes.buffer as ArrayBuffer), `n=${n} (ArrayBuffer)`).toBe(nodeSha256(bytes));
    }
  });

  it('hashes only the view: unaligned subarrays, a Node Buffer inside a pool, a Float32Array window', () => {
    const bytes = seededBytes(41, 3);
    expect(hashBytes(bytes.subarray(1, 41))).toBe(nodeSha256(bytes.subarray(1, 41)));
    expect(hashBytes(bytes.subarray(5, 11))).toBe(nodeSha256(bytes.subarray(5, 11)));
    const pooled = Buffer.from(bytes).subarray(2, 30);
    expect(hashBytes(pooled)).toBe(nodeSha256(pooled));
    const floats = Float32Array.from({ length: 10 }, (_, i) => i - 4.5);
    const window = floats.subarray(3, 7);
    expect(hashBytes(window)).toBe(nodeSha256(bytesOf(window)));
  });

  it('returns the 32-byte digest raw from sha256Digest and as 64 lower-case hex digits from hashBytes', () => {
    const bytes = seededBytes(77, 9);
    expect(Buffer.from(sha256Digest(bytes)).toString('hex')).toBe(hashBytes(bytes));
    expect(hashBytes(bytes)).toMatch(/^[0-9a-f]{64}$/);
    expect(hashSchema.safeParse(hashBytes(bytes)).success).toBe(true);
  });
});

describe('hashParams and stateHash: the tree of SHA-256', () => {
  it('hashParams is the tree hash of the float32 bytes, with a fixed value for fixed parameters', () => {
    // Exactly representable values (no Math.sin, whose last bits may differ between engines). A change
    // of the value means snapshots and reports from older builds no longer verify.
    const params = Float32Array.from({ length: 3000 }, (_, i) => ((i * 37) % 97) / 64 - 0.75);
    expect(hashParams(params)).toBe(treeHashReference(params));
    expect(hashParams(params)).toBe('6e248a85b392b00d6e25a5490bc60cbef3bf9606202d1610b5e86d1759d1e1b9');
  });

  it('equals the reference on every length around the chunk boundaries, and for no bytes', () => {
    for (const n of [0, 1, 4, 55, 56, 60, 64, 4092, 4095, 4096, 4097, 4100, 8192, 3 * 4096 + 12]) {
      const bytes = seededBytes(n, n + 3);
      expect(treeHash([bytes]), `n=${n}`).toBe(treeHashReference(bytes));
      expect(Buffer.from(chunkDigests(bytes)).equals(chunkDigestsReference(bytes)), `n=${n} digests`).toBe(true);
      expect(chunkDigests(bytes).length).toBe(chunkDigestBytes(n));
    }
    // The empty input has no chunks: the root covers the prefix alone.
    expect(chunkDigests(new Uint8Array(0)).length).toBe(0);
  });

  it('treeRoot of the chunk digests is the tree hash, and refuses digests of the wrong length', () => {
    const bytes = seededBytes(10_000, 11);
    const digests = chunkDigests(bytes);
    expect(treeRoot([{ byteLength: 10_000, digests }])).toBe(treeHash([bytes]));
    expect(() => treeRoot([{ byteLength: 12_289, digests }])).toThrow(/96 digest bytes for 12289 bytes, expected 128/);
    expect(() => treeRoot([{ byteLength: -1, digests: new Uint8Array(0) }])).toThrow(/not a byte length/);
  });

  it('is not the plain SHA-256 of the bytes, nor of the digests alone (domain and lengths bind it)', () => {
    const bytes = seededBytes(5000, 2);
    expect(treeHash([bytes])).not.toBe(hashBytes(bytes));
    expect(treeHash([bytes])).not.toBe(hashBytes(chunkDigests(bytes)));
    // A chunk-aligned cut moved between two parts keeps the digests but changes the lengths: a new root.
    const a = seededBytes(8192, 4);
    expect(treeHash([a.subarray(0, 4096), a.subarray(4096)])).not.toBe(treeHash([a, new Uint8Array(0)]));
    expect(treeHash([a.subarray(0, 4096), a.subarray(4096)])).not.toBe(treeHash([a]));
  });

  it('stateHash(params) is hashParams; stateHash(params, outer) is the tree hash of the two parts', () => {
    const params = Float32Array.from({ length: 1333 }, (_, i) => Math.fround(i / 7 - 20));
    const outer = Float32Array.from({ length: 1333 }, (_, i) => Math.fround(-i / 11));
    expect(stateHash(params)).toBe(hashParams(params));
    expect(stateHash(params, null)).toBe(hashParams(params));
    const both = stateHash(params, outer);
    expect(both).toBe(treeHashReference(params, outer));
    expect(both).not.toBe(treeHashReference(Buffer.concat([bytesOf(params), bytesOf(outer)])));
    expect(both).not.toBe(hashParams(params));
    // Views into one larger buffer hash as their own bytes only.
    const holder = new Float32Array(1 + 1333 + 1333 + 1);
    holder.set(params, 1);
    holder.set(outer, 1334);
    expect(stateHash(holder.subarray(1, 1334), holder.subarray(1334, 2667))).toBe(both);
    // The momentum is part of the committed state: one changed bit changes the hash.
    const changed = outer.slice();
    new Uint32Array(changed.buffer)[1200] ^= 1;
    expect(stateHash(params, changed)).not.toBe(both);
  });

  it('trainingStateHash is the tree hash of params, each moment and t as a u64: every section a restore uses', () => {
    const params = Float32Array.from({ length: 1500 }, (_, i) => Math.fround(i / 9 - 50));
    const m = params.map((x) => x / 10);
    const v = params.map((x) => x * x);
    const t = Buffer.alloc(8);
    t.writeBigUInt64LE(123n);
    const whole = trainingStateHash(params, [m, v], 123);
    expect(whole).toBe(treeHashReference(params, m, v, t));
    expect(Buffer.from(stepCountBytes(123)).equals(t)).toBe(true);
    // The same from chunk digests (the GPU path), and with node:crypto.
    expect(
      trainingStateHashOfDigests(
        params.byteLength,
        [params, m, v].map((x) => chunkDigests(x)),
        123,
      ),
    ).toBe(whole);
    expect(trainingStateHash(params, [m, v], 123, nodeSha256Factory)).toBe(whole);
    // A forged moment, a forged step count, or a moment missing is another state.
    const forged = m.slice();
    forged[7] += 1;
    expect(trainingStateHash(params, [forged, v], 123)).not.toBe(whole);
    expect(trainingStateHash(params, [m, v], 124)).not.toBe(whole);
    expect(trainingStateHash(params, [m], 123)).not.toBe(whole);
    expect(whole).not.toBe(hashParams(params));
    expect(() => stepCountBytes(-1)).toThrow(/not a step count/);
  });

  it('gives the same digests with the coordinator node:crypto factory as with the default', () => {
    const params = Float32Array.from({ length: 3000 }, (_, i) => Math.fround(i / 3));
    const outer = params.map((x) => x / 2);
    expect(hashParams(params, nodeSha256Factory)).toBe(treeHashReference(params));
    expect(stateHash(params, outer, nodeSha256Factory)).toBe(stateHash(params, outer));
    expect(stateHash(params, null, nodeSha256Factory)).toBe(hashParams(params));
    const bytes = seededBytes(200, 1);
    expect(treeHash([bytes.subarray(0, 70), bytes.subarray(70)], nodeSha256Factory)).toBe(
      treeHash([bytes.subarray(0, 70), bytes.subarray(70)]),
    );
    expect(Buffer.from(sha256Digest(bytes, nodeSha256Factory)).equals(Buffer.from(sha256Digest(bytes)))).toBe(true);
  });

  it('changes when any single bit of the parameters flips', () => {
    const params = Float32Array.from({ length: 2057 }, (_, i) => (i % 7) - 3.5);
    const words = new Uint32Array(params.buffer);
    const base = hashParams(params);
    const seen = new Set([base]);
    for (let i = 0; i < words.length; i += 128) {
      for (let bit = 0; bit < 32; bit++) {
        words[i] ^= 1 << bit;
        const flipped = hashParams(params);
        words[i] ^= 1 << bit;
        expect(flipped, `word ${i} bit ${bit}`).not.toBe(base);
        seen.add(flipped);
      }
    }
    expect(hashParams(params)).toBe(base);
    expect(seen.size).toBe(1 + Math.ceil(words.length / 128) * 32);
  });

  it('distinguishes +0 from -0 and trailing zeros (it hashes bytes and length, not values)', () => {
    expect(hashParams(new Float32Array([0]))).not.toBe(hashParams(new Float32Array([-0])));
    expect(hashParams(new Float32Array(3))).not.toBe(hashParams(new Float32Array(4)));
  });

  it('NO_HASH has the shape of a hash and is not the hash of empty parameters', () => {
    expect(hashSchema.safeParse(NO_HASH).success).toBe(true);
    expect(hashParams(new Float32Array(0))).not.toBe(NO_HASH);
  });

  it('hashes a CNN-sized parameter buffer (1 MB) in milliseconds', () => {
    // Speed note: see `npm run bench:hash` (bench/RESULTS.md) for SHA-256 per MB on this machine;
    // the bound is loose because the machine is shared with other test processes.
    const params = new Float32Array(1 << 18).map((_, i) => i * 1e-3);
    hashParams(params);
    const start = performance.now();
    for (let r = 0; r < 3; r++) hashParams(params);
    const msPerMb = (performance.now() - start) / 3;
    expect(msPerMb).toBeLessThan(200);
  });
});
