/**
 * Which kernel variants a tab (or a Node process) builds its model with: the autotuner's choice for this
 * adapter and job shapes, tuned once and then read from a cache (`TuningStore`: IndexedDB in the
 * browser's training worker, a file or memory in Node), or the defaults.
 *
 * - `mode` 'never': the defaults. 'gpu' (a job's default): tune on a hardware adapter, keep the
 *   defaults on a software one (SwiftShader, WARP, llvmpipe: `isFallbackAdapter`), where the defaults
 *   are the hand-measured best and the "GPU" is the CPU the training shares. 'always': tune anywhere.
 * - The cache key is the adapter (vendor, architecture, device, description, optional features), the
 *   tuner's version and the shapes (model spec, max batch, precision, optimizer kind). A cached entry
 *   is hostile input like any stored byte: it must parse, and every choice in it must be one of this
 *   device's candidates (variants.ts), or the tab tunes again.
 */
import { z } from 'zod';
import type { KernelsReport } from '../../core/protocol/tab-messages';
import { autotune, type TuneRequest, type TuningResult } from './autotune';
import { candidates, DEFAULT_VARIANTS, FAMILIES, sameVariant, variantName, type KernelVariants } from './variants';
import type { Gpu } from '../runtime';

/** Bump when the candidates or the method change: every cached choice is then tuned again. */
export const TUNER_VERSION = 1;

/** Where choices are kept between starts. `get` of an unknown key gives undefined. */
export interface TuningStore {
  get(key: string): Promise<unknown>;
  set(key: string, value: unknown): Promise<void>;
}

export function memoryTuningStore(): TuningStore & { readonly entries: Map<string, unknown> } {
  const entries = new Map<string, unknown>();
  return {
    entries,
    get: async (key) => entries.get(key),
    set: async (key, value) => void entries.set(key, value),
  };
}

export interface AdapterIdentity {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  isFallback: boolean;
}

/** When to tune (a job setting, core/training/job.ts `kernels.tune`). */
export type TuneMode = 'gpu' | 'always' | 'never';

export interface KernelChoice {
  variants: KernelVariants;
  /** Tuned now, read from the cache, or the defaults (never tuned: the mode or a software adapter). */
  source: 'tuned' | 'cached' | 'default';
  /** The tuning's figures (null for the defaults). */
  result: TuningResult | null;
}

export function tuningKey(gpu: Gpu, adapter: AdapterIdentity, req: TuneRequest): string {
  const features = `sg${gpu.features.subgroups ? 1 : 0}f16${gpu.features.shaderF16 ? 1 : 0}`;
  const who = [adapter.vendor, adapter.architecture, adapter.device, adapter.description].join('/');
  const shapes = `${req.precision}|${req.optimizer.kind}|${req.maxBatch}|${JSON.stringify(req.spec)}`;
  return `tabswarm-tuning-v${TUNER_VERSION}|${who}|${features}|${shapes}`;
}

const figure = z.number().finite().min(0).max(1e9);
const cachedSchema = z.strictObject({
  variants: z.strictObject({
    matmul: z.unknown(),
    conv2d: z.unknown(),
    attention: z.unknown(),
    layernorm: z.unknown(),
    optimizer: z.unknown(),
  }),
  families: z
    .array(
      z.strictObject({
        family: z.enum(FAMILIES),
        chosen: z.string().max(64),
        defaultMs: figure,
        chosenMs: figure,
        timed: z.int().min(0).max(1000),
        refused: z.array(z.string().max(300)).max(100),
        skipped: z.int().min(0).max(1000),
      }),
    )
    .max(FAMILIES.length),
  matmulGflops: figure.nullable(),
  tuneMs: figure,
});

/** A cached entry as a result, or null when it does not parse or names a variant this device does not offer. */
export function parseCached(gpu: Gpu, value: unknown): TuningResult | null {
  const parsed = cachedSchema.safeParse(value);
  if (!parsed.success) return null;
  const variants = { ...DEFAULT_VARIANTS };
  for (const family of FAMILIES) {
    const chosen = candidates(gpu, family).find((c) => sameVariant(c, parsed.data.variants[family]));
    if (!chosen) return null;
    Object.assign(variants, { [family]: chosen });
  }
  return { ...parsed.data, variants };
}

/**
 * The variants to build the job's model with on this device (see the file comment). `onTuning` is
 * called just before a tuning starts (the page then says "tuning for your GPU…"). A store that fails
 * is only a lost cache: the choice is still made.
 */
export async function chooseVariants(
  gpu: Gpu,
  adapter: AdapterIdentity,
  req: TuneRequest,
  opts: { store: TuningStore; mode: TuneMode; onTuning?: () => void; tune?: typeof autotune },
): Promise<KernelChoice> {
  if (opts.mode === 'never' || (opts.mode === 'gpu' && adapter.isFallback))
    return { variants: DEFAULT_VARIANTS, source: 'default', result: null };
  const key = tuningKey(gpu, adapter, req);
  const cached = parseCached(gpu, await opts.store.get(key).catch(() => undefined));
  if (cached) return { variants: cached.variants, source: 'cached', result: cached };
  opts.onTuning?.();
  const result = await (opts.tune ?? autotune)(gpu, req);
  await opts.store.set(key, result).catch(() => undefined);
  return { variants: result.variants, source: 'tuned', result };
}

/** The choice as a tab reports it in its hello (core/protocol/tab-messages.ts `kernelsReportSchema`). */
export function kernelsReport(gpu: Gpu, choice: KernelChoice, precision: 'f32' | 'f16'): KernelsReport {
  const features: KernelsReport['features'] = [];
  if (gpu.features.subgroups) features.push('subgroups');
  if (gpu.features.shaderF16) features.push('shader-f16');
  const round = (x: number) => Number(x.toPrecision(4));
  return {
    source: choice.source,
    precision,
    variants: FAMILIES.map((family) => ({ family, variant: variantName(family, choice.variants[family]) })),
    gflops: choice.result?.matmulGflops == null ? null : round(choice.result.matmulGflops),
    tuneMs: choice.source === 'tuned' && choice.result ? Math.round(choice.result.tuneMs) : null,
    features,
  };
}
