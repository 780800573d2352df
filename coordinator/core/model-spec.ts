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

export const modelSpecSchema = z
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
    let shape: number[] = [...spec.input];
    let flat = false;
    spec.layers.forEach((layer, i) => {
      if (layer.type === 'dense') {
        flat = true;
        shape = [layer.units];
      } else if (flat) {
        ctx.addIssue({
          code: 'custom',
          message: `layer ${i} (${layer.type}) cannot follow a dense layer`,
          path: ['layers', i],
        });
      } else if (layer.type === 'conv2d') {
        const [h, w] = shape;
        const out = layer.padding === 'same' ? 0 : layer.kernel - 1;
        if (layer.padding === 'same' && layer.kernel % 2 === 0) {
          ctx.addIssue({
            code: 'custom',
            message: `layer ${i}: 'same' padding needs an odd kernel`,
            path: ['layers', i],
          });
        }
        if (h - out < 1 || w - out < 1)
          ctx.addIssue({ code: 'custom', message: `layer ${i}: kernel larger than input`, path: ['layers', i] });
        shape = [h - out, w - out, layer.filters];
      } else {
        const [h, w, c] = shape;
        if (h < 2 || w < 2)
          ctx.addIssue({ code: 'custom', message: `layer ${i}: input too small to pool`, path: ['layers', i] });
        shape = [Math.floor(h / 2), Math.floor(w / 2), c];
      }
    });
  });

export type LayerSpec = z.infer<typeof layerSpecSchema>;
export type ModelSpec = z.infer<typeof modelSpecSchema>;

/** The issue's MLP: 784-256-128-10 with ReLU. */
export const MLP_SPEC: ModelSpec = {
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
export const CNN_SPEC: ModelSpec = {
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
export const TINY_MLP_SPEC: ModelSpec = {
  name: 'tiny-mlp',
  input: [28, 28, 1],
  classes: 10,
  layers: [
    { type: 'dense', units: 32, activation: 'relu' },
    { type: 'dense', units: 10, activation: 'none' },
  ],
};

export const BUILTIN_MODELS: Readonly<Record<string, ModelSpec>> = {
  mlp: MLP_SPEC,
  cnn: CNN_SPEC,
  'tiny-mlp': TINY_MLP_SPEC,
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
  /** e.g. `layers.0.weight`, `layers.0.bias` (PyTorch-like names for the safetensors export). */
  name: string;
  shape: number[];
  /** Offset in float32 elements; a multiple of PARAM_ALIGN_ELEMENTS. */
  offset: number;
  size: number;
  /** Index of the layer in `spec.layers`. */
  layer: number;
  kind: 'weight' | 'bias';
}

export interface ParamLayout {
  entries: ParamEntry[];
  /** Length of the flat buffer in elements (aligned, so it includes padding). */
  totalElements: number;
  /** Sum of the tensors' sizes (no padding): the model's parameter count. */
  parameterCount: number;
  /** Activation shape after each layer ([h,w,c] or [units]). */
  activationShapes: number[][];
}

export function parameterLayout(spec: ModelSpec): ParamLayout {
  const entries: ParamEntry[] = [];
  const activationShapes: number[][] = [];
  let offset = 0;
  let parameterCount = 0;
  let shape: number[] = [...spec.input];
  const add = (name: string, s: number[], layer: number, kind: 'weight' | 'bias') => {
    const size = s.reduce((a, b) => a * b, 1);
    entries.push({ name, shape: s, offset, size, layer, kind });
    offset += Math.ceil(size / PARAM_ALIGN_ELEMENTS) * PARAM_ALIGN_ELEMENTS;
    parameterCount += size;
  };
  spec.layers.forEach((layer, i) => {
    if (layer.type === 'dense') {
      const inFeatures = shape.reduce((a, b) => a * b, 1);
      add(`layers.${i}.weight`, [inFeatures, layer.units], i, 'weight');
      add(`layers.${i}.bias`, [layer.units], i, 'bias');
      shape = [layer.units];
    } else if (layer.type === 'conv2d') {
      const [h, w, c] = shape;
      add(`layers.${i}.weight`, [layer.kernel, layer.kernel, c, layer.filters], i, 'weight');
      add(`layers.${i}.bias`, [layer.filters], i, 'bias');
      const shrink = layer.padding === 'same' ? 0 : layer.kernel - 1;
      shape = [h - shrink, w - shrink, layer.filters];
    } else {
      const [h, w, c] = shape;
      shape = [Math.floor(h / 2), Math.floor(w / 2), c];
    }
    activationShapes.push([...shape]);
  });
  return { entries, totalElements: offset, parameterCount, activationShapes };
}
