/**
 * Model specs: a small JSON description of a network, validated with zod, so a job can name its model
 * and the coordinator (safetensors export, job validation) and the tabs (kernels) agree on every
 * parameter's name, shape and place in the flat parameter buffer.
 *
 * Layout conventions (fixed; kernels and the TF.js reference follow them):
 * - activations are NHWC (channels last), row-major; a dense layer's input is the flattened NHWC tensor;
 * - dense weight `[in, out]` (y = x·W + b), conv weight `[kh, kw, cin, cout]` (HWIO, as TF), bias `[out]`;
 * - parameters live in one flat float32 buffer, each tensor starting at a multiple of 64 elements
 *   (256 bytes, WebGPU's storage-buffer offset alignment) so kernels bind views without copies.
 */
import { z } from 'zod';

/** Alignment of every parameter tensor inside the flat buffer, in float32 elements. */
export const PARAM_ALIGN_ELEMENTS = 64;

export const denseLayerSchema = z.object({
  type: z.literal('dense'),
  /** Output features. */
  units: z.number().int().min(1).max(65536),
  activation: z.enum(['relu', 'none']).default('none'),
});

export const conv2dLayerSchema = z.object({
  type: z.literal('conv2d'),
  /** Output channels. */
  filters: z.number().int().min(1).max(4096),
  /** Square kernel size. */
  kernel: z.number().int().min(1).max(11),
  /** 'same' pads (kernel-1)/2 on each side (odd kernels); 'valid' pads nothing. Stride is 1. */
  padding: z.enum(['same', 'valid']).default('same'),
  activation: z.enum(['relu', 'none']).default('relu'),
});

export const maxPoolLayerSchema = z.object({
  type: z.literal('maxpool2'),
});

export const layerSpecSchema = z.discriminatedUnion('type', [denseLayerSchema, conv2dLayerSchema, maxPoolLayerSchema]);

/** A classifier built from a stack of layers (dense, conv, pool) over an image-shaped input. */
export const sequentialSpecSchema = z
  .object({
    name: z.string().min(1).max(64),
    /** Input shape [height, width, channels]. */
    input: z.tuple([z.number().int().min(1), z.number().int().min(1), z.number().int().min(1)]),
    /** Number of classes; the last layer must be dense with this many units and no activation. */
    classes: z.number().int().min(2).max(65536),
    layers: z.array(layerSpecSchema).min(1).max(64),
  })
  .superRefine((spec, ctx) => {
    const last = spec.layers[spec.layers.length - 1];
    if (last.type !== 'dense' || last.units !== spec.classes || last.activation !== 'none') {
      ctx.addIssue({
        code: 'custom',
        message: `last layer must be dense with ${spec.classes} units and activation "none"`,
      });
    }
    for (const p of propagateShapes(spec).problems) {
      ctx.addIssue({ code: 'custom', message: `layer ${p.layer}: ${p.message}`, path: ['layers', p.layer] });
    }
  });

/**
 * A decoder-only transformer language model (GPT-2's block: pre-LayerNorm, causal multi-head
 * self-attention, a GELU MLP of width mlpRatio·dModel, residual adds, a final LayerNorm, the output
 * projection tied to the token embedding). Tokens are integers below `vocab` (bytes: 256).
 */
export const transformerSpecSchema = z
  .object({
    type: z.literal('transformer'),
    name: z.string().min(1).max(64).default('transformer'),
    vocab: z.number().int().min(2).max(65536),
    /** Tokens per window (the sample); positions have their own embedding. */
    context: z.number().int().min(1).max(2048),
    dModel: z.number().int().min(1).max(4096),
    heads: z.number().int().min(1).max(64),
    layers: z.number().int().min(1).max(64),
    mlpRatio: z.number().int().min(1).max(16).default(4),
  })
  .superRefine((spec, ctx) => {
    if (spec.dModel % spec.heads !== 0)
      ctx.addIssue({ code: 'custom', message: `dModel ${spec.dModel} must be a multiple of heads ${spec.heads}` });
  });

/**
 * Either kind; a transformer is told apart by `type: "transformer"`, so a bad spec gets the issues of
 * its own kind rather than a union's of both.
 */
export const modelSpecSchema = z.unknown().transform((value, ctx): ModelSpec => {
  const transformer =
    typeof value === 'object' && value !== null && (value as { type?: unknown }).type === 'transformer';
  const parsed = (transformer ? transformerSpecSchema : sequentialSpecSchema).safeParse(value);
  if (parsed.success) return parsed.data;
  for (const issue of parsed.error.issues) ctx.addIssue({ code: 'custom', message: issue.message, path: issue.path });
  return z.NEVER;
});

export type LayerSpec = z.infer<typeof layerSpecSchema>;
export type SequentialSpec = z.infer<typeof sequentialSpecSchema>;
export type TransformerSpec = z.infer<typeof transformerSpecSchema>;
export type ModelSpec = SequentialSpec | TransformerSpec;

export function isTransformer(spec: ModelSpec): spec is TransformerSpec {
  return 'type' in spec && spec.type === 'transformer';
}

/** Padding of a conv layer on each side (stride 1): 'same' keeps the size for odd kernels. */
export function convPad(layer: { padding: 'same' | 'valid'; kernel: number }): number {
  return layer.padding === 'same' ? (layer.kernel - 1) / 2 : 0;
}

/** Per layer: input shape, output shape and its parameter shapes (weight, bias), if any. */
export interface LayerShapes {
  inShape: number[];
  outShape: number[];
  weight?: number[];
  bias?: number[];
}

const product = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

/**
 * Shape propagation through a layer stack, written once: the schema reports its problems, the
 * parameter layout and the kernels use its shapes. Activations are NHWC; a dense layer flattens.
 */
export function propagateShapes(spec: Pick<SequentialSpec, 'input' | 'layers'>): {
  shapes: LayerShapes[];
  problems: { layer: number; message: string }[];
} {
  const problems: { layer: number; message: string }[] = [];
  let shape: number[] = [...spec.input];
  let flat = false;
  const shapes = spec.layers.map((layer, i): LayerShapes => {
    const inShape = shape;
    let weight: number[] | undefined;
    let bias: number[] | undefined;
    if (layer.type === 'dense') {
      flat = true;
      weight = [product(inShape), layer.units];
      bias = [layer.units];
      shape = [layer.units];
    } else if (flat) {
      problems.push({ layer: i, message: `${layer.type} cannot follow a dense layer` });
    } else if (layer.type === 'conv2d') {
      const [h, w, c] = inShape;
      if (layer.padding === 'same' && layer.kernel % 2 === 0)
        problems.push({ layer: i, message: "'same' padding needs an odd kernel" });
      const shrink = 2 * convPad(layer) - layer.kernel + 1;
      if (h + shrink < 1 || w + shrink < 1) problems.push({ layer: i, message: 'kernel larger than input' });
      weight = [layer.kernel, layer.kernel, c, layer.filters];
      bias = [layer.filters];
      shape = [h + shrink, w + shrink, layer.filters];
    } else {
      const [h, w, c] = inShape;
      if (h < 2 || w < 2) problems.push({ layer: i, message: 'input too small to pool' });
      shape = [Math.floor(h / 2), Math.floor(w / 2), c];
    }
    return { inShape, outShape: shape, weight, bias };
  });
  return { shapes, problems };
}

/** The shapes of a valid stack; throws the first problem. */
export function layerShapes(spec: Pick<SequentialSpec, 'name' | 'input' | 'layers'>): LayerShapes[] {
  const { shapes, problems } = propagateShapes(spec);
  if (problems.length > 0) throw new Error(`model ${spec.name}: layer ${problems[0].layer}: ${problems[0].message}`);
  return shapes;
}

/** The issue's MLP: 784-256-128-10 with ReLU. */
export const MLP_SPEC: SequentialSpec = {
  name: 'mlp',
  input: [28, 28, 1],
  classes: 10,
  layers: [
    { type: 'dense', units: 256, activation: 'relu' },
    { type: 'dense', units: 128, activation: 'relu' },
    { type: 'dense', units: 10, activation: 'none' },
  ],
};

/** Two conv+ReLU+max-pool blocks, then dense layers, for 28×28×1 inputs. */
export const CNN_SPEC: SequentialSpec = {
  name: 'cnn',
  input: [28, 28, 1],
  classes: 10,
  layers: [
    { type: 'conv2d', filters: 16, kernel: 5, padding: 'same', activation: 'relu' },
    { type: 'maxpool2' },
    { type: 'conv2d', filters: 32, kernel: 5, padding: 'same', activation: 'relu' },
    { type: 'maxpool2' },
    { type: 'dense', units: 128, activation: 'relu' },
    { type: 'dense', units: 10, activation: 'none' },
  ],
};

/** A tiny MLP for fast system tests on SwiftShader. */
export const TINY_MLP_SPEC: SequentialSpec = {
  name: 'tiny-mlp',
  input: [28, 28, 1],
  classes: 10,
  layers: [
    { type: 'dense', units: 32, activation: 'relu' },
    { type: 'dense', units: 10, activation: 'none' },
  ],
};

/** The issue's byte-level GPT: 4 blocks of width 128 with 4 heads over 128 bytes, ≈0.84M parameters. */
export const GPT_TINY_SPEC: TransformerSpec = {
  type: 'transformer',
  name: 'gpt-tiny',
  vocab: 256,
  context: 128,
  dModel: 128,
  heads: 4,
  layers: 4,
  mlpRatio: 4,
};

export const BUILTIN_MODELS: Readonly<Record<string, ModelSpec>> = {
  mlp: MLP_SPEC,
  cnn: CNN_SPEC,
  'tiny-mlp': TINY_MLP_SPEC,
  'gpt-tiny': GPT_TINY_SPEC,
};

/** Resolve a job's `model` field: a built-in name or an inline spec. Throws a readable error. */
export function resolveModelSpec(model: unknown): ModelSpec {
  if (typeof model === 'string') {
    const spec = BUILTIN_MODELS[model];
    if (!spec) throw new Error(`unknown model "${model}" (built-in: ${Object.keys(BUILTIN_MODELS).join(', ')})`);
    return spec;
  }
  const parsed = modelSpecSchema.safeParse(model);
  if (!parsed.success)
    throw new Error(
      `invalid model spec: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  return parsed.data;
}

/** One parameter tensor's place in the flat buffer. */
export interface ParamEntry {
  /**
   * e.g. `layers.0.weight` (stacks, PyTorch-like) or `h.0.attn.c_attn.weight` (transformers, GPT-2's
   * names), for the safetensors export.
   */
  name: string;
  shape: number[];
  /** Offset in float32 elements; a multiple of PARAM_ALIGN_ELEMENTS. */
  offset: number;
  size: number;
  /** Index of the layer in `spec.layers` (stacks) or of the block (transformers; −1 outside the blocks). */
  layer: number;
  /** 'weight' for matrices and LayerNorm gains, 'bias' for additive vectors. */
  kind: 'weight' | 'bias';
}

export interface ParamLayout {
  entries: ParamEntry[];
  /** Length of the flat buffer in elements (aligned, so it includes padding). */
  totalElements: number;
  /** Sum of the tensors' sizes (no padding): the model's parameter count. */
  parameterCount: number;
  /**
   * AdamW's weight decay applies to the first `decayElements` of the flat buffer only. Stacks: all of
   * it (as before). Transformers: the matrices, which the layout puts first (see transformerLayout).
   */
  decayElements: number;
}

class LayoutBuilder {
  readonly entries: ParamEntry[] = [];
  offset = 0;
  parameterCount = 0;

  add(name: string, shape: number[], layer: number, kind: 'weight' | 'bias'): void {
    const size = product(shape);
    this.entries.push({ name, shape, offset: this.offset, size, layer, kind });
    this.offset += Math.ceil(size / PARAM_ALIGN_ELEMENTS) * PARAM_ALIGN_ELEMENTS;
    this.parameterCount += size;
  }
}

export function parameterLayout(spec: ModelSpec): ParamLayout {
  if (isTransformer(spec)) return transformerLayout(spec);
  const b = new LayoutBuilder();
  layerShapes(spec).forEach((s, i) => {
    if (s.weight) b.add(`layers.${i}.weight`, s.weight, i, 'weight');
    if (s.bias) b.add(`layers.${i}.bias`, s.bias, i, 'bias');
  });
  return { entries: b.entries, totalElements: b.offset, parameterCount: b.parameterCount, decayElements: b.offset };
}

/**
 * A transformer's tensors, named as GPT-2's checkpoints (`wte`, `wpe`, `h.N.ln_1`, `h.N.attn.c_attn`,
 * `h.N.attn.c_proj`, `h.N.ln_2`, `h.N.mlp.c_fc`, `h.N.mlp.c_proj`, `ln_f`; weights [in, out] as GPT-2's
 * Conv1D). The matrices come first — wte, wpe and the four per block — and only they get weight decay
 * (as nanoGPT: every tensor with two dimensions); biases and LayerNorm gains and biases come after.
 */
export function transformerLayout(spec: TransformerSpec): ParamLayout {
  const { vocab, context, dModel: d, layers } = spec;
  const f = spec.mlpRatio * d;
  const b = new LayoutBuilder();
  b.add('wte.weight', [vocab, d], -1, 'weight');
  b.add('wpe.weight', [context, d], -1, 'weight');
  for (let l = 0; l < layers; l++) {
    b.add(`h.${l}.attn.c_attn.weight`, [d, 3 * d], l, 'weight');
    b.add(`h.${l}.attn.c_proj.weight`, [d, d], l, 'weight');
    b.add(`h.${l}.mlp.c_fc.weight`, [d, f], l, 'weight');
    b.add(`h.${l}.mlp.c_proj.weight`, [f, d], l, 'weight');
  }
  const decayElements = b.offset;
  for (let l = 0; l < layers; l++) {
    b.add(`h.${l}.ln_1.weight`, [d], l, 'weight');
    b.add(`h.${l}.ln_1.bias`, [d], l, 'bias');
    b.add(`h.${l}.attn.c_attn.bias`, [3 * d], l, 'bias');
    b.add(`h.${l}.attn.c_proj.bias`, [d], l, 'bias');
    b.add(`h.${l}.ln_2.weight`, [d], l, 'weight');
    b.add(`h.${l}.ln_2.bias`, [d], l, 'bias');
    b.add(`h.${l}.mlp.c_fc.bias`, [f], l, 'bias');
    b.add(`h.${l}.mlp.c_proj.bias`, [d], l, 'bias');
  }
  b.add('ln_f.weight', [d], -1, 'weight');
  b.add('ln_f.bias', [d], -1, 'bias');
  return { entries: b.entries, totalElements: b.offset, parameterCount: b.parameterCount, decayElements };
}
