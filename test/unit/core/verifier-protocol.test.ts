/**
 * The coordinator–verifier messages (core/protocol/verifier.ts) accept what the two ends
 * send and nothing else: typed arrays of the right kind and size, hashes of the right form; the slices of
 * a step as the sampler gave them to the ranks; and the SwiftShader environment the coordinator gives
 * the verifier process (node/gpu-env.ts).
 */
import { describe, expect, it } from 'vitest';
import { swiftshaderEnv } from '../../../node/gpu-env';
import { assignStep } from '../../../core/training/groups';
import { epochOrder } from '../../../core/training/sampler';
import { stepSlices } from '../../../coordinator/machine/verification';
import { GRADIENT_SKETCH_BUCKETS, PARAMS_SKETCH_BUCKETS } from '../../../core/state/sketch';
import { verifierAnswerSchema, verifierRequestSchema } from '../../../core/protocol/verifier';

const sketch = (k: number) => ({ values: new Float64Array(k), mass: new Float64Array(k) });
const result = {
  type: 'result',
  id: 3,
  own: [sketch(32), sketch(32)],
  params: sketch(PARAMS_SKETCH_BUCKETS),
  paramsHash: '0123456789abcdef',
  ms: 12,
};
const request = {
  type: 'recompute',
  id: 3,
  snapshotPath: '/tmp/s',
  stepHash: 'abcdef0123456789',
  world: 2,
  slices: [Uint32Array.of(1, 2), new Uint32Array(0)],
  count: 2,
};

describe('verifier protocol', () => {
  it('accepts the messages the two ends send', () => {
    expect(verifierAnswerSchema.safeParse(result).success).toBe(true);
    expect(verifierRequestSchema.safeParse(request).success).toBe(true);
    expect(verifierRequestSchema.safeParse({ type: 'init', job: {}, datasetDir: '/d' }).success).toBe(true);
    expect(verifierAnswerSchema.safeParse({ type: 'ready', adapter: 'x', stepMs: 3 }).success).toBe(true);
  });

  it.each([
    ['plain arrays for a sketch', { own: [{ values: [0], mass: [0] }] }],
    ['too many buckets', { own: [sketch(GRADIENT_SKETCH_BUCKETS + 1)] }],
    ['values and mass of different lengths', { own: [{ values: new Float64Array(2), mass: new Float64Array(3) }] }],
    ['a parameter sketch of the wrong size', { params: sketch(PARAMS_SKETCH_BUCKETS - 1) }],
    ['Float32Array values', { params: { values: new Float32Array(32), mass: new Float64Array(32) } }],
    ['a hash that is not hex', { paramsHash: 'not-a-hash-at-all' }],
    ['an extra field', { extra: 1 }],
  ])('refuses an answer with %s', (_, change) => {
    expect(verifierAnswerSchema.safeParse({ ...result, ...change }).success).toBe(false);
  });

  it.each([
    ['plain-array slices', { slices: [[1, 2]] }],
    ['Int32Array slices', { slices: [Int32Array.of(-1)] }],
    ['no slices', { slices: [] }],
    ['a bad step hash', { stepHash: 'xyz' }],
    ['count 0', { count: 0 }],
    ['a world of 0', { world: 0 }],
  ])('refuses a request with %s', (_, change) => {
    expect(verifierRequestSchema.safeParse({ ...request, ...change }).success).toBe(false);
  });
});

describe('swiftshaderEnv', () => {
  const icd = '/usr/lib/chromium/vk_swiftshader_icd.json';
  it('points Vulkan at SwiftShader where its ICD exists and nothing is set', () => {
    expect(swiftshaderEnv({ LD_LIBRARY_PATH: '/a' }, icd, () => true)).toEqual({
      VK_ICD_FILENAMES: icd,
      LD_LIBRARY_PATH: '/a:/usr/lib/chromium',
    });
    expect(swiftshaderEnv({}, icd, () => true).LD_LIBRARY_PATH).toBe('/usr/lib/chromium');
  });
  it('adds nothing where a driver is chosen already or the ICD is absent', () => {
    expect(swiftshaderEnv({ VK_ICD_FILENAMES: '/mine.json' }, icd, () => true)).toEqual({});
    expect(swiftshaderEnv({}, icd, () => false)).toEqual({});
  });
});

describe('stepSlices', () => {
  const plan = { datasetSize: 1000, globalBatch: 96, epochs: 2, commitEvery: 1 };
  it('gives each rank the indices the sampler gives it, for a step in the second epoch and a short last step', () => {
    const shares = [1, 2.5, 0.5];
    for (const step of [1, 12, 13]) {
      // A verifying job never has holes: step s starts where the steps before it left the record.
      const at = { epoch: step > 11 ? 1 : 0, cursor: ((step - 1) % 11) * 96, holes: [] };
      const { slices, count } = stepSlices(plan, 7, at, step, shares);
      const epoch = step > 11 ? 1 : 0;
      const cursor = ((step - 1) % 11) * 96;
      expect(count).toBe(step === 11 ? 1000 - 960 : Math.min(96, 1000 - cursor));
      expect(slices.reduce((a, s) => a + s.length, 0)).toBe(count);
      slices.forEach((slice, rank) => {
        const expected = assignStep(cursor, count, shares)[rank];
        expect(Array.from(slice)).toEqual(
          Array.from(epochOrder(7, epoch, 1000).subarray(expected.start, expected.start + expected.count)),
        );
      });
    }
    expect(stepSlices(plan, 7, { epoch: 0, cursor: 960, holes: [] }, 11, [1]).count).toBe(40);
    // With holes (a job that does not verify never gets here, but the plan is the tabs'): holes first.
    const withHoles = stepSlices(plan, 7, { epoch: 0, cursor: 960, holes: [[10, 20]] }, 11, [1, 1]);
    expect(withHoles.count).toBe(50);
    expect(Array.from(withHoles.slices[0])).toEqual(
      Array.from(epochOrder(7, 0, 1000).subarray(10, 20)).concat(Array.from(epochOrder(7, 0, 1000).subarray(960, 975))),
    );
  });
});
