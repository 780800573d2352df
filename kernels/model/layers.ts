/**
 * What the kernels need from a model spec beyond core/training/model-spec.ts (which owns the spec
 * types, shape propagation and the parameter layout): a check that a caller's layout fits the spec,
 * and the deterministic seeded initialisation of both model kinds.
 */
import {
  isTransformer,
  layerShapes,
  PARAM_ALIGN_ELEMENTS,
  type ModelSpec,
  type ParamEntry,
  type ParamLayout,
  type SequentialSpec,
  type TransformerSpec,
  transformerLayout,
} from '../../core/training/model-spec';
import { elementCount } from '../runtime';

const sameShape = (a: readonly number[], b: readonly number[]) =>
  a.length === b.length && a.every((d, i) => d === b[i]);

function checkEntry(model: string, layout: ParamLayout, e: ParamEntry, shape: readonly number[]): ParamEntry {
  if (!sameShape(e.shape, shape) || e.size !== elementCount(shape))
    throw new Error(`layout for ${model}: ${e.name} has shape [${e.shape}], the spec needs [${shape}]`);
  if (e.offset % PARAM_ALIGN_ELEMENTS !== 0 || e.offset + e.size > layout.totalElements)
    throw new Error(`layout for ${model}: ${e.name} at offset ${e.offset} is misaligned or out of range`);
  return e;
}

/** The layout's entry for each layer's weight and bias, checked against the spec's shapes. */
export function paramEntries(spec: SequentialSpec, layout: ParamLayout): { weight?: ParamEntry; bias?: ParamEntry }[] {
  const last = spec.layers[spec.layers.length - 1];
  if (last?.type !== 'dense' || last.units !== spec.classes)
    throw new Error(`model ${spec.name}: last layer must be dense with ${spec.classes} units`);
  return layerShapes(spec).map((s, layer) => {
    const find = (kind: 'weight' | 'bias', shape: number[] | undefined) => {
      if (!shape) return undefined;
      const e = layout.entries.find((en) => en.layer === layer && en.kind === kind);
      if (!e) throw new Error(`layout for ${spec.name}: no ${kind} for layer ${layer}`);
      return checkEntry(spec.name, layout, e, shape);
    };
    return { weight: find('weight', s.weight), bias: find('bias', s.bias) };
  });
}

/**
 * A transformer's tensors by GPT-2 name, each checked against the spec's own layout
 * (`transformerLayout`, which owns the names and shapes): the caller's layout must hold every one.
 */
export function transformerEntries(spec: TransformerSpec, layout: ParamLayout): (name: string) => ParamEntry {
  const byName = new Map(layout.entries.map((e) => [e.name, e]));
  const checked = new Map<string, ParamEntry>();
  for (const { name, shape } of transformerLayout(spec).entries) {
    const e = byName.get(name);
    if (!e) throw new Error(`layout for ${spec.name}: no tensor ${name}`);
    checked.set(name, checkEntry(spec.name, layout, e, shape));
  }
  return (name) => {
    const e = checked.get(name);
    if (!e) throw new Error(`model ${spec.name}: no tensor ${name}`);
    return e;
  };
}

/** mulberry32: a tiny seeded PRNG, the same sequence in every JS engine (integer arithmetic only). */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The stream of tensor `index` (1-based) under `seed`: a tensor's values do not depend on the others' sizes. */
function tensorStream(seed: number, index: number): () => number {
  return mulberry32((Math.imul(seed >>> 0, 0x9e3779b1) ^ Math.imul(index, 0x85ebca77)) >>> 0);
}

function fillUniform(out: Float32Array, e: ParamEntry, limit: number, rand: () => number): void {
  for (let i = 0; i < e.size; i++) out[e.offset + i] = (2 * rand() - 1) * limit;
}

/**
 * Deterministic initial parameters (flat, `layout.totalElements`, padding 0). Pure: the same seed
 * gives the same bytes in a browser and in Node (only Math.sqrt and multiplication, which IEEE fixes;
 * no log/cos, so no normal distribution). Stacks: weights uniform in ±limit with He-uniform
 * √(6/fan_in) before a ReLU and Glorot-uniform √(6/(fan_in+fan_out)) for the linear output layer (as
 * Keras/TF), biases 0. Transformers: see initTransformer.
 */
export function initParams(spec: ModelSpec, layout: ParamLayout, seed: number): Float32Array {
  if (isTransformer(spec)) return initTransformer(spec, layout, seed);
  const entries = paramEntries(spec, layout);
  const out = new Float32Array(layout.totalElements);
  entries.forEach(({ weight }, layer) => {
    if (!weight) return;
    const layerSpec = spec.layers[layer] as { activation: 'relu' | 'none' };
    const receptive = weight.shape.length === 4 ? weight.shape[0] * weight.shape[1] : 1;
    const fanIn = receptive * weight.shape[weight.shape.length - 2];
    const fanOut = receptive * weight.shape[weight.shape.length - 1];
    const limit = layerSpec.activation === 'relu' ? Math.sqrt(6 / fanIn) : Math.sqrt(6 / (fanIn + fanOut));
    fillUniform(out, weight, limit, tensorStream(seed, layer + 1));
  });
  return out;
}

/**
 * GPT-2's scheme with a uniform of the same standard deviation in place of the normal (see above):
 * every matrix std 0.02, the two residual projections (`c_proj`) std 0.02/√(2·layers), LayerNorm
 * gains 1, biases 0. Tensor i of the layout draws from stream i + 1.
 */
function initTransformer(spec: TransformerSpec, layout: ParamLayout, seed: number): Float32Array {
  const entry = transformerEntries(spec, layout);
  const out = new Float32Array(layout.totalElements);
  const uniformLimit = (std: number) => std * Math.sqrt(3);
  layout.entries.forEach((listed, index) => {
    const e = entry(listed.name);
    if (e.shape.length === 2) {
      const std = e.name.endsWith('c_proj.weight') ? 0.02 / Math.sqrt(2 * spec.layers) : 0.02;
      fillUniform(out, e, uniformLimit(std), tensorStream(seed, index + 1));
    } else if (/ln_[12f]\.weight$/.test(e.name)) {
      out.fill(1, e.offset, e.offset + e.size);
    }
  });
  return out;
}
