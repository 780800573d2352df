/**
 * The admin page's reading of an exported checkpoint (web/admin/model-file.ts): the coordinator's own
 * safetensors export of a transformer reads back to the same spec, step and flat parameters; a
 * classifier, a missing spec, a missing or reshaped tensor are refused with one line. Under 100 ms.
 */
import { describe, expect, it } from 'vitest';
import { MLP_SPEC, parameterLayout, type TransformerSpec } from '../../../../core/training/model-spec';
import { encodeSafetensors } from '../../../../coordinator/datasets/safetensors';
import { modelFromSafetensors } from '../../../../web/admin/model-file';
import { mulberry32 } from '../../../support/rng';
import { safetensorsFile } from '../../../support/safetensors-file';

const SPEC: TransformerSpec = {
  type: 'transformer',
  name: 'gpt-file',
  vocab: 256,
  context: 8,
  dModel: 16,
  heads: 2,
  layers: 2,
  mlpRatio: 4,
};

function randomParams(spec: TransformerSpec): Float32Array {
  const layout = parameterLayout(spec);
  const rand = mulberry32(5);
  const params = new Float32Array(layout.totalElements);
  for (const e of layout.entries) for (let i = 0; i < e.size; i++) params[e.offset + i] = rand() - 0.5;
  return params;
}

describe('modelFromSafetensors', () => {
  it("reads the coordinator's export of a transformer back to the same spec, step and parameters", () => {
    const params = randomParams(SPEC);
    const file = encodeSafetensors({ spec: SPEC, params, step: 42, epoch: 1, cursor: 3 });
    const loaded = modelFromSafetensors(file);
    expect(loaded.spec).toEqual(SPEC);
    expect(loaded.step).toBe(42);
    expect(loaded.params).toEqual(params);
  });

  it('refuses a classifier, a file without a spec, and a missing or reshaped tensor', () => {
    const mlp = encodeSafetensors({
      spec: MLP_SPEC,
      params: new Float32Array(parameterLayout(MLP_SPEC).totalElements),
      step: 1,
      epoch: 0,
      cursor: 0,
    });
    expect(() => modelFromSafetensors(mlp)).toThrow(/not a language model/);
    const wte = { dtype: 'F32', shape: [256, 16], data: new Uint8Array(256 * 16 * 4) };
    expect(() => modelFromSafetensors(safetensorsFile({ 'wte.weight': wte }))).toThrow(/no model spec/);
    const withSpec = { 'tabswarm.spec': JSON.stringify(SPEC) } as unknown as { by: string };
    expect(() => modelFromSafetensors(safetensorsFile({ 'wte.weight': wte }, withSpec))).toThrow(
      /tensor wpe\.weight is missing or not F32 \[8,16\]/,
    );
    const reshaped = { ...wte, shape: [16, 256] };
    expect(() => modelFromSafetensors(safetensorsFile({ 'wte.weight': reshaped }, withSpec))).toThrow(
      /tensor wte\.weight is missing or not F32 \[256,16\]/,
    );
    expect(() => modelFromSafetensors(Uint8Array.from([1, 2]))).toThrow(/^checkpoint: not a safetensors file/);
  });
});
