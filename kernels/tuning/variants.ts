/**
 * Kernel variants: the override constants (and the subgroup module) a model's kernels are built with,
 * one choice per op family, the defaults, and the candidates the autotuner (autotune.ts) tries.
 *
 * Every candidate here computes each output with the same float32 operations in the same order as the
 * default (only tiles, workgroup shapes, elements per thread or the way an operand reaches a thread
 * differ), so a choice never changes a model's numbers: the tests compare each candidate's bits with
 * the default's, and the autotuner checks it again on the device before timing it. That keeps tabs
 * that chose differently bit-identical, and a run reproducible whatever the tuner picked.
 */
import type { Conv2dVariant } from '../ops/conv2d';
import { DEFAULT_MATMUL_TILE, matmulTileName, type MatmulTile } from '../ops/matmul';
import type { Gpu } from '../runtime';

/** What a model's kernels are built with (kernels/model/model.ts `ModelOptions.variants`). */
export interface KernelVariants {
  /** The tile of every matmul (dense layers, attention projections, the language-model head). */
  matmul: MatmulTile;
  /** conv2d workgroup sizes per kernel; null keeps the per-layer choice of `chooseConv2dVariant`. */
  conv2d: { forward: number | null; backwardInput: number | null; backwardFilter: number | null };
  attention: { workgroupSize: number };
  layernorm: { workgroupSize: number; subgroups: boolean };
  optimizer: { workgroupSize: number; elementsPerThread: number };
}

/** The op families the autotuner chooses for, in the order it tunes them. */
export const FAMILIES = ['matmul', 'conv2d', 'attention', 'layernorm', 'optimizer'] as const;
export type Family = (typeof FAMILIES)[number];

/** Today's kernels: the variants measured best on SwiftShader by hand (bench/RESULTS.md). */
export const DEFAULT_VARIANTS: KernelVariants = {
  matmul: DEFAULT_MATMUL_TILE,
  conv2d: { forward: null, backwardInput: null, backwardFilter: null },
  attention: { workgroupSize: 64 },
  layernorm: { workgroupSize: 64, subgroups: false },
  optimizer: { workgroupSize: 256, elementsPerThread: 1 },
};

/** `partial` over the defaults. */
export function withDefaults(partial: Partial<KernelVariants> = {}): KernelVariants {
  return { ...DEFAULT_VARIANTS, ...partial };
}

const regs = (tm: number, tn: number, wgX: number, wgY: number): MatmulTile => ({
  tm,
  tn,
  wgX,
  wgY,
  workgroupMemory: false,
});
const shared = (tm: number, tn: number, wgX: number, wgY: number, tk: number): MatmulTile => ({
  tm,
  tn,
  wgX,
  wgY,
  workgroupMemory: true,
  tk,
});
const subgroup = (tm: number, tn: number, wgX: number): MatmulTile => ({
  tm,
  tn,
  wgX,
  wgY: 1,
  workgroupMemory: false,
  subgroups: true,
});

/**
 * Matmul tiles to race: register tiles (SwiftShader's and small GPUs' best), the classic
 * workgroup-memory tiling at three sizes (what desktop GPUs usually prefer), and op(a) shared by
 * subgroup shuffles. The subgroup tiles are listed whatever the device: `applicable` filters them.
 */
export const MATMUL_CANDIDATES: readonly MatmulTile[] = [
  regs(4, 4, 8, 8),
  regs(8, 8, 8, 8),
  regs(4, 4, 16, 16),
  shared(4, 4, 8, 8, 16),
  shared(4, 4, 16, 16, 16),
  shared(8, 8, 16, 16, 8),
  subgroup(4, 4, 64),
  subgroup(8, 4, 64),
  subgroup(8, 8, 32),
];

/**
 * Candidates per family, each a whole `KernelVariants[family]` value; the default comes first. Those the
 * device cannot run (a subgroup tile without the feature, a workgroup over its limits) are left out.
 */
export function candidates(gpu: Gpu, family: Family): KernelVariants[Family][] {
  const limit = gpu.device.limits.maxComputeInvocationsPerWorkgroup;
  const sizes = (list: readonly number[]) => list.filter((s) => s <= limit);
  switch (family) {
    case 'matmul':
      return [DEFAULT_VARIANTS.matmul, ...MATMUL_CANDIDATES.filter((t) => matmulApplicable(gpu, t))];
    case 'conv2d':
      return [
        DEFAULT_VARIANTS.conv2d,
        ...sizes([64, 128, 256]).map((s) => ({ forward: s, backwardInput: s, backwardFilter: null })),
        ...sizes([32, 64]).map((s) => ({ forward: null, backwardInput: null, backwardFilter: s })),
      ];
    case 'attention':
      return sizes([64, 32, 128, 256]).map((workgroupSize) => ({ workgroupSize }));
    case 'layernorm':
      return [false, ...(gpu.features.subgroups ? [true] : [])].flatMap((subgroups) =>
        sizes([64, 32, 128, 256]).map((workgroupSize) => ({ workgroupSize, subgroups })),
      );
    case 'optimizer':
      return [
        DEFAULT_VARIANTS.optimizer,
        ...sizes([64, 128, 256]).flatMap((workgroupSize) =>
          [1, 4].map((elementsPerThread) => ({ workgroupSize, elementsPerThread })),
        ),
      ].filter((v, i, all) => all.findIndex((w) => sameVariant(w, v)) === i);
  }
}

/** Whether the device can run a matmul tile (feature, workgroup size and memory limits). */
export function matmulApplicable(gpu: Gpu, tile: MatmulTile): boolean {
  const limits = gpu.device.limits;
  if (tile.subgroups && !gpu.features.subgroups) return false;
  if (tile.wgX * tile.wgY > limits.maxComputeInvocationsPerWorkgroup) return false;
  if (tile.wgX > limits.maxComputeWorkgroupSizeX || tile.wgY > limits.maxComputeWorkgroupSizeY) return false;
  const tk = tile.tk ?? 16;
  return (
    !tile.workgroupMemory || 4 * tk * (tile.tm * tile.wgY + tile.tn * tile.wgX) <= limits.maxComputeWorkgroupStorageSize
  );
}

export function sameVariant(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** A short name of one family's variant, for logs, the admin page and the bench tables. */
export function variantName<F extends Family>(family: F, v: KernelVariants[F]): string {
  switch (family) {
    case 'matmul':
      return matmulTileName(v as MatmulTile);
    case 'conv2d': {
      const c = v as KernelVariants['conv2d'];
      const part = (x: number | null) => (x === null ? 'auto' : String(x));
      return `wg ${part(c.forward)}/${part(c.backwardInput)}/${part(c.backwardFilter)}`;
    }
    case 'optimizer': {
      const o = v as KernelVariants['optimizer'];
      return `wg${o.workgroupSize} x${o.elementsPerThread}`;
    }
    case 'layernorm': {
      const n = v as KernelVariants['layernorm'];
      return `${n.subgroups ? 'quads ' : ''}wg${n.workgroupSize}`;
    }
    default:
      return `wg${(v as { workgroupSize: number }).workgroupSize}`;
  }
}

/** conv2d's override for one of its kernels from the family's choice (none: the per-layer default). */
export function conv2dOverride(
  variants: KernelVariants,
  entry: 'forward' | 'backwardInput' | 'backwardFilter',
): Conv2dVariant {
  const size = variants.conv2d[entry];
  return size === null ? {} : { workgroupSize: size };
}
