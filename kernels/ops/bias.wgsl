// Bias of a dense layer over a row-major [rows, cols] tensor:
//   bias_add:          out[r,c] = x[r,c] + bias[c]        (one element per invocation)
//   bias_add_in_place: out[r,c] += bias[c]                (x === out: one binding, as WebGPU forbids
//                                                          two overlapping writable bindings)
//   bias_grad:         dbias[c] (= or +=) Σ_r dy[r,c]     (one column per invocation, rows summed in
//                                                          order: deterministic, no float atomics)
// Element dispatches may be 2-D (dispatch1d) when rows·cols needs more than 65,535 workgroups.
// Every storage binding is read_write so tensors may be disjoint views of one flat buffer.

override WORKGROUP_SIZE: u32 = 64u;
override ACCUMULATE: bool = false;

struct Params {
  rows: u32,
  cols: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

@group(0) @binding(1) var<storage, read_write> bias: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn bias_add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.rows * params.cols) { return; }
  out[i] = x[i] + bias[i % params.cols];
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn bias_add_in_place(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.rows * params.cols) { return; }
  out[i] = out[i] + bias[i % params.cols];
}

@group(0) @binding(1) var<storage, read_write> dy: array<f32>;
@group(0) @binding(2) var<storage, read_write> dbias: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn bias_grad(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  let cols = params.cols;
  if (c >= cols) { return; }
  var sum = 0.0;
  for (var r = 0u; r < params.rows; r++) { sum += dy[r * cols + c]; }
  if (ACCUMULATE) { sum += dbias[c]; }
  dbias[c] = sum;
}
