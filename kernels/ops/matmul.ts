/**
 * Dense matmul with an optional fused epilogue: out[m,n] (= or +=) op(a)·op(b) (+ bias[n]) (then ReLU).
 * The dense layer needs three shapes of it: Y = X·W (+b, ReLU fused), dX = dY·Wᵀ (transB) and
 * dW = Xᵀ·dY (transA, accumulate when gradients add up over micro-batches).
 *
 * Transposes (as strides) and the epilogue (accumulate, bias, ReLU, as flags) live in the uniforms, so
 * every matmul of a model with the same tile shares one pipeline (each costs ~0.5 s of SwiftShader
 * JIT at start-up). Tile shape, the workgroup-memory switch and half-precision operands are WGSL
 * overrides; the subgroup variant (`tile.subgroups`, matmul-subgroups.wgsl) is another module, since
 * `enable subgroups;` does not compile where the adapter lacks the feature. Every variant sums each
 * output in the same order (k ascending), so all give the same bits (the tests compare them).
 */
import code from './matmul.wgsl?raw';
import subgroupCode from './matmul-subgroups.wgsl?raw';
import {
  ceilDiv,
  checkDims,
  computePipeline,
  preparedKernel,
  STORAGE_USAGE,
  type Gpu,
  type Kernel,
  type Tensor,
} from '../runtime';

export interface MatmulDims {
  m: number;
  n: number;
  k: number;
}

export interface MatmulTile {
  /** Output rows per thread (register tile), 1..8. */
  tm: number;
  /** Output columns per thread (register tile), 1..8. */
  tn: number;
  /** Threads per workgroup along n. */
  wgX: number;
  /** Threads per workgroup along m. */
  wgY: number;
  /** Stage k-slabs of A and B in workgroup memory (barriers) instead of reading storage per thread. */
  workgroupMemory: boolean;
  /** Depth of the staged k-slab, a multiple of 4 (workgroup-memory variant only; default 16). */
  tk?: number;
  /**
   * Share op(a) across each subgroup with shuffles (matmul-subgroups.wgsl): needs the device's
   * `subgroups` feature, `wgY` 1 and no workgroup memory.
   */
  subgroups?: boolean;
}

/** A short name of a tile, e.g. `8x8 regs wg4x4`, `4x4 wgmem wg8x8 tk16`, `4x4 subgroups wg64`. */
export function matmulTileName(tile: MatmulTile): string {
  const { tm, tn, wgX, wgY } = tile;
  if (tile.subgroups) return `${tm}x${tn} subgroups wg${wgX}`;
  if (tile.workgroupMemory) return `${tm}x${tn} wgmem wg${wgX}x${wgY} tk${tile.tk ?? 16}`;
  return `${tm}x${tn} regs wg${wgX}x${wgY}`;
}

/**
 * Best measured on SwiftShader (Dawn in Node, 2 CPU cores shared with other jobs, interleaved
 * best-of-8 runs): a barrier-free 8×8 register tile in 4×4 workgroups — 0.83–1.0 GFLOP/s at
 * 512–1024 against 0.56–0.64 for 4×4 tiles, 0.24–0.33 for the workgroup-memory variant and
 * 0.10–0.14 for one output per thread. Bigger tiles win there because each loaded value feeds more
 * FMAs. Real GPUs usually prefer `workgroupMemory: true` with larger workgroups: benchmark per adapter.
 */
export const DEFAULT_MATMUL_TILE: MatmulTile = { tm: 8, tn: 8, wgX: 4, wgY: 4, workgroupMemory: false };

/** The classic shared-memory tiling, for adapters where barriers are cheap. */
export const WORKGROUP_MATMUL_TILE: MatmulTile = { tm: 4, tn: 4, wgX: 8, wgY: 8, workgroupMemory: true, tk: 16 };

export interface MatmulOptions {
  /** a is stored [k,m] (op(a) = aᵀ). */
  transA?: boolean;
  /** b is stored [n,k] (op(b) = bᵀ). */
  transB?: boolean;
  /** out += instead of out =. */
  accumulate?: boolean;
  /** Apply ReLU after the bias (and after accumulation). */
  relu?: boolean;
  tile?: MatmulTile;
  /** a holds IEEE halves packed two per word (kernels/ops/half.ts), not float32: the mixed-precision mode. */
  halfA?: boolean;
  /** b holds packed halves. */
  halfB?: boolean;
}

const PARAM_WORDS = 8;

/**
 * A 16-byte stand-in for the bias binding when there is no bias (never read). Binding `a` there
 * instead is invalid: two writable bindings of one buffer must not overlap.
 */
const noBiasBuffers = new WeakMap<Gpu, GPUBuffer>();
function noBiasBuffer(gpu: Gpu): GPUBuffer {
  let buffer = noBiasBuffers.get(gpu);
  if (!buffer) {
    buffer = gpu.device.createBuffer({ label: 'matmul.no-bias', size: 16, usage: STORAGE_USAGE });
    noBiasBuffers.set(gpu, buffer);
  }
  return buffer;
}

/** The pipeline of a tile and operand precision (cached by the runtime). */
function matmulPipeline(gpu: Gpu, tile: MatmulTile, opts: MatmulOptions): GPUComputePipeline {
  const halves = { A_HALF: opts.halfA ? 1 : 0, B_HALF: opts.halfB ? 1 : 0 };
  if (tile.subgroups) {
    const constants = { TM: tile.tm, TN: tile.tn, WG_X: tile.wgX, ...halves };
    return computePipeline(gpu, subgroupCode, 'matmul-subgroups', 'main', constants);
  }
  const constants: Record<string, number> = {
    TM: tile.tm,
    TN: tile.tn,
    WG_X: tile.wgX,
    WG_Y: tile.wgY,
    USE_WORKGROUP_MEMORY: tile.workgroupMemory ? 1 : 0,
    ...halves,
  };
  if (tile.workgroupMemory) constants.TK = tile.tk ?? 16;
  return computePipeline(gpu, code, 'matmul', 'main', constants);
}

function checkTile(gpu: Gpu, tile: MatmulTile): void {
  const { tm, tn, wgX, wgY } = tile;
  const ok = (v: number, lo: number, hi: number): boolean => Number.isInteger(v) && v >= lo && v <= hi;
  if (!ok(tm, 1, 8) || !ok(tn, 1, 8)) throw new Error(`matmul: register tile ${tm}x${tn} outside 1..8`);
  const limits = gpu.device.limits;
  if (
    !ok(wgX, 1, limits.maxComputeWorkgroupSizeX) ||
    !ok(wgY, 1, limits.maxComputeWorkgroupSizeY) ||
    wgX * wgY > limits.maxComputeInvocationsPerWorkgroup
  ) {
    throw new Error(`matmul: workgroup ${wgX}x${wgY} exceeds the device limits`);
  }
  if (tile.subgroups) {
    if (!gpu.features.subgroups) throw new Error('matmul: the subgroup variant needs the subgroups feature');
    if (wgY !== 1 || tile.workgroupMemory)
      throw new Error(`matmul: the subgroup variant needs wgY 1 and no workgroup memory (${matmulTileName(tile)})`);
  }
  if (tile.workgroupMemory) {
    const tk = tile.tk ?? 16;
    const bytes = 4 * tk * (tm * wgY + tn * wgX);
    if (!ok(tk, 4, 1024) || tk % 4 !== 0 || bytes > limits.maxComputeWorkgroupStorageSize) {
      throw new Error(
        `matmul: workgroup tile needs ${bytes} bytes of workgroup memory (limit ${limits.maxComputeWorkgroupStorageSize})`,
      );
    }
  }
}

/**
 * Prepare out = op(a)·op(b) (+bias) (ReLU). All bindings are read_write storage so `a`, `b`, `bias`
 * and `out` may be views of one flat buffer (WebGPU forbids one buffer as both read-only and writable
 * storage in a dispatch); `out` must not overlap the operands. `update(dims)` may change every
 * dimension as long as the tensors stay large enough (normally only m, the batch rows, changes).
 */
export function matmul(
  gpu: Gpu,
  t: { a: Tensor; b: Tensor; out: Tensor; bias?: Tensor },
  dims: MatmulDims,
  opts: MatmulOptions = {},
): Kernel<MatmulDims> {
  const tile = opts.tile ?? DEFAULT_MATMUL_TILE;
  checkTile(gpu, tile);
  const label = `matmul${opts.transA ? '.tA' : ''}${opts.transB ? '.tB' : ''}${opts.halfA ? '.hA' : ''}${opts.halfB ? '.hB' : ''}`;
  const pipeline = matmulPipeline(gpu, tile, opts);
  const plan = ({ m, n, k }: MatmulDims) => {
    checkDims(label, { m, n, k });
    const need = (x: Tensor, elements: number, what: string, half = false): void => {
      const words = half ? Math.ceil(elements / 2) : elements;
      if (words > x.size) throw new Error(`${label}: ${what} ${x.label} has ${x.size} words, needs ${words}`);
    };
    need(t.a, m * k, 'a', opts.halfA);
    need(t.b, k * n, 'b', opts.halfB);
    need(t.out, m * n, 'out');
    if (t.bias) need(t.bias, n, 'bias');
    // op(a)[r,kk] = a[r*aRow + kk*aK]; op(b)[kk,c] = b[kk*bK + c*bCol].
    const [aRow, aK] = opts.transA ? [1, m] : [k, 1];
    const [bK, bCol] = opts.transB ? [1, k] : [n, 1];
    const flags = (opts.accumulate ? 1 : 0) | (t.bias ? 2 : 0) | (opts.relu ? 4 : 0);
    const empty = m === 0 || n === 0;
    // k = 0 still dispatches: out becomes bias (or stays, when accumulating), as the formula says.
    const groups: [number, number, number] = empty
      ? [0, 1, 1]
      : [ceilDiv(n, tile.tn * tile.wgX), ceilDiv(m, tile.tm * tile.wgY), 1];
    const maxGroups = gpu.device.limits.maxComputeWorkgroupsPerDimension;
    if (groups[0] > maxGroups || groups[1] > maxGroups)
      throw new Error(`${label}: ${m}x${n} needs ${groups[0]}x${groups[1]} workgroups (limit ${maxGroups})`);
    return { uniforms: [m, n, k, flags, aRow, aK, bK, bCol], workgroups: groups, flops: 2 * m * n * k };
  };
  const bias = t.bias ?? noBiasBuffer(gpu);
  return preparedKernel(
    gpu,
    { label, pipeline, uniformCount: PARAM_WORDS, bind: (uniforms) => [t.a, t.b, bias, t.out, uniforms], plan },
    dims,
  );
}
