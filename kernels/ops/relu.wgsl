// ReLU forward and backward, one element per invocation (2-D dispatch folded in, see dispatch1d):
//   relu_forward:           out = max(x, 0)
//   relu_backward:          dx = dy · [y > 0]        (y is the ReLU *output*, so no input is kept)
// The *_in_place entry points bind the tensor once (x === out, dx === dy): WebGPU rejects two
// overlapping writable bindings. Every storage binding is read_write so tensors may be disjoint
// views of one flat buffer.

override WORKGROUP_SIZE: u32 = 256u;

struct Params {
  size: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn relu_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.size) { return; }
  out[i] = max(x[i], 0.0);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn relu_forward_in_place(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.size) { return; }
  x[i] = max(x[i], 0.0);
}

@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn relu_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.size) { return; }
  dx[i] = select(0.0, dy[i], y[i] > 0.0);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn relu_backward_in_place(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                          @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.size) { return; }
  dy[i] = select(0.0, dy[i], y[i] > 0.0);
}
