import { describe, expect, it } from 'vitest';
import {
  CNN_SPEC,
  GPT_TINY_SPEC,
  layerShapes,
  MLP_SPEC,
  PARAM_ALIGN_ELEMENTS,
  modelSpecSchema,
  parameterLayout,
  resolveModelSpec,
} from '../../../core/training/model-spec';

describe('model specs', () => {
  it('the built-in mlp has 784·256+256 + 256·128+128 + 128·10+10 parameters', () => {
    const layout = parameterLayout(MLP_SPEC);
    expect(layout.parameterCount).toBe(784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
    expect(layout.entries.map((e) => e.name)).toEqual([
      'layers.0.weight',
      'layers.0.bias',
      'layers.1.weight',
      'layers.1.bias',
      'layers.2.weight',
      'layers.2.bias',
    ]);
    expect(layout.entries[0].shape).toEqual([784, 256]);
  });

  it('places every tensor at an aligned offset without overlap', () => {
    for (const spec of [MLP_SPEC, CNN_SPEC]) {
      const layout = parameterLayout(spec);
      let end = 0;
      for (const e of layout.entries) {
        expect(e.offset % PARAM_ALIGN_ELEMENTS).toBe(0);
        expect(e.offset).toBeGreaterThanOrEqual(end);
        end = e.offset + e.size;
      }
      expect(layout.totalElements).toBeGreaterThanOrEqual(end);
    }
  });

  it('the cnn shrinks 28×28 to 7×7×32 before its dense layers', () => {
    const layout = parameterLayout(CNN_SPEC);
    expect(layerShapes(CNN_SPEC)[3].outShape).toEqual([7, 7, 32]);
    expect(layout.entries.find((e) => e.name === 'layers.4.weight')!.shape).toEqual([7 * 7 * 32, 128]);
    expect(layout.entries.find((e) => e.name === 'layers.0.weight')!.shape).toEqual([5, 5, 1, 16]);
  });

  it('rejects a spec whose last layer is not a logits layer, and a conv after a dense layer', () => {
    const bad1 = { ...MLP_SPEC, layers: [{ type: 'dense', units: 10, activation: 'relu' }] };
    expect(modelSpecSchema.safeParse(bad1).success).toBe(false);
    const bad2 = {
      ...MLP_SPEC,
      layers: [
        { type: 'dense', units: 8 },
        { type: 'conv2d', filters: 2, kernel: 3 },
        { type: 'dense', units: 10 },
      ],
    };
    expect(modelSpecSchema.safeParse(bad2).success).toBe(false);
  });

  it('resolves built-in names and reports unknown ones clearly', () => {
    expect(resolveModelSpec('mlp')).toBe(MLP_SPEC);
    expect(() => resolveModelSpec('resnet')).toThrow(/unknown model "resnet"/);
    expect(() => resolveModelSpec({ name: 'x' })).toThrow(/invalid model spec/);
  });

  it('gpt-tiny: GPT-2 names, ≈0.84M parameters, matrices first and only they decay', () => {
    const layout = parameterLayout(GPT_TINY_SPEC);
    const d = 128;
    const block = d * 3 * d + d * d + 2 * d * 4 * d + (2 * d + 3 * d + d + 2 * d + 4 * d + d);
    expect(layout.parameterCount).toBe(256 * d + 128 * d + 4 * block + 2 * d);
    expect(layout.parameterCount).toBe(842_496);
    const names = layout.entries.map((e) => e.name);
    expect(names.slice(0, 4)).toEqual(['wte.weight', 'wpe.weight', 'h.0.attn.c_attn.weight', 'h.0.attn.c_proj.weight']);
    expect(names).toContain('h.3.mlp.c_proj.bias');
    expect(names.at(-1)).toBe('ln_f.bias');
    for (const e of layout.entries) {
      expect(e.offset < layout.decayElements).toBe(e.shape.length === 2);
      expect(e.offset % PARAM_ALIGN_ELEMENTS).toBe(0);
    }
    expect(layout.entries.find((e) => e.name === 'h.2.mlp.c_fc.weight')!.shape).toEqual([d, 4 * d]);
    expect(parameterLayout(MLP_SPEC).decayElements).toBe(parameterLayout(MLP_SPEC).totalElements);
  });

  it('parses an inline transformer with defaults and rejects heads that do not divide dModel', () => {
    const spec = resolveModelSpec({ type: 'transformer', vocab: 256, context: 16, dModel: 24, heads: 3, layers: 1 });
    expect(spec).toMatchObject({ name: 'transformer', mlpRatio: 4, dModel: 24 });
    expect(resolveModelSpec('gpt-tiny')).toBe(GPT_TINY_SPEC);
    expect(() =>
      resolveModelSpec({ type: 'transformer', vocab: 256, context: 16, dModel: 24, heads: 5, layers: 1 }),
    ).toThrow(/multiple of heads 5/);
    expect(() =>
      resolveModelSpec({ type: 'transformer', vocab: 256, context: 0, dModel: 24, heads: 3, layers: 1 }),
    ).toThrow(/context/);
  });
});
