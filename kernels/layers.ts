/**
 * What kernels/ knows about a model spec without importing coordinator/ (tsconfig boundary):
 * structural types mirroring coordinator/core/model-spec.ts (test/kernels/model.test.ts asserts the
 * core types are assignable to these), shape propagation, a check that a caller's parameter layout
 * fits the spec, and the deterministic seeded initialisation.
 */

export interface DenseLayerLike {
  readonly type: 'dense';
  readonly units: number;
  readonly activation: 'relu' | 'none';
}

export interface Conv2dLayerLike {
  readonly type: 'conv2d';
  readonly filters: number;
  readonly kernel: number;
  readonly padding: 'same' | 'valid';
  readonly activation: 'relu' | 'none';
}

export interface MaxPoolLayerLike {
  readonly type: 'maxpool2';
}

export type LayerSpecLike = DenseLayerLike | Conv2dLayerLike | MaxPoolLayerLike;

export interface ModelSpecLike {
  readonly name: string;
  /** [height, width, channels] */
  readonly input: readonly [number, number, number];
  readonly classes: number;
  readonly layers: readonly LayerSpecLike[];
}

export interface ParamEntryLike {
  readonly name: string;
  readonly shape: readonly number[];
  /** Float32 elements from the start of the flat buffer; a multiple of 64 (256 bytes). */
  readonly offset: number;
  readonly size: number;
  readonly layer: number;
  readonly kind: 'weight' | 'bias';
}

export interface ParamLayoutLike {
  readonly entries: readonly ParamEntryLike[];
  readonly totalElements: number;
  readonly parameterCount: number;
}

export const PARAM_ALIGN = 64;

const product = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

/** Padding of a conv layer on each side (stride 1): 'same' keeps the size for odd kernels. */
export function convPad(layer: Conv2dLayerLike): number {
  return layer.padding === 'same' ? (layer.kernel - 1) / 2 : 0;
}

/** Per layer: input shape, output shape and expected parameter shapes (weight, bias) or none. */
export interface LayerShapes {
  inShape: number[];
  outShape: number[];
  weight?: number[];
  bias?: number[];
}

export function layerShapes(spec: ModelSpecLike): LayerShapes[] {
  let shape: number[] = [...spec.input];
  return spec.layers.map((layer) => {
    const inShape = shape;
    let weight: number[] | undefined;
    let bias: number[] | undefined;
    if (layer.type === 'dense') {
      weight = [product(inShape), layer.units];
      bias = [layer.units];
      shape = [layer.units];
    } else if (layer.type === 'conv2d') {
      const [h, w, c] = inShape;
      if (layer.padding === 'same' && layer.kernel % 2 === 0)
        throw new Error(`conv2d: 'same' padding needs an odd kernel, got ${layer.kernel}`);
      const shrink = 2 * convPad(layer) - layer.kernel + 1;
      weight = [layer.kernel, layer.kernel, c, layer.filters];
      bias = [layer.filters];
      shape = [h + shrink, w + shrink, layer.filters];
    } else {
      const [h, w, c] = inShape;
      shape = [Math.floor(h / 2), Math.floor(w / 2), c];
    }
    if (shape.some((d) => !(d >= 1))) throw new Error(`layer ${layer.type}: output shape [${shape}] is empty`);
    return { inShape, outShape: shape, weight, bias };
  });
}

/** The layout's entry for a layer's weight or bias, checked against the spec's shapes. */
export function paramEntries(
  spec: ModelSpecLike,
  layout: ParamLayoutLike,
): { weight?: ParamEntryLike; bias?: ParamEntryLike }[] {
  const shapes = layerShapes(spec);
  const last = spec.layers[spec.layers.length - 1];
  if (last?.type !== 'dense' || last.units !== spec.classes)
    throw new Error(`model ${spec.name}: last layer must be dense with ${spec.classes} units`);
  const sameShape = (a: readonly number[], b: readonly number[]) =>
    a.length === b.length && a.every((d, i) => d === b[i]);
  return shapes.map((s, layer) => {
    const find = (kind: 'weight' | 'bias', shape: number[] | undefined) => {
      if (!shape) return undefined;
      const e = layout.entries.find((en) => en.layer === layer && en.kind === kind);
      if (!e) throw new Error(`layout for ${spec.name}: no ${kind} for layer ${layer}`);
      if (!sameShape(e.shape, shape) || e.size !== product(shape)) {
        throw new Error(`layout for ${spec.name}: ${e.name} has shape [${e.shape}], the spec needs [${shape}]`);
      }
      if (e.offset % PARAM_ALIGN !== 0 || e.offset + e.size > layout.totalElements) {
        throw new Error(`layout for ${spec.name}: ${e.name} at offset ${e.offset} is misaligned or out of range`);
      }
      return e;
    };
    return { weight: find('weight', s.weight), bias: find('bias', s.bias) };
  });
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

/**
 * Deterministic initial parameters (flat, `layout.totalElements`, padding 0): weights uniform in
 * ±limit with He-uniform limit √(6/fan_in) for layers followed by ReLU and Glorot-uniform
 * √(6/(fan_in+fan_out)) for the linear output layer (as Keras/TF do; PyTorch's default would be
 * 1/√fan_in), biases 0. Each tensor draws from its own stream (seed, tensor index), so the values of
 * a tensor do not depend on the sizes of the tensors before it. Pure: the same seed gives the same
 * bytes in a browser and in Node (only Math.sqrt and multiplication by it, which IEEE fixes).
 */
export function initParams(spec: ModelSpecLike, layout: ParamLayoutLike, seed: number): Float32Array {
  const entries = paramEntries(spec, layout);
  const out = new Float32Array(layout.totalElements);
  entries.forEach(({ weight }, layer) => {
    if (!weight) return;
    const spec_ = spec.layers[layer] as DenseLayerLike | Conv2dLayerLike;
    const receptive = weight.shape.length === 4 ? weight.shape[0] * weight.shape[1] : 1;
    const fanIn = receptive * weight.shape[weight.shape.length - 2];
    const fanOut = receptive * weight.shape[weight.shape.length - 1];
    const limit = spec_.activation === 'relu' ? Math.sqrt(6 / fanIn) : Math.sqrt(6 / (fanIn + fanOut));
    const rand = mulberry32((Math.imul(seed >>> 0, 0x9e3779b1) ^ Math.imul(layer + 1, 0x85ebca77)) >>> 0);
    for (let i = 0; i < weight.size; i++) out[weight.offset + i] = (2 * rand() - 1) * limit;
  });
  return out;
}
