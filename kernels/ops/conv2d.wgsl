// Direct 2-D convolution, stride 1, zero padding, NHWC activations, HWIO weights [k, k, cin, cout].
//
// Why this shape (SwiftShader, docs/chromium.md): the CPU emulation runs 4 invocations as the 4 lanes of
// one SIMD register; every storage load is a masked 4-lane gather that costs far more than a
// multiply-add, while barriers and workgroup memory are expensive. So every invocation owns a register
// tile and reuses each loaded value many times, with no workgroup memory and no barriers:
// - conv2d_forward:         4 or 8 (WIDE) output channels × PIXELS_PER_THREAD output pixels of a row;
// - conv2d_backward_input:  4 or 8 (WIDE) input channels × PIXELS_PER_THREAD input pixels of a row;
// - conv2d_backward_filter: 4 or 8 (WIDE) output channels × TAPS_PER_THREAD consecutive kx taps of
//   dw, summing over batch and positions sequentially (deterministic, no float atomics).
// Along the row, the pixels (or taps) of a tile read overlapping input columns: a sliding window of
// registers loads ONE new column per kernel step instead of one per pixel.
// Channel tiles are one or two (WIDE) vec4 accumulators per pixel.
// The tile is unrolled by hand behind override-constant conditions (Tint does not unroll loops, and
// dynamically indexed private arrays stay in memory on SwiftShader); the conditions fold at pipeline
// creation. Partial tiles read clamped addresses and mask what they store; zero padding reads a
// clamped address and selects 0.

override WORKGROUP_SIZE: u32 = 64u;
/// Output (forward) or input (backward_input) pixels along the row per invocation: 1..8.
override PIXELS_PER_THREAD: u32 = 4u;
/// Consecutive kernel columns (kx) of dw per invocation in backward_filter: 1..8.
override TAPS_PER_THREAD: u32 = 4u;
/// Channels per invocation: 8 (two vec4 accumulators per pixel, `WIDE`) or 4 (one).
override WIDE: bool = false;
/// Forward only: apply max(0, ·) after the bias.
override RELU: bool = false;

fn channels_per_thread() -> u32 {
  return select(4u, 8u, WIDE);
}

struct Params {
  batch: u32,
  height: u32,
  width: u32,
  in_channels: u32,
  out_channels: u32,
  kernel: u32,
  pad: u32,
  out_height: u32,
  out_width: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// Every tensor is read_write although some are only read: WebGPU forbids one buffer in a dispatch as
// both read-only and writable storage, and the model's tensors are views of a few flat buffers.
// conv2d_forward: x, w, bias -> y
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
// conv2d_backward_input: dy, w -> dx
@group(0) @binding(1) var<storage, read_write> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;
// conv2d_backward_filter: x, dy -> dw
@group(0) @binding(2) var<storage, read_write> dy_for_filter: array<f32>;
@group(0) @binding(3) var<storage, read_write> dw: array<f32>;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

/// Offsets first + 0..3, clamped to the last channel so a partial tile reads real (unused) values.
fn channel_quad(first: u32, channels: u32) -> vec4<u32> {
  return min(vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(channels - 1u));
}

/// x[row pixel + column c, channel ci], or 0 outside the row (zero padding).
fn input_at(row: u32, c: i32, ci: u32) -> f32 {
  let w = i32(params.width);
  let v = x[(row + u32(clamp(c, 0, w - 1))) * params.in_channels + ci];
  return select(0.0, v, c >= 0 && c < w);
}

/// dy[row pixel + column c, channel co], or 0 outside the output row.
fn grad_at(row: u32, c: i32, co: u32) -> f32 {
  let w = i32(params.out_width);
  let v = dy[(row + u32(clamp(c, 0, w - 1))) * params.out_channels + co];
  return select(0.0, v, c >= 0 && c < w);
}

fn weights4(base: u32, offsets: vec4<u32>) -> vec4<f32> {
  return vec4<f32>(w[base + offsets.x], w[base + offsets.y], w[base + offsets.z], w[base + offsets.w]);
}

fn finish_forward(acc: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
  if (RELU) { return max(acc + b, vec4<f32>(0.0)); }
  return acc + b;
}

// Stores of a channel quad; lanes at or past `channels` are dropped.
fn store_y(i: u32, v: vec4<f32>, first: u32, channels: u32) {
  if (first < channels) { y[i] = v.x; }
  if (first + 1u < channels) { y[i + 1u] = v.y; }
  if (first + 2u < channels) { y[i + 2u] = v.z; }
  if (first + 3u < channels) { y[i + 3u] = v.w; }
}

fn store_dx(i: u32, v: vec4<f32>, first: u32, channels: u32) {
  if (first < channels) { dx[i] = v.x; }
  if (first + 1u < channels) { dx[i + 1u] = v.y; }
  if (first + 2u < channels) { dx[i + 2u] = v.z; }
  if (first + 3u < channels) { dx[i + 3u] = v.w; }
}

fn store_dw(i: u32, v: vec4<f32>, first: u32, channels: u32) {
  if (first < channels) { dw[i] = v.x; }
  if (first + 1u < channels) { dw[i + 1u] = v.y; }
  if (first + 2u < channels) { dw[i + 2u] = v.z; }
  if (first + 3u < channels) { dw[i + 3u] = v.w; }
}

// y[n, oy, ox, co] = bias[co] + Σ_{ky, kx, ci} x[n, oy + ky − pad, ox + kx − pad, ci] · w[ky, kx, ci, co]
@compute @workgroup_size(WORKGROUP_SIZE)
fn conv2d_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let p = params;
  let cin = p.in_channels;
  let cout = p.out_channels;
  let channel_blocks = (cout + channels_per_thread() - 1u) / channels_per_thread();
  let pixel_blocks = (p.out_width + PIXELS_PER_THREAD - 1u) / PIXELS_PER_THREAD;
  let t = linear_index(wid, nwg, lid);
  if (t >= p.batch * p.out_height * pixel_blocks * channel_blocks) { return; }
  // Channel block fastest: neighbouring invocations read the same input pixels.
  let co0 = (t % channel_blocks) * channels_per_thread();
  let rest = t / channel_blocks;
  let ox0 = (rest % pixel_blocks) * PIXELS_PER_THREAD;
  let rows = rest / pixel_blocks;
  let oy = rows % p.out_height;
  let n = rows / p.out_height;
  let qa = channel_quad(co0, cout);
  let qb = channel_quad(co0 + 4u, cout);

  var acc0a = vec4<f32>(0.0);
  var acc0b = vec4<f32>(0.0);
  var acc1a = vec4<f32>(0.0);
  var acc1b = vec4<f32>(0.0);
  var acc2a = vec4<f32>(0.0);
  var acc2b = vec4<f32>(0.0);
  var acc3a = vec4<f32>(0.0);
  var acc3b = vec4<f32>(0.0);
  var acc4a = vec4<f32>(0.0);
  var acc4b = vec4<f32>(0.0);
  var acc5a = vec4<f32>(0.0);
  var acc5b = vec4<f32>(0.0);
  var acc6a = vec4<f32>(0.0);
  var acc6b = vec4<f32>(0.0);
  var acc7a = vec4<f32>(0.0);
  var acc7b = vec4<f32>(0.0);
  let c0 = i32(ox0) - i32(p.pad);
  for (var ky = 0u; ky < p.kernel; ky++) {
    let iy = i32(oy + ky) - i32(p.pad);
    if (iy < 0 || iy >= i32(p.height)) { continue; }
    let row = (n * p.height + u32(iy)) * p.width;
    for (var ci = 0u; ci < cin; ci++) {
      // Pixel j of the tile reads column c0 + kx + j: x0..x7 hold the window for the current kx.
      var x0 = 0.0; var x1 = 0.0; var x2 = 0.0; var x3 = 0.0; var x4 = 0.0; var x5 = 0.0; var x6 = 0.0; var x7 = 0.0;
      if (PIXELS_PER_THREAD > 1u) { x0 = input_at(row, c0, ci); }
      if (PIXELS_PER_THREAD > 2u) { x1 = input_at(row, c0 + 1, ci); }
      if (PIXELS_PER_THREAD > 3u) { x2 = input_at(row, c0 + 2, ci); }
      if (PIXELS_PER_THREAD > 4u) { x3 = input_at(row, c0 + 3, ci); }
      if (PIXELS_PER_THREAD > 5u) { x4 = input_at(row, c0 + 4, ci); }
      if (PIXELS_PER_THREAD > 6u) { x5 = input_at(row, c0 + 5, ci); }
      if (PIXELS_PER_THREAD > 7u) { x6 = input_at(row, c0 + 6, ci); }
      var c = c0 + i32(PIXELS_PER_THREAD) - 1;
      var wi = (ky * p.kernel * cin + ci) * cout;
      for (var kx = 0u; kx < p.kernel; kx++) {
        let fresh = input_at(row, c, ci);
        if (PIXELS_PER_THREAD == 1u) { x0 = fresh; }
        else if (PIXELS_PER_THREAD == 2u) { x1 = fresh; }
        else if (PIXELS_PER_THREAD == 3u) { x2 = fresh; }
        else if (PIXELS_PER_THREAD == 4u) { x3 = fresh; }
        else if (PIXELS_PER_THREAD == 5u) { x4 = fresh; }
        else if (PIXELS_PER_THREAD == 6u) { x5 = fresh; }
        else if (PIXELS_PER_THREAD == 7u) { x6 = fresh; }
        else if (PIXELS_PER_THREAD == 8u) { x7 = fresh; }
        let wa = weights4(wi, qa);
        var wb = vec4<f32>(0.0);
        if (WIDE) { wb = weights4(wi, qb); }
        acc0a += x0 * wa; if (WIDE) { acc0b += x0 * wb; }
        if (PIXELS_PER_THREAD > 1u) { acc1a += x1 * wa; if (WIDE) { acc1b += x1 * wb; } }
        if (PIXELS_PER_THREAD > 2u) { acc2a += x2 * wa; if (WIDE) { acc2b += x2 * wb; } }
        if (PIXELS_PER_THREAD > 3u) { acc3a += x3 * wa; if (WIDE) { acc3b += x3 * wb; } }
        if (PIXELS_PER_THREAD > 4u) { acc4a += x4 * wa; if (WIDE) { acc4b += x4 * wb; } }
        if (PIXELS_PER_THREAD > 5u) { acc5a += x5 * wa; if (WIDE) { acc5b += x5 * wb; } }
        if (PIXELS_PER_THREAD > 6u) { acc6a += x6 * wa; if (WIDE) { acc6b += x6 * wb; } }
        if (PIXELS_PER_THREAD > 7u) { acc7a += x7 * wa; if (WIDE) { acc7b += x7 * wb; } }
        x0 = x1; x1 = x2; x2 = x3; x3 = x4; x4 = x5; x5 = x6; x6 = x7;
        c += 1;
        wi += cin * cout;
      }
    }
  }

  let ba = vec4<f32>(bias[qa.x], bias[qa.y], bias[qa.z], bias[qa.w]);
  var bb = vec4<f32>(0.0);
  if (WIDE) { bb = vec4<f32>(bias[qb.x], bias[qb.y], bias[qb.z], bias[qb.w]); }
  let base = ((n * p.out_height + oy) * p.out_width + ox0) * cout + co0;
  store_y(base, finish_forward(acc0a, ba), co0, cout);
  if (WIDE) { store_y(base + 4u, finish_forward(acc0b, bb), co0 + 4u, cout); }
  if (PIXELS_PER_THREAD > 1u && ox0 + 1u < p.out_width) {
    store_y(base + cout, finish_forward(acc1a, ba), co0, cout);
    if (WIDE) { store_y(base + cout + 4u, finish_forward(acc1b, bb), co0 + 4u, cout); }
  }
  if (PIXELS_PER_THREAD > 2u && ox0 + 2u < p.out_width) {
    store_y(base + 2u * cout, finish_forward(acc2a, ba), co0, cout);
    if (WIDE) { store_y(base + 2u * cout + 4u, finish_forward(acc2b, bb), co0 + 4u, cout); }
  }
  if (PIXELS_PER_THREAD > 3u && ox0 + 3u < p.out_width) {
    store_y(base + 3u * cout, finish_forward(acc3a, ba), co0, cout);
    if (WIDE) { store_y(base + 3u * cout + 4u, finish_forward(acc3b, bb), co0 + 4u, cout); }
  }
  if (PIXELS_PER_THREAD > 4u && ox0 + 4u < p.out_width) {
    store_y(base + 4u * cout, finish_forward(acc4a, ba), co0, cout);
    if (WIDE) { store_y(base + 4u * cout + 4u, finish_forward(acc4b, bb), co0 + 4u, cout); }
  }
  if (PIXELS_PER_THREAD > 5u && ox0 + 5u < p.out_width) {
    store_y(base + 5u * cout, finish_forward(acc5a, ba), co0, cout);
    if (WIDE) { store_y(base + 5u * cout + 4u, finish_forward(acc5b, bb), co0 + 4u, cout); }
  }
  if (PIXELS_PER_THREAD > 6u && ox0 + 6u < p.out_width) {
    store_y(base + 6u * cout, finish_forward(acc6a, ba), co0, cout);
    if (WIDE) { store_y(base + 6u * cout + 4u, finish_forward(acc6b, bb), co0 + 4u, cout); }
  }
  if (PIXELS_PER_THREAD > 7u && ox0 + 7u < p.out_width) {
    store_y(base + 7u * cout, finish_forward(acc7a, ba), co0, cout);
    if (WIDE) { store_y(base + 7u * cout + 4u, finish_forward(acc7b, bb), co0 + 4u, cout); }
  }
}

// dx[n, iy, ix, ci] = Σ_{ky, kx, co} dy[n, iy + pad − ky, ix + pad − kx, co] · w[ky, kx, ci, co]
@compute @workgroup_size(WORKGROUP_SIZE)
fn conv2d_backward_input(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
  let p = params;
  let cin = p.in_channels;
  let cout = p.out_channels;
  let channel_blocks = (cin + channels_per_thread() - 1u) / channels_per_thread();
  let pixel_blocks = (p.width + PIXELS_PER_THREAD - 1u) / PIXELS_PER_THREAD;
  let t = linear_index(wid, nwg, lid);
  if (t >= p.batch * p.height * pixel_blocks * channel_blocks) { return; }
  let ci0 = (t % channel_blocks) * channels_per_thread();
  let rest = t / channel_blocks;
  let ix0 = (rest % pixel_blocks) * PIXELS_PER_THREAD;
  let rows = rest / pixel_blocks;
  let iy = rows % p.height;
  let n = rows / p.height;
  // Weight offsets of the tile's input channels within one tap: w[., ., ci, co] at ci·cout + co.
  let qa = channel_quad(ci0, cin) * cout;
  let qb = channel_quad(ci0 + 4u, cin) * cout;
  let tap_stride = cin * cout;

  var acc0a = vec4<f32>(0.0);
  var acc0b = vec4<f32>(0.0);
  var acc1a = vec4<f32>(0.0);
  var acc1b = vec4<f32>(0.0);
  var acc2a = vec4<f32>(0.0);
  var acc2b = vec4<f32>(0.0);
  var acc3a = vec4<f32>(0.0);
  var acc3b = vec4<f32>(0.0);
  var acc4a = vec4<f32>(0.0);
  var acc4b = vec4<f32>(0.0);
  var acc5a = vec4<f32>(0.0);
  var acc5b = vec4<f32>(0.0);
  var acc6a = vec4<f32>(0.0);
  var acc6b = vec4<f32>(0.0);
  var acc7a = vec4<f32>(0.0);
  var acc7b = vec4<f32>(0.0);
  // Pixel j of the tile at kernel column kx reads dy column ix0 + j + pad − kx; walking kx downwards
  // from k − 1 makes that column increase by one per step, like the forward window.
  let c0 = i32(ix0 + p.pad) - i32(p.kernel - 1u);
  for (var ky = 0u; ky < p.kernel; ky++) {
    let oy = i32(iy + p.pad) - i32(ky);
    if (oy < 0 || oy >= i32(p.out_height)) { continue; }
    let row = (n * p.out_height + u32(oy)) * p.out_width;
    for (var co = 0u; co < cout; co++) {
      var g0 = 0.0; var g1 = 0.0; var g2 = 0.0; var g3 = 0.0; var g4 = 0.0; var g5 = 0.0; var g6 = 0.0; var g7 = 0.0;
      if (PIXELS_PER_THREAD > 1u) { g0 = grad_at(row, c0, co); }
      if (PIXELS_PER_THREAD > 2u) { g1 = grad_at(row, c0 + 1, co); }
      if (PIXELS_PER_THREAD > 3u) { g2 = grad_at(row, c0 + 2, co); }
      if (PIXELS_PER_THREAD > 4u) { g3 = grad_at(row, c0 + 3, co); }
      if (PIXELS_PER_THREAD > 5u) { g4 = grad_at(row, c0 + 4, co); }
      if (PIXELS_PER_THREAD > 6u) { g5 = grad_at(row, c0 + 5, co); }
      if (PIXELS_PER_THREAD > 7u) { g6 = grad_at(row, c0 + 6, co); }
      var c = c0 + i32(PIXELS_PER_THREAD) - 1;
      var wi = (ky * p.kernel + p.kernel - 1u) * tap_stride + co;
      for (var step = 0u; step < p.kernel; step++) {
        let fresh = grad_at(row, c, co);
        if (PIXELS_PER_THREAD == 1u) { g0 = fresh; }
        else if (PIXELS_PER_THREAD == 2u) { g1 = fresh; }
        else if (PIXELS_PER_THREAD == 3u) { g2 = fresh; }
        else if (PIXELS_PER_THREAD == 4u) { g3 = fresh; }
        else if (PIXELS_PER_THREAD == 5u) { g4 = fresh; }
        else if (PIXELS_PER_THREAD == 6u) { g5 = fresh; }
        else if (PIXELS_PER_THREAD == 7u) { g6 = fresh; }
        else if (PIXELS_PER_THREAD == 8u) { g7 = fresh; }
        let wa = weights4(wi, qa);
        var wb = vec4<f32>(0.0);
        if (WIDE) { wb = weights4(wi, qb); }
        acc0a += g0 * wa; if (WIDE) { acc0b += g0 * wb; }
        if (PIXELS_PER_THREAD > 1u) { acc1a += g1 * wa; if (WIDE) { acc1b += g1 * wb; } }
        if (PIXELS_PER_THREAD > 2u) { acc2a += g2 * wa; if (WIDE) { acc2b += g2 * wb; } }
        if (PIXELS_PER_THREAD > 3u) { acc3a += g3 * wa; if (WIDE) { acc3b += g3 * wb; } }
        if (PIXELS_PER_THREAD > 4u) { acc4a += g4 * wa; if (WIDE) { acc4b += g4 * wb; } }
        if (PIXELS_PER_THREAD > 5u) { acc5a += g5 * wa; if (WIDE) { acc5b += g5 * wb; } }
        if (PIXELS_PER_THREAD > 6u) { acc6a += g6 * wa; if (WIDE) { acc6b += g6 * wb; } }
        if (PIXELS_PER_THREAD > 7u) { acc7a += g7 * wa; if (WIDE) { acc7b += g7 * wb; } }
        g0 = g1; g1 = g2; g2 = g3; g3 = g4; g4 = g5; g5 = g6; g6 = g7;
        c += 1;
        wi -= tap_stride;  // wraps after the last step; never read then
      }
    }
  }

  let base = ((n * p.height + iy) * p.width + ix0) * cin + ci0;
  store_dx(base, acc0a, ci0, cin);
  if (WIDE) { store_dx(base + 4u, acc0b, ci0 + 4u, cin); }
  if (PIXELS_PER_THREAD > 1u && ix0 + 1u < p.width) {
    store_dx(base + cin, acc1a, ci0, cin);
    if (WIDE) { store_dx(base + cin + 4u, acc1b, ci0 + 4u, cin); }
  }
  if (PIXELS_PER_THREAD > 2u && ix0 + 2u < p.width) {
    store_dx(base + 2u * cin, acc2a, ci0, cin);
    if (WIDE) { store_dx(base + 2u * cin + 4u, acc2b, ci0 + 4u, cin); }
  }
  if (PIXELS_PER_THREAD > 3u && ix0 + 3u < p.width) {
    store_dx(base + 3u * cin, acc3a, ci0, cin);
    if (WIDE) { store_dx(base + 3u * cin + 4u, acc3b, ci0 + 4u, cin); }
  }
  if (PIXELS_PER_THREAD > 4u && ix0 + 4u < p.width) {
    store_dx(base + 4u * cin, acc4a, ci0, cin);
    if (WIDE) { store_dx(base + 4u * cin + 4u, acc4b, ci0 + 4u, cin); }
  }
  if (PIXELS_PER_THREAD > 5u && ix0 + 5u < p.width) {
    store_dx(base + 5u * cin, acc5a, ci0, cin);
    if (WIDE) { store_dx(base + 5u * cin + 4u, acc5b, ci0 + 4u, cin); }
  }
  if (PIXELS_PER_THREAD > 6u && ix0 + 6u < p.width) {
    store_dx(base + 6u * cin, acc6a, ci0, cin);
    if (WIDE) { store_dx(base + 6u * cin + 4u, acc6b, ci0 + 4u, cin); }
  }
  if (PIXELS_PER_THREAD > 7u && ix0 + 7u < p.width) {
    store_dx(base + 7u * cin, acc7a, ci0, cin);
    if (WIDE) { store_dx(base + 7u * cin + 4u, acc7b, ci0 + 4u, cin); }
  }
}

// dw[ky, kx, ci, co] = Σ_{n, oy, ox} x[n, oy + ky − pad, ox + kx − pad, ci] · dy[n, oy, ox, co]
@compute @workgroup_size(WORKGROUP_SIZE)
fn conv2d_backward_filter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                          @builtin(local_invocation_index) lid: u32) {
  let p = params;
  let cin = p.in_channels;
  let cout = p.out_channels;
  let channel_blocks = (cout + channels_per_thread() - 1u) / channels_per_thread();
  let tap_blocks = (p.kernel + TAPS_PER_THREAD - 1u) / TAPS_PER_THREAD;
  let t = linear_index(wid, nwg, lid);
  if (t >= p.kernel * tap_blocks * cin * channel_blocks) { return; }
  let co0 = (t % channel_blocks) * channels_per_thread();
  let rest = t / channel_blocks;
  let ci = rest % cin;
  let rest2 = rest / cin;
  let kx0 = (rest2 % tap_blocks) * TAPS_PER_THREAD;
  let ky = rest2 / tap_blocks;
  let qa = channel_quad(co0, cout);
  let qb = channel_quad(co0 + 4u, cout);
  let tap_stride = cin * cout;

  var acc0a = vec4<f32>(0.0);
  var acc0b = vec4<f32>(0.0);
  var acc1a = vec4<f32>(0.0);
  var acc1b = vec4<f32>(0.0);
  var acc2a = vec4<f32>(0.0);
  var acc2b = vec4<f32>(0.0);
  var acc3a = vec4<f32>(0.0);
  var acc3b = vec4<f32>(0.0);
  var acc4a = vec4<f32>(0.0);
  var acc4b = vec4<f32>(0.0);
  var acc5a = vec4<f32>(0.0);
  var acc5b = vec4<f32>(0.0);
  var acc6a = vec4<f32>(0.0);
  var acc6b = vec4<f32>(0.0);
  var acc7a = vec4<f32>(0.0);
  var acc7b = vec4<f32>(0.0);
  // Tap j at output column ox reads input column ox + kx0 + j − pad: a window sliding with ox.
  let c0 = i32(kx0) - i32(p.pad);
  for (var n = 0u; n < p.batch; n++) {
    for (var oy = 0u; oy < p.out_height; oy++) {
      let iy = i32(oy + ky) - i32(p.pad);
      if (iy < 0 || iy >= i32(p.height)) { continue; }
      let row = (n * p.height + u32(iy)) * p.width;
      var x0 = 0.0; var x1 = 0.0; var x2 = 0.0; var x3 = 0.0; var x4 = 0.0; var x5 = 0.0; var x6 = 0.0; var x7 = 0.0;
      if (TAPS_PER_THREAD > 1u) { x0 = input_at(row, c0, ci); }
      if (TAPS_PER_THREAD > 2u) { x1 = input_at(row, c0 + 1, ci); }
      if (TAPS_PER_THREAD > 3u) { x2 = input_at(row, c0 + 2, ci); }
      if (TAPS_PER_THREAD > 4u) { x3 = input_at(row, c0 + 3, ci); }
      if (TAPS_PER_THREAD > 5u) { x4 = input_at(row, c0 + 4, ci); }
      if (TAPS_PER_THREAD > 6u) { x5 = input_at(row, c0 + 5, ci); }
      if (TAPS_PER_THREAD > 7u) { x6 = input_at(row, c0 + 6, ci); }
      var c = c0 + i32(TAPS_PER_THREAD) - 1;
      var d = (n * p.out_height + oy) * p.out_width * cout;
      for (var ox = 0u; ox < p.out_width; ox++) {
        let fresh = input_at(row, c, ci);
        if (TAPS_PER_THREAD == 1u) { x0 = fresh; }
        else if (TAPS_PER_THREAD == 2u) { x1 = fresh; }
        else if (TAPS_PER_THREAD == 3u) { x2 = fresh; }
        else if (TAPS_PER_THREAD == 4u) { x3 = fresh; }
        else if (TAPS_PER_THREAD == 5u) { x4 = fresh; }
        else if (TAPS_PER_THREAD == 6u) { x5 = fresh; }
        else if (TAPS_PER_THREAD == 7u) { x6 = fresh; }
        else if (TAPS_PER_THREAD == 8u) { x7 = fresh; }
        let ga = vec4<f32>(dy_for_filter[d + qa.x], dy_for_filter[d + qa.y], dy_for_filter[d + qa.z], dy_for_filter[d + qa.w]);
        var gb = vec4<f32>(0.0);
        if (WIDE) { gb = vec4<f32>(dy_for_filter[d + qb.x], dy_for_filter[d + qb.y], dy_for_filter[d + qb.z], dy_for_filter[d + qb.w]); }
        acc0a += x0 * ga; if (WIDE) { acc0b += x0 * gb; }
        if (TAPS_PER_THREAD > 1u) { acc1a += x1 * ga; if (WIDE) { acc1b += x1 * gb; } }
        if (TAPS_PER_THREAD > 2u) { acc2a += x2 * ga; if (WIDE) { acc2b += x2 * gb; } }
        if (TAPS_PER_THREAD > 3u) { acc3a += x3 * ga; if (WIDE) { acc3b += x3 * gb; } }
        if (TAPS_PER_THREAD > 4u) { acc4a += x4 * ga; if (WIDE) { acc4b += x4 * gb; } }
        if (TAPS_PER_THREAD > 5u) { acc5a += x5 * ga; if (WIDE) { acc5b += x5 * gb; } }
        if (TAPS_PER_THREAD > 6u) { acc6a += x6 * ga; if (WIDE) { acc6b += x6 * gb; } }
        if (TAPS_PER_THREAD > 7u) { acc7a += x7 * ga; if (WIDE) { acc7b += x7 * gb; } }
        x0 = x1; x1 = x2; x2 = x3; x3 = x4; x4 = x5; x5 = x6; x6 = x7;
        c += 1;
        d += cout;
      }
    }
  }

  let base = ((ky * p.kernel + kx0) * cin + ci) * cout + co0;
  store_dw(base, acc0a, co0, cout);
  if (WIDE) { store_dw(base + 4u, acc0b, co0 + 4u, cout); }
  if (TAPS_PER_THREAD > 1u && kx0 + 1u < p.kernel) {
    store_dw(base + tap_stride, acc1a, co0, cout);
    if (WIDE) { store_dw(base + tap_stride + 4u, acc1b, co0 + 4u, cout); }
  }
  if (TAPS_PER_THREAD > 2u && kx0 + 2u < p.kernel) {
    store_dw(base + 2u * tap_stride, acc2a, co0, cout);
    if (WIDE) { store_dw(base + 2u * tap_stride + 4u, acc2b, co0 + 4u, cout); }
  }
  if (TAPS_PER_THREAD > 3u && kx0 + 3u < p.kernel) {
    store_dw(base + 3u * tap_stride, acc3a, co0, cout);
    if (WIDE) { store_dw(base + 3u * tap_stride + 4u, acc3b, co0 + 4u, cout); }
  }
  if (TAPS_PER_THREAD > 4u && kx0 + 4u < p.kernel) {
    store_dw(base + 4u * tap_stride, acc4a, co0, cout);
    if (WIDE) { store_dw(base + 4u * tap_stride + 4u, acc4b, co0 + 4u, cout); }
  }
  if (TAPS_PER_THREAD > 5u && kx0 + 5u < p.kernel) {
    store_dw(base + 5u * tap_stride, acc5a, co0, cout);
    if (WIDE) { store_dw(base + 5u * tap_stride + 4u, acc5b, co0 + 4u, cout); }
  }
  if (TAPS_PER_THREAD > 6u && kx0 + 6u < p.kernel) {
    store_dw(base + 6u * tap_stride, acc6a, co0, cout);
    if (WIDE) { store_dw(base + 6u * tap_stride + 4u, acc6b, co0 + 4u, cout); }
  }
  if (TAPS_PER_THREAD > 7u && kx0 + 7u < p.kernel) {
    store_dw(base + 7u * tap_stride, acc7a, co0, cout);
    if (WIDE) { store_dw(base + 7u * tap_stride + 4u, acc7b, co0 + 4u, cout); }
  }
}
