// Accuracy count: correct[0] = #{ r < rows : argmax_j logits[r, j] == labels[r] }, ties going to the
// lowest index (strict >), like numpy/torch argmax. One workgroup: thread t counts rows t, t+W, ...,
// then a tree reduction adds the W counts (integer, so any order is exact; no atomics needed either).

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
  rows: u32,
  classes: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// read_write although only read: tensors may be disjoint views of one flat buffer (see matmul.wgsl).
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> labels: array<u32>;
@group(0) @binding(3) var<storage, read_write> correct: array<u32>;

var<workgroup> partial: array<u32, WORKGROUP_SIZE>;

fn argmax_row(r: u32) -> u32 {
  let base = r * params.classes;
  var best = 0u;
  var top = logits[base];
  for (var j = 1u; j < params.classes; j++) {
    let v = logits[base + j];
    if (v > top) { top = v; best = j; }
  }
  return best;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn count_correct(@builtin(local_invocation_index) t: u32) {
  var mine = 0u;
  if (params.classes > 0u) {
    for (var r = t; r < params.rows; r += WORKGROUP_SIZE) {
      if (argmax_row(r) == labels[r]) { mine += 1u; }
    }
  }
  partial[t] = mine;
  for (var stride = WORKGROUP_SIZE / 2u; stride > 0u; stride /= 2u) {
    workgroupBarrier();
    if (t < stride) { partial[t] += partial[t + stride]; }
  }
  if (t == 0u) { correct[0] = partial[0]; }
}
