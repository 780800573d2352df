// Causal multi-head self-attention core, between the QKV projection and the output projection
// (both plain matmuls). qkv is [batch, context, 3·dim]: columns [0, dim) are the queries,
// [dim, 2·dim) the keys, [2·dim, 3·dim) the values; head h owns columns h·hd .. (h+1)·hd of each
// (hd = dim / heads), as GPT-2's c_attn split. With s_ij = scale·q_i·k_j for j ≤ i (scale = 1/√hd):
//   attention_forward:        p_ij = softmax_j(s_ij) over j ≤ i (0 above the diagonal, kept in probs
//                             [batch, heads, context, context] for the backward); y_i = Σ_j p_ij v_j.
//   attention_backward_query: dp_ij = dy_i·v_j; ds_ij = p_ij·(dp_ij − Σ_k p_ik dp_ik) (into dscores);
//                             dq_i = scale·Σ_j ds_ij k_j.
//   attention_backward_key_value: dk_j = scale·Σ_{i≥j} ds_ij q_i; dv_j = Σ_{i≥j} p_ij dy_i.
// One invocation per (batch, head, row): each owns its output row, every sum runs in a fixed order
// (bit-reproducible, no atomics, no barriers: SwiftShader pays dearly for barriers).

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
  batch: u32,
  context: u32,
  dim: u32,
  heads: u32,
  scale: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
// read_write although some are only read: tensors are views of a few flat buffers (see matmul.wgsl).
@group(0) @binding(1) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> probs: array<f32>;
// forward: y (3)
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
// backward: dy (3), dscores (4), dqkv (5)
@group(0) @binding(3) var<storage, read_write> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dscores: array<f32>;
@group(0) @binding(5) var<storage, read_write> dqkv: array<f32>;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

/// The (batch, head, row) of invocation n, or false when n is past the end.
struct Item {
  b: u32,
  h: u32,
  i: u32,
  /// Start of row i of this (batch, head)'s [context, context] score matrix.
  score_row: u32,
  /// Start of token row i of batch b in qkv ([.., 3·dim]) and in y/dy ([.., dim]).
  qkv_row: u32,
  y_row: u32,
  /// First column of head h.
  col: u32,
  hd: u32,
  ok: bool,
}

fn item(n: u32) -> Item {
  let p = params;
  var it: Item;
  it.ok = n < p.batch * p.heads * p.context;
  it.i = n % p.context;
  it.h = (n / p.context) % p.heads;
  it.b = n / (p.context * p.heads);
  it.hd = p.dim / p.heads;
  it.col = it.h * it.hd;
  it.score_row = ((it.b * p.heads + it.h) * p.context + it.i) * p.context;
  it.qkv_row = (it.b * p.context + it.i) * 3u * p.dim;
  it.y_row = (it.b * p.context + it.i) * p.dim;
  return it;
}

/// Offset in qkv of token j of batch b, part (0 q, 1 k, 2 v), head column `col`.
fn qkv_at(b: u32, j: u32, part: u32, col: u32) -> u32 {
  return (b * params.context + j) * 3u * params.dim + part * params.dim + col;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn attention_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
  let it = item(linear_index(wid, nwg, lid));
  if (!it.ok) { return; }
  let q = it.qkv_row + it.col;
  var top = -3.4e38;
  for (var j = 0u; j <= it.i; j++) {
    let k = qkv_at(it.b, j, 1u, it.col);
    var s = 0.0;
    for (var d = 0u; d < it.hd; d++) { s += qkv[q + d] * qkv[k + d]; }
    s *= params.scale;
    probs[it.score_row + j] = s;
    top = max(top, s);
  }
  var sum = 0.0;
  for (var j = 0u; j <= it.i; j++) {
    let e = exp(probs[it.score_row + j] - top);
    probs[it.score_row + j] = e;
    sum += e;
  }
  let inv = 1.0 / sum;
  for (var j = 0u; j <= it.i; j++) { probs[it.score_row + j] *= inv; }
  for (var j = it.i + 1u; j < params.context; j++) { probs[it.score_row + j] = 0.0; }
  for (var d = 0u; d < it.hd; d++) {
    var acc = 0.0;
    for (var j = 0u; j <= it.i; j++) { acc += probs[it.score_row + j] * qkv[qkv_at(it.b, j, 2u, it.col + d)]; }
    y[it.y_row + it.col + d] = acc;
  }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn attention_backward_query(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32) {
  let it = item(linear_index(wid, nwg, lid));
  if (!it.ok) { return; }
  let g = it.y_row + it.col;
  var dot_pdp = 0.0;
  for (var j = 0u; j <= it.i; j++) {
    let v = qkv_at(it.b, j, 2u, it.col);
    var dp = 0.0;
    for (var d = 0u; d < it.hd; d++) { dp += dy[g + d] * qkv[v + d]; }
    dscores[it.score_row + j] = dp;
    dot_pdp += probs[it.score_row + j] * dp;
  }
  for (var j = 0u; j <= it.i; j++) {
    let s = it.score_row + j;
    dscores[s] = probs[s] * (dscores[s] - dot_pdp);
  }
  for (var j = it.i + 1u; j < params.context; j++) { dscores[it.score_row + j] = 0.0; }
  for (var d = 0u; d < it.hd; d++) {
    var acc = 0.0;
    for (var j = 0u; j <= it.i; j++) { acc += dscores[it.score_row + j] * qkv[qkv_at(it.b, j, 1u, it.col + d)]; }
    dqkv[it.qkv_row + it.col + d] = params.scale * acc;
  }
}

/// Invocation n owns key/value row j = it.i: it walks the query rows i ≥ j of column j.
@compute @workgroup_size(WORKGROUP_SIZE)
fn attention_backward_key_value(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                @builtin(local_invocation_index) lid: u32) {
  let it = item(linear_index(wid, nwg, lid));
  if (!it.ok) { return; }
  let j = it.i;
  let ctx = params.context;
  // Column j of this (batch, head)'s score matrices starts at row 0: score_row - i·ctx + j.
  let column = it.score_row - j * ctx + j;
  for (var d = 0u; d < it.hd; d++) {
    var dk = 0.0;
    var dv = 0.0;
    for (var i = j; i < ctx; i++) {
      let s = column + i * ctx;
      dk += dscores[s] * qkv[qkv_at(it.b, i, 0u, it.col + d)];
      dv += probs[s] * dy[(it.b * ctx + i) * params.dim + it.col + d];
    }
    dqkv[it.qkv_row + params.dim + it.col + d] = params.scale * dk;
    dqkv[it.qkv_row + 2u * params.dim + it.col + d] = dv;
  }
}
