/**
 * What the variant tests ran, said out loud: a variant that needs an optional WebGPU feature runs only
 * where the adapter offers it, so each test prints one line listing the variants it ran and one line
 * per feature it could not use (with the variants that therefore did not run). A CI log thus shows
 * what passed, and nothing passes silently for a variant that never ran.
 */
import type { TransformerSpec } from '../../core/training/model-spec';
import { float16BitsToNumber, float32BitsToFloat16Bits } from '../../core/wire/fp16';
import type { Gpu } from '../../kernels/runtime';

/** The small GPT every variant test runs (in Node and in Chromium): two layers, 32 wide, context 12. */
export const SMALL_GPT: TransformerSpec = {
  type: 'transformer',
  name: 'gpt-variants',
  vocab: 256,
  context: 12,
  dModel: 32,
  heads: 2,
  layers: 2,
  mlpRatio: 4,
};

/** The half nearest v (ties to even), as the f16 mode's cast rounds (test/kernels/half.test.ts). */
export function nearestHalf(v: number): number {
  return float16BitsToNumber(float32BitsToFloat16Bits(new Uint32Array(Float32Array.of(v).buffer)[0]));
}

/** Print `[variants] family: ran …` and, for each missing feature, `[variants] family: NOT RUN …`. */
export function reportVariants(
  family: string,
  ran: readonly string[],
  notRun: readonly { name: string; feature: string }[] = [],
): void {
  console.log(`[variants] ${family}: ran ${ran.length}: ${ran.join('; ')}`);
  const byFeature = new Map<string, string[]>();
  for (const { name, feature } of notRun) byFeature.set(feature, [...(byFeature.get(feature) ?? []), name]);
  for (const [feature, names] of byFeature)
    console.warn(`[variants] ${family}: NOT RUN (this adapter lacks '${feature}'): ${names.join('; ')}`);
}

/** The adapter's optional features as one line, for the test log. */
export function describeFeatures(gpu: Gpu): string {
  return `subgroups ${gpu.features.subgroups ? 'yes' : 'no'}, shader-f16 ${gpu.features.shaderF16 ? 'yes' : 'no'}`;
}

/** The bits of a float32 array, for exact comparisons (NaN payloads and -0 included). */
export function bitsOf(values: Float32Array): Uint32Array {
  return new Uint32Array(values.buffer, values.byteOffset, values.length);
}

/** Throw unless two float32 arrays hold the same bits, naming the first differing index. */
export function expectSameBits(got: Float32Array, want: Float32Array, label: string): void {
  const a = bitsOf(got);
  const b = bitsOf(want);
  if (a.length !== b.length) throw new Error(`${label}: length ${a.length} != ${b.length}`);
  let differing = 0;
  let first = -1;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) {
      differing++;
      if (first < 0) first = i;
    }
  }
  if (differing > 0)
    throw new Error(
      `${label}: ${differing}/${a.length} values differ in their bits from the default variant's, first [${first}]: ${got[first]} vs ${want[first]}`,
    );
}
