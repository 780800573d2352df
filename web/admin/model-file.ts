/**
 * The model the admin page samples from, read from a checkpoint exported as safetensors
 * (coordinator/datasets/safetensors.ts writes it): pure, so it is unit-tested apart from the page.
 */
import { isTransformer, modelSpecSchema, parameterLayout, type TransformerSpec } from '../../core/training/model-spec';
import { readSafetensors } from '../../core/data/safetensors-read';

export interface LoadedModel {
  spec: TransformerSpec;
  /** Flat parameters in `parameterLayout(spec)`. */
  params: Float32Array;
  step: number;
}

/**
 * A language model from an exported checkpoint: the spec from `tabswarm.spec`, every tensor of its
 * layout present as F32 with the layout's shape. Throws one line naming what is wrong.
 */
export function modelFromSafetensors(bytes: Uint8Array): LoadedModel {
  const { tensors, metadata } = readSafetensors(bytes, 'checkpoint');
  let raw: unknown;
  try {
    raw = JSON.parse(metadata['tabswarm.spec'] ?? '');
  } catch {
    throw new Error('checkpoint: no model spec in its metadata (tabswarm.spec)');
  }
  const parsed = modelSpecSchema.safeParse(raw);
  if (!parsed.success || !isTransformer(parsed.data))
    throw new Error('checkpoint: its model is not a language model (transformer)');
  const spec = parsed.data;
  const layout = parameterLayout(spec);
  const params = new Float32Array(layout.totalElements);
  for (const e of layout.entries) {
    const t = tensors[e.name];
    if (t?.dtype !== 'F32' || t.shape.join() !== e.shape.join())
      throw new Error(`checkpoint: tensor ${e.name} is missing or not F32 [${e.shape}]`);
    // Copy into a buffer of its own: the view may be unaligned for a Float32Array (and a Node Buffer's slice is no copy).
    params.set(new Float32Array(new Uint8Array(t.data).buffer), e.offset);
  }
  const step = Number(metadata['tabswarm.step']);
  return { spec, params, step: Number.isInteger(step) ? step : -1 };
}
