/**
 * A fast, stable 64-bit hash of parameter bytes, identical in every browser and in Node.
 *
 * Ranks report this hash of their parameters after each step and the commit rule requires the
 * reports to agree (docs/ARCHITECTURE.md, invariant 2: divergence is detected); snapshots carry it too. So it
 * must be cheap over megabytes (a few ms for a 1 MB `mlp`), pure JS (no WebCrypto: async, and not
 * available in every worker context) and defined on bytes, not on float values (-0 ≠ +0, NaN
 * payloads differ: bit-identical parameters are the invariant).
 *
 * The 64 bits are two standard 32-bit hashes over the same little-endian 32-bit words, so each lane
 * can be checked against published vectors: MurmurHash3_x86_32 (seed 0) then XXH32 (seed 0), as 16
 * lower-case hex digits. Inputs are whole 32-bit words (float32 tensors); every WebGPU host is
 * little-endian, so a `Uint32Array` view over the bytes reads the words the byte-wise algorithms read.
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

/**
 * Hash raw bytes whose length is a multiple of 4 (a float32 tensor, a snapshot header padded to 4).
 * Views at an unaligned byte offset are copied once (a typed-array word view needs alignment).
 */
export function hashBytes(data: ArrayBuffer | ArrayBufferView): string {
  const bytes =
    data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (bytes.byteLength % 4 !== 0) throw new Error(`hashBytes: byte length ${bytes.byteLength} is not a multiple of 4`);
  const aligned = bytes.byteOffset % 4 === 0 ? bytes : bytes.slice();
  return hashWords(new Uint32Array(aligned.buffer, aligned.byteOffset, aligned.byteLength / 4));
}

/** The parameter hash ranks report and snapshots carry: the hash of the flat float32 parameter buffer. */
export function hashParams(params: Float32Array): string {
  return hashBytes(params);
}

/**
 * The hash of a committed state, what ranks report at a commit point and what a checkpoint is verified
 * against: the parameters alone (every-step mode), or the parameters followed by the outer optimizer's
 * momentum (local mode: the momentum belongs to the committed state, so ranks must agree on it too).
 */
export function stateHash(params: Float32Array, outerMomentum?: Float32Array | null): string {
  if (!outerMomentum) return hashParams(params);
  const both = new Float32Array(params.length + outerMomentum.length);
  both.set(params);
  both.set(outerMomentum, params.length);
  return hashBytes(both);
}
