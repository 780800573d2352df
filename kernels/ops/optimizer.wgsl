// Optimizer updates over the flat parameter buffer, one element per invocation, after
// torch.optim.AdamW and torch.optim.SGD (momentum, dampening 0, no Nesterov).
// Gradients arrive as SUMS over the step's samples; `grad_scale` (1 / samples) turns them into means.

override WORKGROUP_SIZE: u32 = 256u;
/**
 * Elements per invocation: a workgroup updates WORKGROUP_SIZE · ELEMENTS_PER_THREAD consecutive
 * elements, the e-th pass of its threads the e-th WORKGROUP_SIZE of them (adjacent threads, adjacent
 * elements). Each element's arithmetic is the same whatever the variant, so every variant gives the
 * same bits.
 */
override ELEMENTS_PER_THREAD: u32 = 1u;

struct AdamWParams {
  size: u32,
  grad_scale: f32,
  beta1: f32,
  beta2: f32,
  /// 1 - beta1 and 1 - beta2 computed in float64 (as torch does): 1 - f32(0.999) in float32 is off by 1e-5.
  one_minus_beta1: f32,
  one_minus_beta2: f32,
  eps: f32,
  /// 1 - lr * weight_decay: decoupled decay, applied to the parameter before the Adam step.
  decay_factor: f32,
  /// lr / (1 - beta1^t).
  step_size: f32,
  /// 1 / sqrt(1 - beta2^t).
  inv_sqrt_bias_correction2: f32,
}

struct SgdParams {
  size: u32,
  grad_scale: f32,
  lr: f32,
  momentum: f32,
  weight_decay: f32,
}

@group(0) @binding(0) var<uniform> adamw_params: AdamWParams;
@group(0) @binding(0) var<uniform> sgd_params: SgdParams;
// read_write although only read: WebGPU forbids one buffer in a dispatch as both read-only and
// writable storage, and callers may keep gradients and optimizer state as views of one flat buffer.
@group(0) @binding(1) var<storage, read_write> param: array<f32>;
@group(0) @binding(2) var<storage, read_write> grad: array<f32>;
/// AdamW: first moment m; SGD: momentum buffer.
@group(0) @binding(3) var<storage, read_write> moment1: array<f32>;
/// AdamW: second moment v.
@group(0) @binding(4) var<storage, read_write> moment2: array<f32>;

/** The first element of this invocation: element e of it is first + e · WORKGROUP_SIZE. */
fn first_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE * ELEMENTS_PER_THREAD + lid;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn adamw(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
  let first = first_index(wid, nwg, lid);
  for (var e = 0u; e < ELEMENTS_PER_THREAD; e++) { adamw_element(first + e * WORKGROUP_SIZE); }
}

fn adamw_element(i: u32) {
  let p = adamw_params;
  if (i >= p.size) { return; }
  let g = grad[i] * p.grad_scale;
  let m = p.beta1 * moment1[i] + p.one_minus_beta1 * g;
  let v = p.beta2 * moment2[i] + p.one_minus_beta2 * g * g;
  moment1[i] = m;
  moment2[i] = v;
  let denom = sqrt(v) * p.inv_sqrt_bias_correction2 + p.eps;
  param[i] = param[i] * p.decay_factor - p.step_size * m / denom;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn sgd_momentum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  let first = first_index(wid, nwg, lid);
  for (var e = 0u; e < ELEMENTS_PER_THREAD; e++) { sgd_element(first + e * WORKGROUP_SIZE); }
}

fn sgd_element(i: u32) {
  let p = sgd_params;
  if (i >= p.size) { return; }
  let w = param[i];
  let g = grad[i] * p.grad_scale + p.weight_decay * w;
  // torch initialises the buffer to the first gradient; a zero buffer gives the same: 0·momentum + g.
  let b = p.momentum * moment1[i] + g;
  moment1[i] = b;
  param[i] = w - p.lr * b;
}
