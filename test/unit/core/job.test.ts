import { describe, expect, it } from 'vitest';
import { defaultJob, effectiveDatasetSize, jobPublic, jobPublicSchema, parseJobSpec } from '../../../core/training/job';
import { CNN_SPEC, MLP_SPEC, TINY_MLP_SPEC } from '../../../core/training/model-spec';

describe('job spec', () => {
  it('fills every default: Fashion-MNIST, mlp, AdamW lr 1e-3, global batch 128, one epoch', () => {
    expect(parseJobSpec({})).toEqual(defaultJob);
    expect(defaultJob).toMatchObject({
      model: MLP_SPEC,
      dataset: { name: 'fashion-mnist' },
      optimizer: { kind: 'adamw', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 },
      globalBatch: 128,
      epochs: 1,
      commitEvery: 1,
    });
    expect(defaultJob.minWorkers).toBeLessThanOrEqual(defaultJob.maxWorkers);
    expect(defaultJob.dataset.subset).toBeUndefined();
  });

  it('resolves built-in model names and inline specs', () => {
    expect(parseJobSpec({ model: 'cnn' }).model).toEqual(CNN_SPEC);
    expect(parseJobSpec({ model: { ...TINY_MLP_SPEC, name: 'mine' } }).model).toEqual({
      ...TINY_MLP_SPEC,
      name: 'mine',
    });
  });

  it('fills optimizer defaults per kind', () => {
    expect(parseJobSpec({ optimizer: { kind: 'sgd', lr: 0.1 } }).optimizer).toEqual({
      kind: 'sgd',
      lr: 0.1,
      momentum: 0,
    });
    expect(parseJobSpec({ optimizer: { kind: 'adamw', lr: 0.01 } }).optimizer).toMatchObject({
      kind: 'adamw',
      lr: 0.01,
      beta2: 0.999,
    });
  });

  const bad: [string, unknown, RegExp][] = [
    ['an unknown model', { model: 'resnet' }, /model: unknown model "resnet"/],
    ['an invalid inline model', { model: { ...TINY_MLP_SPEC, classes: 3 } }, /model/],
    ['minWorkers above maxWorkers', { minWorkers: 4, maxWorkers: 2 }, /minWorkers: minWorkers must be <= maxWorkers/],
    ['a zero learning rate', { optimizer: { kind: 'sgd', lr: 0 } }, /optimizer\.lr/],
    ['an unknown optimizer', { optimizer: { kind: 'adam', lr: 0.1 } }, /optimizer/],
    ['an unknown field', { learningRate: 0.1 }, /learningRate|unrecognized/i],
    ['a zero global batch', { globalBatch: 0 }, /globalBatch/],
    ['fractional epochs', { epochs: 1.5 }, /epochs/],
    ['a negative seed', { seed: -1 }, /seed/],
    ['a dataset subset of 0', { dataset: { name: 'fashion-mnist', subset: 0 } }, /dataset\.subset/],
    ['a string where a number belongs', { heartbeatMs: '1000' }, /heartbeatMs/],
  ];
  for (const [name, job, message] of bad) {
    it(`rejects ${name} with one readable line`, () => {
      expect(() => parseJobSpec(job)).toThrow(/^invalid job: /);
      expect(() => parseJobSpec(job)).toThrow(message);
    });
  }
});

describe('job public view', () => {
  it('applies the dataset subset and derives the step counts', () => {
    const job = parseJobSpec({ dataset: { name: 'fashion-mnist', subset: 1000 }, globalBatch: 128, epochs: 3 });
    expect(effectiveDatasetSize(job, 60000)).toBe(1000);
    expect(effectiveDatasetSize(job, 500)).toBe(500);
    const pub = jobPublic(job, 60000);
    expect(pub).toMatchObject({
      datasetSize: 1000,
      stepsPerEpoch: 8,
      totalSteps: 24,
      dataset: 'fashion-mnist',
      seed: job.seed,
    });
    expect(jobPublic(defaultJob, 60000)).toMatchObject({ datasetSize: 60000, stepsPerEpoch: 469, totalSteps: 469 });
  });

  it('passes its own schema after a JSON round trip (what a tab validates)', () => {
    const pub = jobPublic(parseJobSpec({ model: 'cnn', optimizer: { kind: 'sgd', lr: 0.05, momentum: 0.9 } }), 60000);
    expect(jobPublicSchema.parse(JSON.parse(JSON.stringify(pub)))).toEqual(pub);
  });
});
