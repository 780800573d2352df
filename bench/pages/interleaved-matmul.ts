/**
 * A bench-only probe (`--probe`), not a kernel of the app: kernels/ops/matmul.wgsl with the columns of a
 * thread's register tile interleaved across the workgroup (thread x owns columns x, x+WG_X, x+2·WG_X…)
 * instead of adjacent (x·TN … x·TN+TN−1). Register path only, out = a·b without transposes.
 *
 * Why: SwiftShader runs 4 invocations (consecutive local x) in the lanes of one SIMD register. With
 * adjacent columns the 4 lanes read b at stride TN, a gather of 4 scalar loads per value; interleaved,
 * they read 4 consecutive floats, which SwiftShader can fetch as one vector load. If this wins, the
 * kernel owner can adopt it in kernels/ops/matmul.wgsl (the edits are the four replacements below).
 */
import source from '../../kernels/ops/matmul.wgsl?raw';
import {
  ceilDiv,
  computePipeline,
  createUniformBuffer,
  STORAGE_USAGE,
  bindBuffers,
  writeUniforms,
  type Gpu,
  type KernelCall,
  type Tensor,
} from '../../kernels/runtime';
import type { MatmulTile } from '../../kernels/ops/matmul';

const REPLACEMENTS: [string, string][] = [
  ['let col0 = group.x * BN + local.x * TN;', 'let col0 = group.x * BN + local.x;'],
  [
    'lane_offsets(col0, params.n - 1u, params.b_col_stride)',
    'spread_offsets(col0, params.n - 1u, params.b_col_stride)',
  ],
  [
    'lane_offsets(col0 + 4u, params.n - 1u, params.b_col_stride)',
    'spread_offsets(col0 + 4u * WG_X, params.n - 1u, params.b_col_stride)',
  ],
  ['let col = col0 + j;', 'let col = col0 + j * WG_X;'],
];

const SPREAD_OFFSETS = `
/** Clamped indices of the 4 columns first, first+WG_X, … (interleaved register tile), scaled by stride. */
fn spread_offsets(first: u32, last: u32, stride: u32) -> vec4<u32> {
  return min(vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u) * WG_X, vec4<u32>(last)) * stride;
}
`;

/** The transformed shader, or an error naming the line of matmul.wgsl that no longer matches. */
export function interleavedMatmulCode(): string {
  let code = source;
  for (const [from, to] of REPLACEMENTS) {
    if (!code.includes(from))
      throw new Error(`interleaved probe: kernels/ops/matmul.wgsl no longer contains \`${from}\``);
    code = code.split(from).join(to);
  }
  return code + SPREAD_OFFSETS;
}

/** out = a·b ([m,k]·[k,n]) with the interleaved shader and a register tile (workgroupMemory must be false). */
export function interleavedMatmul(
  gpu: Gpu,
  t: { a: Tensor; b: Tensor; out: Tensor },
  dims: { m: number; n: number; k: number },
  tile: MatmulTile,
): KernelCall {
  if (tile.workgroupMemory) throw new Error('interleaved probe: register tiles only');
  const constants = { TM: tile.tm, TN: tile.tn, WG_X: tile.wgX, WG_Y: tile.wgY, USE_WORKGROUP_MEMORY: 0 };
  const pipeline = computePipeline(gpu, interleavedMatmulCode(), 'matmul-interleaved', 'main', constants);
  const uniforms = createUniformBuffer(gpu, 8, 'matmul-interleaved.params');
  const { m, n, k } = dims;
  writeUniforms(gpu, uniforms, [m, n, k, 0, k, 1, n, 1]);
  const noBias = gpu.device.createBuffer({ label: 'matmul-interleaved.no-bias', size: 16, usage: STORAGE_USAGE });
  return {
    label: 'matmul-interleaved',
    pipeline,
    bindGroup: bindBuffers(gpu, pipeline, [t.a, t.b, noBias, t.out, uniforms], 'matmul-interleaved'),
    workgroups: [ceilDiv(n, tile.tn * tile.wgX), ceilDiv(m, tile.tm * tile.wgY), 1],
  };
}
