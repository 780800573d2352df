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
import { checkedSlices } from '../../../coordinator/machine/checks';
import { parseJobSpec } from '../../../core/training/job';
import { GRADIENT_SKETCH_BUCKETS, PARAMS_SKETCH_BUCKETS } from '../../../core/state/sketch';
import { verifierAnswerSchema, verifierRequestSchema } from '../../../core/protocol/verifier';

const sketch = (k: number) => ({ values: new Float64Array(k), mass: new Float64Array(k) });
const result = {
  type: 'result',
  id: 3,
  own: [sketch(32), sketch(32)],
  params: sketch(PARAMS_SKETCH_BUCKETS),
  startOk: true,
  paramsHash: '0123456789abcdef',
  ms: 12,
};
const request = {
  type: 'recompute',
  id: 3,
  snapshotPath: '/tmp/s',
  stepHash: 'abcdef0123456789',
  world: 2,
  mode: 'every-step',
  steps: [{ slices: [Uint32Array.of(1, 2), new Uint32Array(0)], count: 2 }],
  fresh: false,
};

describe('verifier protocol', () => {
  it('accepts the messages the two ends send', () => {
    expect(verifierAnswerSchema.safeParse(result).success).toBe(true);
    expect(verifierRequestSchema.safeParse(request).success).toBe(true);
    expect(
      verifierRequestSchema.safeParse({ type: 'init', job: {}, dataset: { kind: 'images', dir: '/d' } }).success,
    ).toBe(true);
    const text = { kind: 'text', bytes: new Uint8Array(10) };
    expect(verifierRequestSchema.safeParse({ type: 'init', job: {}, dataset: text }).success).toBe(true);
    const rows = { kind: 'tensors', x: new Float32Array(6), y: new Uint32Array(2), features: 3 };
    expect(verifierRequestSchema.safeParse({ type: 'init', job: {}, dataset: rows }).success).toBe(true);
    const local = { ...request, mode: 'local', rank: 1, sum: { values: [1, 2], mass: [1, 2] } };
    expect(verifierRequestSchema.safeParse(local).success).toBe(true);
    const localAnswer = { ...result, own: [sketch(32)], moments: [sketch(32), sketch(32)], outer: sketch(32) };
    expect(verifierAnswerSchema.safeParse(localAnswer).success).toBe(true);
    expect(verifierAnswerSchema.safeParse({ type: 'ready', adapter: 'x', stepMs: 3 }).success).toBe(true);
  });

  it.each([
    ['plain arrays for a sketch', { own: [{ values: [0], mass: [0] }] }],
    ['too many buckets', { own: [sketch(GRADIENT_SKETCH_BUCKETS + 1)] }],
    ['values and mass of different lengths', { own: [{ values: new Float64Array(2), mass: new Float64Array(3) }] }],
    ['a parameter sketch of too many buckets', { params: sketch(PARAMS_SKETCH_BUCKETS + 1) }],
    ['Float32Array values', { params: { values: new Float32Array(32), mass: new Float64Array(32) } }],
    ['a hash that is not hex', { paramsHash: 'not-a-hash-at-all' }],
    ['an extra field', { extra: 1 }],
  ])('refuses an answer with %s', (_, change) => {
    expect(verifierAnswerSchema.safeParse({ ...result, ...change }).success).toBe(false);
  });

  it.each([
    ['plain-array slices', { steps: [{ slices: [[1, 2]], count: 2 }] }],
    ['Int32Array slices', { steps: [{ slices: [Int32Array.of(-1)], count: 1 }] }],
    ['no slices', { steps: [{ slices: [], count: 2 }] }],
    ['no steps', { steps: [] }],
    ['a bad step hash', { stepHash: 'xyz' }],
    ['a negative count', { steps: [{ slices: [Uint32Array.of(1)], count: -1 }] }],
    ['a world of 0', { world: 0 }],
    ['another mode', { mode: 'sometimes' }],
    ['no fresh flag', { fresh: undefined }],
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

describe('checkedSlices', () => {
  const job = parseJobSpec({ globalBatch: 96, epochs: 2, verify: {} });
  const s = { job, datasetSize: 1000 };
  const world = [1, 2.5, 0.5].map((share, rank) => ({ workerId: `w${rank}`, rank, share, addr: '', invite: null }));
  it('gives each rank the indices the sampler gives it, for a step in the second epoch and a short last step', () => {
    const shares = world.map((w) => w.share);
    for (const step of [1, 12, 13]) {
      const epoch = step > 11 ? 1 : 0;
      const cursor = ((step - 1) % 11) * 96;
      // A verifying job never has holes: step s starts where the steps before it left the record.
      const at = { epoch, cursor, holes: [] };
      const [{ slices, count }] = checkedSlices(s, { world, step, firstStep: step, at });
      expect(count).toBe(step === 11 ? 1000 - 960 : Math.min(96, 1000 - cursor));
      expect(slices.reduce((a, x) => a + x.length, 0)).toBe(count);
      slices.forEach((slice, rank) => {
        const expected = assignStep(cursor, count, shares)[rank];
        expect(Array.from(slice)).toEqual(
          Array.from(epochOrder(job.seed, epoch, 1000).subarray(expected.start, expected.start + expected.count)),
        );
      });
    }
    const last = { epoch: 0, cursor: 960, holes: [] };
    expect(checkedSlices(s, { world: [world[0]], step: 11, firstStep: 11, at: last })[0].count).toBe(40);
    // With holes (the plan is the tabs'): holes first.
    const holed = { epoch: 0, cursor: 960, holes: [[10, 20]] as [number, number][] };
    const [withHoles] = checkedSlices(s, {
      world: world.slice(0, 2).map((w) => ({ ...w, share: 1 })),
      step: 11,
      firstStep: 11,
      at: holed,
    });
    expect(withHoles.count).toBe(50);
    const order = epochOrder(job.seed, 0, 1000);
    expect(Array.from(withHoles.slices[0])).toEqual(
      Array.from(order.subarray(10, 20)).concat(Array.from(order.subarray(960, 975))),
    );
  });

  it('gives every step of a local-mode commit, in order', () => {
    const steps = checkedSlices(s, { world, step: 11, firstStep: 8, at: { epoch: 0, cursor: 7 * 96, holes: [] } });
    expect(steps.map((x) => x.step)).toEqual([8, 9, 10, 11]);
    expect(steps.map((x) => x.count)).toEqual([96, 96, 96, 40]);
  });
});
