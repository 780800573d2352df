// float32 → IEEE half, packed two per u32 word as `pack2x16float` packs them (element 2i in the low
// 16 bits of word i, element 2i + 1 in the high 16 bits): the storage of the mixed-precision mode's
// operand copies (activations and weight copies that matmul.wgsl reads with A_HALF / B_HALF).
// Values beyond the half range (±65504) are clamped to it first: `pack2x16float` of an out-of-range
// value is indeterminate in WGSL. A word past an odd `size` gets 0 in its high half.
// One invocation per word; needs no optional feature (pack2x16float is core WGSL).

override WORKGROUP_SIZE: u32 = 256u;

struct Params {
  /** Float32 elements to convert. */
  size: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> packed: array<u32>;

const HALF_MAX = 65504.0;

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WORKGROUP_SIZE + lid;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn to_half(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let w = linear_index(wid, nwg, lid);
  let first = 2u * w;
  if (first >= params.size) { return; }
  var pair = vec2<f32>(x[first], 0.0);
  if (first + 1u < params.size) { pair.y = x[first + 1u]; }
  packed[w] = pack2x16float(clamp(pair, vec2<f32>(-HALF_MAX), vec2<f32>(HALF_MAX)));
}
