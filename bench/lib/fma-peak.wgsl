// A measured float32 peak for bench:gpu: each invocation runs ITERS steps of 8 independent vec4 FMA
// chains (acc = acc * m + a), so the adapter's arithmetic units, not its memory, set the time. m and a
// come from a uniform (the compiler cannot fold them) and keep every chain bounded (|m| < 1). The sum
// of the chains is stored so nothing is dead code. FLOPs per invocation: ITERS · 8 chains · 4 lanes · 2.

override WORKGROUP_SIZE: u32 = 256u;
override ITERS: u32 = 256u;

struct Params {
  m: vec4<f32>,
  a: vec4<f32>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn fma_peak(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let seed = f32(id.x & 255u) * 1e-3;
  let m = params.m;
  let a = params.a;
  var c0 = vec4<f32>(seed); var c1 = c0 + 0.1; var c2 = c0 + 0.2; var c3 = c0 + 0.3;
  var c4 = c0 + 0.4; var c5 = c0 + 0.5; var c6 = c0 + 0.6; var c7 = c0 + 0.7;
  for (var i = 0u; i < ITERS; i++) {
    c0 = fma(c0, m, a); c1 = fma(c1, m, a); c2 = fma(c2, m, a); c3 = fma(c3, m, a);
    c4 = fma(c4, m, a); c5 = fma(c5, m, a); c6 = fma(c6, m, a); c7 = fma(c7, m, a);
  }
  let s = (c0 + c1) + (c2 + c3) + (c4 + c5) + (c6 + c7);
  out[id.y * nwg.x * WORKGROUP_SIZE + id.x] = s.x + s.y + s.z + s.w;
}
