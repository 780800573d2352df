// Elementwise ops on flat float32 tensors: y += x, x *= alpha, x = value.
// One element per invocation; the dispatch may be 2-D (dispatch1d) when a flat buffer needs more than
// 65,535 workgroups, so the linear index folds workgroup_id.y in.

override WORKGROUP_SIZE: u32 = 256u;

struct Params {
  size: u32,
  /// alpha for scale_in_place, value for fill; unused by add_into.
  scalar: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
// read_write even where only read (add_into's addend): WebGPU forbids one buffer in a dispatch as both
// read-only and writable storage, and gradients are often disjoint views of one flat buffer.
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn add_into(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.size) { return; }
  y[i] = y[i] + x[i];
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn scale_in_place(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.size) { return; }
  x[i] = x[i] * params.scalar;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn fill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.size) { return; }
  x[i] = params.scalar;
}
