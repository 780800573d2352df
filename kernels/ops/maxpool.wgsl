// 2×2 max pooling with stride 2 (floor: an odd last row/column is dropped) on NHWC float32 tensors.
// Forward writes the max and, per output, the flat index into `x` of the element that won (first
// maximum in row-major window order on ties, as torch). Backward runs one invocation per INPUT
// element: windows do not overlap, so each input has at most one output to take a gradient from,
// and dx is written everywhere (zero where the element lost or was dropped) without atomics.

override WORKGROUP_SIZE: u32 = 256u;

struct Params {
  batch: u32,
  height: u32,
  width: u32,
  channels: u32,
  out_height: u32,
  out_width: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// Every tensor is read_write although some are only read: WebGPU forbids one buffer in a dispatch as
// both read-only and writable storage, and the model's tensors are views of a few flat buffers.
// maxpool_forward: x -> out, argmax
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> argmax: array<u32>;
// maxpool_backward: dy, argmax -> dx
@group(0) @binding(1) var<storage, read_write> dy: array<f32>;
@group(0) @binding(2) var<storage, read_write> argmax_in: array<u32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn maxpool_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let p = params;
  let o = linear_index(wid, nwg, lid);
  if (o >= p.batch * p.out_height * p.out_width * p.channels) { return; }
  let c = o % p.channels;
  let pixel = o / p.channels;
  let ox = pixel % p.out_width;
  let rows = pixel / p.out_width;
  let oy = rows % p.out_height;
  let n = rows / p.out_height;
  let row_stride = p.width * p.channels;
  let i00 = ((n * p.height + 2u * oy) * p.width + 2u * ox) * p.channels + c;
  var best = i00;
  var best_value = x[i00];
  let i01 = i00 + p.channels;
  let v01 = x[i01];
  if (v01 > best_value) { best = i01; best_value = v01; }
  let i10 = i00 + row_stride;
  let v10 = x[i10];
  if (v10 > best_value) { best = i10; best_value = v10; }
  let i11 = i10 + p.channels;
  let v11 = x[i11];
  if (v11 > best_value) { best = i11; best_value = v11; }
  out[o] = best_value;
  argmax[o] = best;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn maxpool_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
  let p = params;
  let i = linear_index(wid, nwg, lid);
  if (i >= p.batch * p.height * p.width * p.channels) { return; }
  let c = i % p.channels;
  let pixel = i / p.channels;
  let ix = pixel % p.width;
  let rows = pixel / p.width;
  let iy = rows % p.height;
  let n = rows / p.height;
  let ox = ix / 2u;
  let oy = iy / 2u;
  var g = 0.0;
  if (ox < p.out_width && oy < p.out_height) {
    let o = ((n * p.out_height + oy) * p.out_width + ox) * p.channels + c;
    if (argmax_in[o] == i) { g = dy[o]; }
  }
  dx[i] = g;
}
