// The matmul of matmul.wgsl (same uniforms, bindings, epilogue and register tile) with op(a) shared
// through subgroup shuffles instead of read by every thread. Needs the `subgroups` feature.
//
// The workgroup is one row of WG_X threads (WG_Y = 1), so EVERY thread of it, and so every thread of
// any subgroup in it, owns the same TM output rows: only the columns differ. For each chunk of
// `subgroup_size` k values, lane l reads op(a)[rows, k0 + l] (TM values) and the k loop takes each lane's
// values in turn with `subgroupShuffle`: a value of op(a) is read from storage once per subgroup
// instead of once per thread. op(b) is read per thread as in the register variant. This holds whatever
// the adapter's subgroup size and however it maps invocations to lanes.
//
// Every output is the same float32 sum in the same order as matmul.wgsl's (k ascending, one product
// added at a time): a shuffled value is the value itself. So the variant is bit-identical to the
// others where the compiler treats `c += a * b` alike (tests and the autotuner's check compare bits).
// No thread returns early: every lane takes part in every shuffle (uniform control flow); threads past
// [m, n] read clamped addresses and skip their stores.

enable subgroups;

struct Params {
  m: u32,
  n: u32,
  k: u32,
  flags: u32,
  a_row_stride: u32,
  a_k_stride: u32,
  b_k_stride: u32,
  b_col_stride: u32,
}

@group(0) @binding(0) var<storage, read_write> a: array<u32>;
@group(0) @binding(1) var<storage, read_write> b: array<u32>;
@group(0) @binding(2) var<storage, read_write> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

override TM: u32 = 4u;
override TN: u32 = 4u;
override WG_X: u32 = 64u;
override A_HALF: bool = false;
override B_HALF: bool = false;

const ACCUMULATE = 1u;
const ADD_BIAS = 2u;
const RELU = 4u;

var<private> c00: vec4<f32>; var<private> c01: vec4<f32>;
var<private> c10: vec4<f32>; var<private> c11: vec4<f32>;
var<private> c20: vec4<f32>; var<private> c21: vec4<f32>;
var<private> c30: vec4<f32>; var<private> c31: vec4<f32>;
var<private> c40: vec4<f32>; var<private> c41: vec4<f32>;
var<private> c50: vec4<f32>; var<private> c51: vec4<f32>;
var<private> c60: vec4<f32>; var<private> c61: vec4<f32>;
var<private> c70: vec4<f32>; var<private> c71: vec4<f32>;

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

fn lane_offsets(first: u32, last: u32, stride: u32) -> vec4<u32> {
  return min(vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last)) * stride;
}

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

/** The k step kk of the chunk: lane `src`'s op(a) values (shuffled) against this thread's op(b) columns. */
fn step_shared(own0: vec4<f32>, own1: vec4<f32>, src: u32, ib0: vec4<u32>, ib1: vec4<u32>, kk: u32) {
  let a0 = subgroupShuffle(own0, src);
  var a1 = vec4<f32>(0.0);
  if (TM > 4u) { a1 = subgroupShuffle(own1, src); }
  let kb = kk * params.b_k_stride;
  let b0 = gather_b(ib0, kb, TN);
  var b1 = vec4<f32>(0.0);
  if (TN > 4u) { b1 = gather_b(ib1, kb, max(TN, 4u) - 4u); }
  rank1(a0, a1, b0, b1);
}

@compute @workgroup_size(WG_X)
fn main(
  @builtin(workgroup_id) group: vec3<u32>,
  @builtin(local_invocation_id) local: vec3<u32>,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) width: u32,
) {
  let row0 = group.y * TM;
  let col0 = (group.x * WG_X + local.x) * TN;
  let K = params.k;
  // m, n ≥ 1 here: the host dispatches nothing for an empty output.
  let ia0 = lane_offsets(row0, params.m - 1u, params.a_row_stride);
  let ia1 = lane_offsets(row0 + 4u, params.m - 1u, params.a_row_stride);
  let ib0 = lane_offsets(col0, params.n - 1u, params.b_col_stride);
  let ib1 = lane_offsets(col0 + 4u, params.n - 1u, params.b_col_stride);
  for (var k0 = 0u; k0 < K; k0 += width) {
    // This lane's k of the chunk, clamped: a lane past K reads a real value that is never shuffled.
    let ka = min(k0 + lane, K - 1u) * params.a_k_stride;
    let own0 = gather_a(ia0, ka, TM);
    var own1 = vec4<f32>(0.0);
    if (TM > 4u) { own1 = gather_a(ia1, ka, max(TM, 4u) - 4u); }
    let count = min(width, K - k0);
    for (var j = 0u; j < count; j++) { step_shared(own0, own1, j, ib0, ib1, k0 + j); }
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
