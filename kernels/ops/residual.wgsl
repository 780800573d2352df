// Residual add: out = a + b, one element per invocation (2-D dispatch folded in, see dispatch1d).
// Its backward needs no kernel: the gradient of the residual stream flows to both operands, and the
// LayerNorm input-gradient kernel adds its branch's contribution into that buffer (`accumulate`).

override WORKGROUP_SIZE: u32 = 256u;

struct Params {
  size: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// read_write although only read: tensors are views of a few flat buffers (see matmul.wgsl).
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn residual_add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  if (i >= params.size) { return; }
  out[i] = a[i] + b[i];
}
