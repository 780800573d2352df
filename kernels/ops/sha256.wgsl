// SHA-256 (FIPS 180-4) of fixed-size chunks of a buffer, one invocation per chunk: the leaves of the
// tree state hash (core/state/hash.ts `treeHash`). Chunk c covers bytes
// [c·chunk_bytes, min((c+1)·chunk_bytes, byte_length)); the last one may be short and gets the
// standard padding of its real length. Digest c is written as 8 words at digests[8c..8c+8) whose
// bytes in memory are the digest's bytes in order, so the buffer read back is the concatenated digests.
//
// Byte order: the data is little-endian in memory (float32 parameters), and SHA-256 reads its message
// as big-endian 32-bit words, so each loaded word is byte-swapped; each digest word is swapped back
// on the way out. Lengths are multiples of 4 (the wrapper checks): a chunk is whole words.
//
// The dispatch may be 2-D (dispatch1d) for more than 65,535 workgroups of chunks.
//
// Speed: on SwiftShader (the CPU) this runs about 5× slower than V8's SHA-256 in JS, and a version with
// the 64 rounds written out (no dynamically indexed arrays) was no faster there, so the plain loop is
// kept; the worker hashes on the CPU on such adapters (web/worker/params-hasher.ts). On a real GPU,
// unrolling (the state and schedule in registers) is the first thing to measure.

override WORKGROUP_SIZE: u32 = 32u;

struct Params {
  /// Bytes to hash from the start of `data` (a multiple of 4).
  byte_length: u32,
  /// Bytes per chunk (a multiple of 64).
  chunk_bytes: u32,
  /// ceil(byte_length / chunk_bytes).
  chunks: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// read_write although only read: the parameters are bound read_write by every other kernel of a step.
@group(0) @binding(1) var<storage, read_write> data: array<u32>;
@group(0) @binding(2) var<storage, read_write> digests: array<u32>;

// The round constants: the first 32 bits of the fractional parts of the cube roots of the first 64 primes.
var<private> K: array<u32, 64> = array<u32, 64>(
  0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
  0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
  0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
  0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
  0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
  0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
  0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
  0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
);

fn bswap(x: u32) -> u32 {
  return (x << 24u) | ((x << 8u) & 0x00ff0000u) | ((x >> 8u) & 0x0000ff00u) | (x >> 24u);
}

fn rotr(x: u32, n: u32) -> u32 {
  return (x >> n) | (x << (32u - n));
}

// Word j (big-endian) of the padded message of the `len`-byte chunk at word `base`, `total` words long:
// the data, the 0x80 marker byte (a word of its own, lengths being whole words), zeros, and the length
// in bits as a 64-bit big-endian integer in the last two words.
fn message_word(base: u32, len: u32, j: u32, total: u32) -> u32 {
  let words = len / 4u;
  if (j < words) { return bswap(data[base + j]); }
  if (j == words) { return 0x80000000u; }
  if (j == total - 2u) { return len >> 29u; }
  if (j == total - 1u) { return len << 3u; }
  return 0u;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn chunk_sha256(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let c = (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
  if (c >= params.chunks) { return; }
  let start = c * params.chunk_bytes;
  let len = min(params.chunk_bytes, params.byte_length - start);
  let base = start / 4u;
  // Padded length: the smallest multiple of 64 bytes holding the data, the marker and the 8-byte length.
  let blocks = (len + 72u) / 64u;
  let total = blocks * 16u;
  var h = array<u32, 8>(
    0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au, 0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u,
  );
  var w: array<u32, 64>;
  for (var b = 0u; b < blocks; b++) {
    for (var t = 0u; t < 16u; t++) { w[t] = message_word(base, len, b * 16u + t, total); }
    for (var t = 16u; t < 64u; t++) {
      let s0 = rotr(w[t - 15u], 7u) ^ rotr(w[t - 15u], 18u) ^ (w[t - 15u] >> 3u);
      let s1 = rotr(w[t - 2u], 17u) ^ rotr(w[t - 2u], 19u) ^ (w[t - 2u] >> 10u);
      w[t] = w[t - 16u] + s0 + w[t - 7u] + s1;
    }
    var a = h[0];
    var bb = h[1];
    var cc = h[2];
    var d = h[3];
    var e = h[4];
    var f = h[5];
    var g = h[6];
    var hh = h[7];
    for (var t = 0u; t < 64u; t++) {
      let big_s1 = rotr(e, 6u) ^ rotr(e, 11u) ^ rotr(e, 25u);
      let ch = (e & f) ^ (~e & g);
      let t1 = hh + big_s1 + ch + K[t] + w[t];
      let big_s0 = rotr(a, 2u) ^ rotr(a, 13u) ^ rotr(a, 22u);
      let maj = (a & bb) ^ (a & cc) ^ (bb & cc);
      let t2 = big_s0 + maj;
      hh = g;
      g = f;
      f = e;
      e = d + t1;
      d = cc;
      cc = bb;
      bb = a;
      a = t1 + t2;
    }
    h[0] += a;
    h[1] += bb;
    h[2] += cc;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
  }
  for (var i = 0u; i < 8u; i++) { digests[c * 8u + i] = bswap(h[i]); }
}
