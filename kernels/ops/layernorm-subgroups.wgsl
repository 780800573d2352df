// LayerNorm's forward and input gradient (layernorm.wgsl) with four invocations per row: needs the
// `subgroups` feature. The four lanes of a subgroup quad (subgroup lanes 4q .. 4q+3) share a row;
// lane l sums the row's elements d ≡ l (mod 4) in ascending order, and two butterfly shuffles give
// every lane (p0 + p1) + (p2 + p3) — lane 1 gets (p1 + p0) + (p3 + p2), lane 2 (p2 + p3) + (p0 + p1),
// the same values since float addition is commutative — which is layernorm.wgsl's order: both
// variants give the same bits. Each lane writes its own elements; lane 0 the row's stats.
//
// A quad's row is found from its invocation indices, which assumes a quad is four consecutive
// invocations starting at a multiple of 4 (so on every implementation we know of). Each subgroup
// checks it; where it does not hold, the kernel writes NaN instead of a wrong row, and the
// autotuner's bit check and the tests refuse the variant.
// No invocation returns before the shuffles (a quad must shuffle together): rows past the end compute
// on the last row and store nothing.

enable subgroups;

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
  rows: u32,
  dim: u32,
  eps: f32,
  accumulate: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> stats: array<f32>;
@group(0) @binding(3) var<storage, read_write> gain: array<f32>;
@group(0) @binding(4) var<storage, read_write> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> dy: array<f32>;
@group(0) @binding(5) var<storage, read_write> dx: array<f32>;

/** A quiet NaN, built at run time (a NaN constant is not representable in WGSL). */
fn nan() -> f32 {
  return bitcast<f32>(0x7fc00000u | (params.rows & 0u));
}

/** (p0 + p1) + (p2 + p3) of the quad's four partial sums, in every lane. */
fn quad_sum(v: f32) -> f32 {
  let pair = v + subgroupShuffleXor(v, 1u);
  return pair + subgroupShuffleXor(pair, 2u);
}

struct Lane {
  /** The row (clamped to the last), whether it exists, this lane's first element, and the quad check. */
  row: u32,
  live: bool,
  lane: u32,
  ok: bool,
}

fn lane_of(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, sg: u32) -> Lane {
  let t = (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
  let lane = sg & 3u;
  let leader = subgroupShuffle(lid, sg & ~3u);
  var l: Lane;
  l.ok = subgroupAll(leader % 4u == 0u && lid == leader + lane);
  l.lane = lane;
  l.live = t / 4u < params.rows;
  l.row = min(t / 4u, params.rows - 1u);
  return l;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn layernorm_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sg: u32) {
  let l = lane_of(wid, nwg, lid, sg);
  let p = params;
  let base = l.row * p.dim;
  var sum = 0.0;
  for (var d = l.lane; d < p.dim; d += 4u) { sum += x[base + d]; }
  let mean = quad_sum(sum) / f32(p.dim);
  var sq = 0.0;
  for (var d = l.lane; d < p.dim; d += 4u) {
    let c = x[base + d] - mean;
    sq += c * c;
  }
  let rstd = 1.0 / sqrt(quad_sum(sq) / f32(p.dim) + p.eps);
  if (!l.live) { return; }
  if (!l.ok) {
    for (var d = l.lane; d < p.dim; d += 4u) { y[base + d] = nan(); }
    return;
  }
  if (l.lane == 0u) {
    stats[2u * l.row] = mean;
    stats[2u * l.row + 1u] = rstd;
  }
  for (var d = l.lane; d < p.dim; d += 4u) { y[base + d] = (x[base + d] - mean) * rstd * gain[d] + bias[d]; }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn layernorm_backward_input(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sg: u32) {
  let l = lane_of(wid, nwg, lid, sg);
  let p = params;
  let base = l.row * p.dim;
  let mean = stats[2u * l.row];
  let rstd = stats[2u * l.row + 1u];
  var sum_g = 0.0;
  var sum_gx = 0.0;
  for (var d = l.lane; d < p.dim; d += 4u) {
    let g = dy[base + d] * gain[d];
    sum_g += g;
    sum_gx += g * (x[base + d] - mean) * rstd;
  }
  let mean_g = quad_sum(sum_g) / f32(p.dim);
  let mean_gx = quad_sum(sum_gx) / f32(p.dim);
  if (!l.live) { return; }
  for (var d = l.lane; d < p.dim; d += 4u) {
    let xhat = (x[base + d] - mean) * rstd;
    var v = rstd * (dy[base + d] * gain[d] - mean_g - xhat * mean_gx);
    if (!l.ok) { v = nan(); }
    if (p.accumulate == 1u) { dx[base + d] += v; } else { dx[base + d] = v; }
  }
}
