// Token + position embedding for a byte/token language model, rows = batch·context:
//   embed_forward:        out[r, d] = wte[tok[r], d] + wpe[r mod context, d]
//   embed_backward_tokens: dwte[v, d] (+)= Σ_{r: tok[r] = v} dout[r, d]
//   embed_backward_positions: dwpe[t, d] = Σ_b dout[b·context + t, d]
// The backward passes are scatter-adds written as gathers so they need no float atomics and are
// bit-reproducible: one invocation owns one vocabulary row (walking the rows r in ascending order)
// or one (position, column) pair (walking the batch in order). The token pass is parallel over the
// vocabulary only (256 invocations for bytes), which is plenty for tiny models on a CPU adapter.
// A token ≥ vocab makes its output row NaN (bad data must not train silently).

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
  rows: u32,
  context: u32,
  dim: u32,
  vocab: u32,
  /// embed_backward_tokens: 1 adds into dwte (the tied output projection wrote it first), 0 overwrites.
  accumulate: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// read_write although some are only read: tensors are views of a few flat buffers (see matmul.wgsl).
@group(0) @binding(1) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(2) var<storage, read_write> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> positions: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn embed_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  let p = params;
  if (i >= p.rows * p.dim) { return; }
  let r = i / p.dim;
  let d = i % p.dim;
  let token = tokens[r];
  let t = r % p.context;
  if (token >= p.vocab) {
    out[i] = bitcast<f32>(0x7fc00000u | token);
    return;
  }
  out[i] = table[token * p.dim + d] + positions[t * p.dim + d];
}

// Backward bindings (each entry point uses bindings 0..n-1, as bindBuffers binds them in order):
// tokens: tokens (1), dout (2), dwte (3); positions: dout (1), dwpe (2).
@group(0) @binding(2) var<storage, read_write> dout: array<f32>;
@group(0) @binding(3) var<storage, read_write> dtable: array<f32>;
@group(0) @binding(1) var<storage, read_write> dout_rows: array<f32>;
@group(0) @binding(2) var<storage, read_write> dpositions: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn embed_backward_tokens(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
  let v = linear_index(wid, nwg, lid);
  let p = params;
  if (v >= p.vocab) { return; }
  let base = v * p.dim;
  if (p.accumulate == 0u) {
    for (var d = 0u; d < p.dim; d++) { dtable[base + d] = 0.0; }
  }
  for (var r = 0u; r < p.rows; r++) {
    if (tokens[r] != v) { continue; }
    let src = r * p.dim;
    for (var d = 0u; d < p.dim; d++) { dtable[base + d] += dout[src + d]; }
  }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn embed_backward_positions(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32) {
  let i = linear_index(wid, nwg, lid);
  let p = params;
  if (i >= p.context * p.dim) { return; }
  let batch = p.rows / p.context;
  var sum = 0.0;
  for (var b = 0u; b < batch; b++) { sum += dout_rows[b * p.context * p.dim + i]; }
  dpositions[i] = sum;
}
