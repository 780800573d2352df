import { describe, expect, it } from 'vitest';
import {
  CNN_SPEC,
  MLP_SPEC,
  PARAM_ALIGN_ELEMENTS,
  modelSpecSchema,
  parameterLayout,
  resolveModelSpec,
} from '../../coordinator/core/model-spec';

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
    expect(layout.activationShapes[3]).toEqual([7, 7, 32]);
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
});
