/**
 * The state hash tabswarm used before SHA-256 (core/state/hash.ts until issue 12), kept only as the
 * baseline of `npm run bench:hash`: MurmurHash3_x86_32 (seed 0) then XXH32 (seed 0) over the same
 * little-endian 32-bit words, 16 hex digits. Fast, but not cryptographic: 64 bits that anyone can steer.
 * Nothing in the product uses it.
 */

const M3_C1 = 0xcc9e2d51;
const M3_C2 = 0x1b873593;
const XX_P1 = 0x9e3779b1;
const XX_P2 = 0x85ebca77;
const XX_P3 = 0xc2b2ae3d;
const XX_P4 = 0x27d4eb2f;
const XX_P5 = 0x165667b1;

function rotl(x: number, r: number): number {
  return (x << r) | (x >>> (32 - r));
}

/** MurmurHash3_x86_32 of `words` (byte length = 4·words.length), as an unsigned 32-bit number. */
export function murmur3Words(words: Uint32Array, seed = 0): number {
  let h = seed >>> 0;
  for (let i = 0; i < words.length; i++) {
    let k = Math.imul(words[i], M3_C1);
    k = Math.imul(rotl(k, 15), M3_C2);
    h ^= k;
    h = (Math.imul(rotl(h, 13), 5) + 0xe6546b64) | 0;
  }
  h ^= words.length * 4;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** XXH32 of `words` (byte length = 4·words.length), as an unsigned 32-bit number. */
export function xxh32Words(words: Uint32Array, seed = 0): number {
  const n = words.length;
  let i = 0;
  let h: number;
  if (n >= 4) {
    // Four independent accumulators over 16-byte stripes: the loop the speed comes from.
    let v1 = (seed + XX_P1 + XX_P2) | 0;
    let v2 = (seed + XX_P2) | 0;
    let v3 = seed | 0;
    let v4 = (seed - XX_P1) | 0;
    for (; i + 4 <= n; i += 4) {
      v1 = Math.imul(rotl((v1 + Math.imul(words[i], XX_P2)) | 0, 13), XX_P1);
      v2 = Math.imul(rotl((v2 + Math.imul(words[i + 1], XX_P2)) | 0, 13), XX_P1);
      v3 = Math.imul(rotl((v3 + Math.imul(words[i + 2], XX_P2)) | 0, 13), XX_P1);
      v4 = Math.imul(rotl((v4 + Math.imul(words[i + 3], XX_P2)) | 0, 13), XX_P1);
    }
    h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) | 0;
  } else {
    h = (seed + XX_P5) | 0;
  }
  h = (h + n * 4) | 0;
  for (; i < n; i++) {
    h = (h + Math.imul(words[i], XX_P3)) | 0;
    h = Math.imul(rotl(h, 17), XX_P4);
  }
  h ^= h >>> 15;
  h = Math.imul(h, XX_P2);
  h ^= h >>> 13;
  h = Math.imul(h, XX_P3);
  h ^= h >>> 16;
  return h >>> 0;
}

function hex32(x: number): string {
  return (x >>> 0).toString(16).padStart(8, '0');
}

/** The 64-bit hash of 32-bit words as 16 hex digits (murmur3 lane, then xxh32 lane). */
export function hashWords(words: Uint32Array): string {
  return hex32(murmur3Words(words)) + hex32(xxh32Words(words));
}

/** The old 64-bit hash of a float32 array's bytes (its `byteOffset` must be a multiple of 4, as every typed array's is). */
export function legacyHash64(data: Float32Array): string {
  return hashWords(new Uint32Array(data.buffer, data.byteOffset, data.length));
}
