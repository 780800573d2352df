// GELU, tanh form (GPT-2's), one element per invocation (2-D dispatch folded in, see dispatch1d):
//   gelu_forward:  y = ½·x·(1 + tanh(u)),  u = √(2/π)·(x + 0.044715·x³)
//   gelu_backward: dx = dy·(½·(1 + tanh u) + ½·x·(1 − tanh² u)·√(2/π)·(1 + 3·0.044715·x²))
// The backward reads the pre-activation x (kept by the forward's caller). u is clamped to ±15,
// where tanh is ±1 in float32 already, so no implementation's tanh sees an overflowing exp.

override WORKGROUP_SIZE: u32 = 256u;

struct Params {
  size: u32,
}

const SQRT_2_OVER_PI: f32 = 0.7978845608028654;
const CUBIC: f32 = 0.044715;

@group(0) @binding(0) var<uniform> params: Params;
// read_write although only read: tensors are views of a few flat buffers (see matmul.wgsl).
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

fn tanh_u(v: f32) -> f32 {
  return tanh(clamp(SQRT_2_OVER_PI * (v + CUBIC * v * v * v), -15.0, 15.0));
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn gelu_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.size) { return; }
  let v = x[i];
  y[i] = 0.5 * v * (1.0 + tanh_u(v));
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn gelu_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.size) { return; }
  let v = x[i];
  let t = tanh_u(v);
  let du = SQRT_2_OVER_PI * (1.0 + 3.0 * CUBIC * v * v);
  dx[i] = dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du);
}
