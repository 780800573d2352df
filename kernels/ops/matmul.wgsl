// out[m,n] (= or +=) op(a)[m,k] · op(b)[k,n] (+ bias[n]) (then ReLU).
//
// Operands are addressed through strides from the uniforms, so one shader serves every transpose:
//   op(a)[r, kk] = a[r * a_row_stride + kk * a_k_stride]     (a stored [m,k]: (k, 1); transA, stored [k,m]: (1, m))
//   op(b)[kk, c] = b[kk * b_k_stride + c * b_col_stride]     (b stored [k,n]: (n, 1); transB, stored [n,k]: (1, k))
// Each thread owns a TM×TN register tile of the output, kept as vec4 accumulators (rows 0..7 × column
// quads 0..1) rather than an array: on SwiftShader private arrays live in memory and were 10× slower.
// Two ways to feed the tile, chosen by USE_WORKGROUP_MEMORY:
// - false (default, best on SwiftShader): every thread reads its operands straight from storage; no
//   barriers anywhere, which SwiftShader's CPU emulation pays dearly for.
// - true (the classic GPU kernel): the workgroup stages TK-deep slabs of A and B in workgroup memory
//   between two barriers, so each global value is read once per workgroup instead of once per thread.
// Threads whose tile falls outside [m,n] clamp their reads to the last row/column and skip their stores.
//
// Operands are bound as u32 words and read through `load_a` / `load_b`: float32 bits (a bitcast, free), or
// with A_HALF / B_HALF (the mixed-precision mode) IEEE halves packed two per word as `pack2x16float`
// writes them (kernels/ops/half.wgsl): element i is the low (even i) or high (odd i) half of word i/2.
// A half is widened to f32 before it is used, so products and sums stay float32 either way.
// matmul-subgroups.wgsl is the same kernel fed through subgroup shuffles; keep the two in step.

struct Params {
  m: u32,
  n: u32,
  k: u32,
  /** Epilogue switches: bit 0 accumulate (out +=), bit 1 add bias, bit 2 ReLU. */
  flags: u32,
  a_row_stride: u32,
  a_k_stride: u32,
  b_k_stride: u32,
  b_col_stride: u32,
}

// Operands are read_write although only read: WebGPU forbids one buffer in a dispatch as both read-only
// and writable storage, and the model's tensors are views of a few flat buffers.
@group(0) @binding(0) var<storage, read_write> a: array<u32>;
@group(0) @binding(1) var<storage, read_write> b: array<u32>;
// A 16-byte placeholder when there is no bias (never read then).
@group(0) @binding(2) var<storage, read_write> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

// Defaults mirror DEFAULT_MATMUL_TILE in matmul.ts (which always sets them).
/** Output rows per thread, 1..8. */
override TM: u32 = 8u;
/** Output columns per thread, 1..8. */
override TN: u32 = 8u;
override WG_X: u32 = 4u;
override WG_Y: u32 = 4u;
override USE_WORKGROUP_MEMORY: bool = false;
/** Depth of the k-slab staged in workgroup memory (workgroup-memory variant only), a multiple of 4. */
override TK: u32 = 16u;
/** `a` / `b` hold packed halves instead of float32 (mixed precision). */
override A_HALF: bool = false;
override B_HALF: bool = false;

// Epilogue flags (uniform, not overrides: every epilogue shares one pipeline, and each pipeline costs
// ~0.5 s of SwiftShader JIT at start-up).
const ACCUMULATE = 1u;
const ADD_BIAS = 2u;
const RELU = 4u;

// Workgroup tile extent; derived, never set by the host.
override BM: u32 = TM * WG_Y;
override BN: u32 = TN * WG_X;

var<workgroup> tile_a: array<f32, TK * TM * WG_Y>; // [TK][BM]
var<workgroup> tile_b: array<f32, TK * TN * WG_X>; // [TK][BN]

// Accumulators: c<row><quad>, quad 0 holds columns 0..3 of the tile, quad 1 columns 4..7.
var<private> c00: vec4<f32>; var<private> c01: vec4<f32>;
var<private> c10: vec4<f32>; var<private> c11: vec4<f32>;
var<private> c20: vec4<f32>; var<private> c21: vec4<f32>;
var<private> c30: vec4<f32>; var<private> c31: vec4<f32>;
var<private> c40: vec4<f32>; var<private> c41: vec4<f32>;
var<private> c50: vec4<f32>; var<private> c51: vec4<f32>;
var<private> c60: vec4<f32>; var<private> c61: vec4<f32>;
var<private> c70: vec4<f32>; var<private> c71: vec4<f32>;

/** Element i of an operand: float32 bits, or half i%2 of word i/2 when the operand is packed halves. */
fn load_word(word: u32, i: u32, half: bool) -> f32 {
  if (half) {
    let pair = unpack2x16float(word);
    return select(pair.x, pair.y, (i & 1u) == 1u);
  }
  return bitcast<f32>(word);
}

fn load_a(i: u32) -> f32 {
  return load_word(a[select(i, i >> 1u, A_HALF)], i, A_HALF);
}

fn load_b(i: u32) -> f32 {
  return load_word(b[select(i, i >> 1u, B_HALF)], i, B_HALF);
}

/** One k step of the register tile: rows' A values in a0 (rows 0..3) / a1 (rows 4..7), B quads b0 / b1. */
fn rank1(a0: vec4<f32>, a1: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>) {
  let two = TN > 4u;
  c00 += a0.x * b0; if (two) { c01 += a0.x * b1; }
  if (TM > 1u) { c10 += a0.y * b0; if (two) { c11 += a0.y * b1; } }
  if (TM > 2u) { c20 += a0.z * b0; if (two) { c21 += a0.z * b1; } }
  if (TM > 3u) { c30 += a0.w * b0; if (two) { c31 += a0.w * b1; } }
  if (TM > 4u) { c40 += a1.x * b0; if (two) { c41 += a1.x * b1; } }
  if (TM > 5u) { c50 += a1.y * b0; if (two) { c51 += a1.y * b1; } }
  if (TM > 6u) { c60 += a1.z * b0; if (two) { c61 += a1.z * b1; } }
  if (TM > 7u) { c70 += a1.w * b0; if (two) { c71 += a1.w * b1; } }
}

/** Up to four values a[index[i] + offset] for i < count (count is a pipeline constant); the rest 0. */
fn gather_a(index: vec4<u32>, offset: u32, count: u32) -> vec4<f32> {
  var v = vec4<f32>(load_a(index.x + offset), 0.0, 0.0, 0.0);
  if (count > 1u) { v.y = load_a(index.y + offset); }
  if (count > 2u) { v.z = load_a(index.z + offset); }
  if (count > 3u) { v.w = load_a(index.w + offset); }
  return v;
}

fn gather_b(index: vec4<u32>, offset: u32, count: u32) -> vec4<f32> {
  var v = vec4<f32>(load_b(index.x + offset), 0.0, 0.0, 0.0);
  if (count > 1u) { v.y = load_b(index.y + offset); }
  if (count > 2u) { v.z = load_b(index.z + offset); }
  if (count > 3u) { v.w = load_b(index.w + offset); }
  return v;
}

/** Four consecutive values of a workgroup tile row starting at `start` (count as above). */
fn slab_a(start: u32, count: u32) -> vec4<f32> {
  var v = vec4<f32>(tile_a[start], 0.0, 0.0, 0.0);
  if (count > 1u) { v.y = tile_a[start + 1u]; }
  if (count > 2u) { v.z = tile_a[start + 2u]; }
  if (count > 3u) { v.w = tile_a[start + 3u]; }
  return v;
}

fn slab_b(start: u32, count: u32) -> vec4<f32> {
  var v = vec4<f32>(tile_b[start], 0.0, 0.0, 0.0);
  if (count > 1u) { v.y = tile_b[start + 1u]; }
  if (count > 2u) { v.z = tile_b[start + 2u]; }
  if (count > 3u) { v.w = tile_b[start + 3u]; }
  return v;
}

/** Clamped indices of 4 consecutive rows/columns starting at `first`, scaled by `stride`. */
fn lane_offsets(first: u32, last: u32, stride: u32) -> vec4<u32> {
  return min(vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last)) * stride;
}

/** Stage the k-slab [k0, k0+TK) of op(a) (rows of this workgroup) and op(b) (its columns); zero outside. */
fn stage_slab(k0: u32, row_base: u32, col_base: u32, thread: u32) {
  let threads = WG_X * WG_Y;
  for (var e = thread; e < BM * TK; e += threads) {
    let kk = e % TK;
    let r = e / TK;
    let row = row_base + r;
    let kg = k0 + kk;
    var v = 0.0;
    if (row < params.m && kg < params.k) { v = load_a(row * params.a_row_stride + kg * params.a_k_stride); }
    tile_a[kk * BM + r] = v;
  }
  for (var e = thread; e < BN * TK; e += threads) {
    let c = e % BN;
    let kk = e / BN;
    let col = col_base + c;
    let kg = k0 + kk;
    var v = 0.0;
    if (col < params.n && kg < params.k) { v = load_b(kg * params.b_k_stride + col * params.b_col_stride); }
    tile_b[kk * BN + c] = v;
  }
}

/** Write one output row of the tile: epilogue (accumulate, bias, ReLU) and bounds. */
fn store_row(row: u32, col0: u32, q0: vec4<f32>, q1: vec4<f32>) {
  if (row >= params.m) { return; }
  for (var j = 0u; j < TN; j++) {
    let col = col0 + j;
    if (col >= params.n) { break; }
    let index = row * params.n + col;
    var v = select(q1[j & 3u], q0[j & 3u], j < 4u);
    if ((params.flags & ACCUMULATE) != 0u) { v += out[index]; }
    if ((params.flags & ADD_BIAS) != 0u) { v += bias[col]; }
    if ((params.flags & RELU) != 0u) { v = max(v, 0.0); }
    out[index] = v;
  }
}

/** One k step from storage: gather op(a)[rows, kk] and op(b)[kk, cols] (clamped indices in ia*, ib*). */
fn step_storage(ia0: vec4<u32>, ia1: vec4<u32>, ib0: vec4<u32>, ib1: vec4<u32>, kk: u32) {
  let ka = kk * params.a_k_stride;
  let kb = kk * params.b_k_stride;
  let a0 = gather_a(ia0, ka, TM);
  var a1 = vec4<f32>(0.0);
  if (TM > 4u) { a1 = gather_a(ia1, ka, max(TM, 4u) - 4u); }
  let b0 = gather_b(ib0, kb, TN);
  var b1 = vec4<f32>(0.0);
  if (TN > 4u) { b1 = gather_b(ib1, kb, max(TN, 4u) - 4u); }
  rank1(a0, a1, b0, b1);
}

/** One k step from the staged slab; a_start / b_start locate this thread's rows / columns in it. */
fn step_slab(a_start: u32, b_start: u32, kk: u32) {
  let a0 = slab_a(kk * BM + a_start, TM);
  var a1 = vec4<f32>(0.0);
  if (TM > 4u) { a1 = slab_a(kk * BM + a_start + 4u, max(TM, 4u) - 4u); }
  let b0 = slab_b(kk * BN + b_start, TN);
  var b1 = vec4<f32>(0.0);
  if (TN > 4u) { b1 = slab_b(kk * BN + b_start + 4u, max(TN, 4u) - 4u); }
  rank1(a0, a1, b0, b1);
}

// The k loops are unrolled by 4 by hand: on SwiftShader that alone was worth ~1.5×.
@compute @workgroup_size(WG_X, WG_Y)
fn main(
  @builtin(workgroup_id) group: vec3<u32>,
  @builtin(local_invocation_id) local: vec3<u32>,
) {
  let row0 = group.y * BM + local.y * TM;
  let col0 = group.x * BN + local.x * TN;
  let K = params.k;

  if (USE_WORKGROUP_MEMORY) {
    // No early return here: every thread must reach the barriers. TK is a multiple of 4 (host-checked).
    let thread = local.y * WG_X + local.x;
    let a_start = local.y * TM;
    let b_start = local.x * TN;
    for (var k0 = 0u; k0 < K; k0 += TK) {
      workgroupBarrier();
      stage_slab(k0, group.y * BM, group.x * BN, thread);
      workgroupBarrier();
      for (var kk = 0u; kk < TK; kk += 4u) {
        step_slab(a_start, b_start, kk);
        step_slab(a_start, b_start, kk + 1u);
        step_slab(a_start, b_start, kk + 2u);
        step_slab(a_start, b_start, kk + 3u);
      }
    }
  } else {
    if (row0 >= params.m || col0 >= params.n) { return; }
    let ia0 = lane_offsets(row0, params.m - 1u, params.a_row_stride);
    let ia1 = lane_offsets(row0 + 4u, params.m - 1u, params.a_row_stride);
    let ib0 = lane_offsets(col0, params.n - 1u, params.b_col_stride);
    let ib1 = lane_offsets(col0 + 4u, params.n - 1u, params.b_col_stride);
    let k4 = K & ~3u;
    var kk = 0u;
    for (; kk < k4; kk += 4u) {
      step_storage(ia0, ia1, ib0, ib1, kk);
      step_storage(ia0, ia1, ib0, ib1, kk + 1u);
      step_storage(ia0, ia1, ib0, ib1, kk + 2u);
      step_storage(ia0, ia1, ib0, ib1, kk + 3u);
    }
    for (; kk < K; kk++) { step_storage(ia0, ia1, ib0, ib1, kk); }
  }

  store_row(row0, col0, c00, c01);
  if (TM > 1u) { store_row(row0 + 1u, col0, c10, c11); }
  if (TM > 2u) { store_row(row0 + 2u, col0, c20, c21); }
  if (TM > 3u) { store_row(row0 + 3u, col0, c30, c31); }
  if (TM > 4u) { store_row(row0 + 4u, col0, c40, c41); }
  if (TM > 5u) { store_row(row0 + 5u, col0, c50, c51); }
  if (TM > 6u) { store_row(row0 + 6u, col0, c60, c61); }
  if (TM > 7u) { store_row(row0 + 7u, col0, c70, c71); }
}
