// Fused softmax + cross-entropy over logits [rows, classes] with integer labels [rows]:
//   loss[0]       = Σ_r ( log Σ_j exp(z_rj − max_r) − (z_r,label − max_r) )     (a SUM over rows)
//   dlogits[r, j] = softmax(z_r)_j − [j == label_r]                             (not divided by rows)
// Max-subtraction keeps exp finite for any logits. The loss sum must be reproducible bit for bit
// (ranks compare parameter hashes), so there are no float atomics: ONE workgroup walks the rows
// (thread t takes rows t, t+W, ...), then a fixed-shape tree reduction in workgroup memory adds the
// W partial sums. Batches here are hundreds of rows × 10 classes, so one workgroup is plenty.
// A label outside [0, classes) makes the loss NaN (bad data must not train silently).
// `scale` multiplies both the loss and dlogits: 1 for a classifier (one row per sample); 1/context
// for a language model, whose per-sample loss is the mean over the sample's positions.

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
  rows: u32,
  classes: u32,
  scale: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
// read_write although only read: tensors may be disjoint views of one flat buffer (see matmul.wgsl).
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> labels: array<u32>;
@group(0) @binding(3) var<storage, read_write> loss: array<f32>;
@group(0) @binding(4) var<storage, read_write> dlogits: array<f32>;

var<workgroup> partial: array<f32, WORKGROUP_SIZE>;

fn row_loss(r: u32) -> f32 {
  let classes = params.classes;
  let base = r * classes;
  var top = logits[base];
  for (var j = 1u; j < classes; j++) { top = max(top, logits[base + j]); }
  var sum = 0.0;
  for (var j = 0u; j < classes; j++) {
    let e = exp(logits[base + j] - top);
    dlogits[base + j] = e;
    sum += e;
  }
  let label = labels[r];
  let inv = 1.0 / sum;
  for (var j = 0u; j < classes; j++) {
    dlogits[base + j] = (dlogits[base + j] * inv - select(0.0, 1.0, j == label)) * params.scale;
  }
  // Built from the runtime label: a NaN constant is not representable in WGSL.
  if (label >= classes) { return bitcast<f32>(0x7fc00000u | label); }
  return log(sum) - (logits[base + label] - top);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn softmax_xent(@builtin(local_invocation_index) t: u32) {
  var mine = 0.0;
  for (var r = t; r < params.rows; r += WORKGROUP_SIZE) { mine += row_loss(r); }
  partial[t] = mine;
  // WORKGROUP_SIZE is a power of two (host-checked).
  for (var stride = WORKGROUP_SIZE / 2u; stride > 0u; stride /= 2u) {
    workgroupBarrier();
    if (t < stride) { partial[t] += partial[t + stride]; }
  }
  if (t == 0u) { loss[0] = partial[0] * params.scale; }
}
