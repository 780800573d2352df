// LayerNorm over the last dimension of x [rows, dim], with gain g and bias b [dim]:
//   layernorm_forward:         mean, rstd = 1/sqrt(var + eps) (biased variance, two passes);
//                              y = (x − mean)·rstd·g + b; stats[r] = (mean, rstd) for the backward.
//   layernorm_backward_input:  with x̂ = (x − mean)·rstd and ĝ = dy·g,
//                              dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)); `accumulate` adds dx into the
//                              output instead (the residual stream's gradient already lives there).
//   layernorm_backward_params: dg[d] = Σ_r dy[r,d]·x̂[r,d], db[d] = Σ_r dy[r,d].
// One invocation per row (forward, input gradient) or per column (parameter gradients): every sum
// runs in a fixed order, so results are bit-reproducible, with no barriers and no atomics.
// A row's sums are four interleaved partial sums (elements d ≡ 0, 1, 2, 3 mod 4, each ascending) added
// as (p0 + p1) + (p2 + p3): exactly what layernorm-subgroups.wgsl computes with one lane per partial,
// so both variants give the same bits.
// Each entry point uses bindings 0..n-1 (bindBuffers binds in order); names differ per entry point.

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
  rows: u32,
  dim: u32,
  eps: f32,
  /// layernorm_backward_input: 1 adds dx into `dx`, 0 overwrites.
  accumulate: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// read_write although some are only read: tensors are views of a few flat buffers (see matmul.wgsl).
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> stats: array<f32>;
// forward: gain (3), bias (4), y (5)
@group(0) @binding(3) var<storage, read_write> gain: array<f32>;
@group(0) @binding(4) var<storage, read_write> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
// backward input: gain (3), dy (4), dx (5)
@group(0) @binding(4) var<storage, read_write> dy: array<f32>;
@group(0) @binding(5) var<storage, read_write> dx: array<f32>;
// backward params: dy (3), dgain (4), dbias (5)
@group(0) @binding(3) var<storage, read_write> dy_rows: array<f32>;
@group(0) @binding(4) var<storage, read_write> dgain: array<f32>;
@group(0) @binding(5) var<storage, read_write> dbias: array<f32>;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

/** x[i .. i+3]. */
fn x4(i: u32) -> vec4<f32> {
  return vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
}

/** The four partial sums of a row, added in the fixed order above. */
fn combine(p: vec4<f32>) -> f32 {
  return (p.x + p.y) + (p.z + p.w);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn layernorm_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
  let r = linear_index(wid, nwg, lid);
  let p = params;
  if (r >= p.rows) { return; }
  let base = r * p.dim;
  // Four elements at a time (component l is partial sum l), then the tail of at most three.
  let full = p.dim & ~3u;
  var sum = vec4<f32>(0.0);
  for (var d = 0u; d < full; d += 4u) { sum += x4(base + d); }
  for (var d = full; d < p.dim; d++) { sum[d & 3u] += x[base + d]; }
  let mean = combine(sum) / f32(p.dim);
  var sq = vec4<f32>(0.0);
  for (var d = 0u; d < full; d += 4u) {
    let c = x4(base + d) - mean;
    sq += c * c;
  }
  for (var d = full; d < p.dim; d++) {
    let c = x[base + d] - mean;
    sq[d & 3u] += c * c;
  }
  let rstd = 1.0 / sqrt(combine(sq) / f32(p.dim) + p.eps);
  stats[2u * r] = mean;
  stats[2u * r + 1u] = rstd;
  for (var d = 0u; d < p.dim; d++) {
    y[base + d] = (x[base + d] - mean) * rstd * gain[d] + bias[d];
  }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn layernorm_backward_input(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32) {
  let r = linear_index(wid, nwg, lid);
  let p = params;
  if (r >= p.rows) { return; }
  let base = r * p.dim;
  let mean = stats[2u * r];
  let rstd = stats[2u * r + 1u];
  let full = p.dim & ~3u;
  var sum_g = vec4<f32>(0.0);
  var sum_gx = vec4<f32>(0.0);
  for (var d = 0u; d < full; d += 4u) {
    let g = vec4<f32>(dy[base + d], dy[base + d + 1u], dy[base + d + 2u], dy[base + d + 3u]) *
            vec4<f32>(gain[d], gain[d + 1u], gain[d + 2u], gain[d + 3u]);
    sum_g += g;
    sum_gx += g * (x4(base + d) - mean) * rstd;
  }
  for (var d = full; d < p.dim; d++) {
    let g = dy[base + d] * gain[d];
    sum_g[d & 3u] += g;
    sum_gx[d & 3u] += g * (x[base + d] - mean) * rstd;
  }
  let mean_g = combine(sum_g) / f32(p.dim);
  let mean_gx = combine(sum_gx) / f32(p.dim);
  for (var d = 0u; d < p.dim; d++) {
    let xhat = (x[base + d] - mean) * rstd;
    let v = rstd * (dy[base + d] * gain[d] - mean_g - xhat * mean_gx);
    if (p.accumulate == 1u) { dx[base + d] += v; } else { dx[base + d] = v; }
  }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn layernorm_backward_params(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                             @builtin(local_invocation_index) lid: u32) {
  let d = linear_index(wid, nwg, lid);
  let p = params;
  if (d >= p.dim) { return; }
  var sum_g = 0.0;
  var sum_b = 0.0;
  for (var r = 0u; r < p.rows; r++) {
    let i = r * p.dim + d;
    let xhat = (x[i] - stats[2u * r]) * stats[2u * r + 1u];
    sum_g += dy_rows[i] * xhat;
    sum_b += dy_rows[i];
  }
  dgain[d] = sum_g;
  dbias[d] = sum_b;
}
