/**
 * The state hash on the GPU, end to end: `Model.withParamDigests` (kernels/ops/sha256.wgsl over the live
 * params buffer) and the worker's `ElasticSteps.applyAndHash`, against the CPU definition
 * (core/hash.ts) and the independent node:crypto reference, for the built-in mlp (0.9 MB) and
 * gpt-tiny (3.2 MB); and no GPU buffer created per step.
 */
import { Buffer } from 'node:buffer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  chunkDigests,
  HASH_CHUNK_BYTES,
  hashParams,
  paramsHasher,
  stateHash,
  stateHashOfDigests,
  trainingStateHash,
} from '../../core/state/hash';
import { GPT_TINY_SPEC, MLP_SPEC, parameterLayout, type ModelSpec } from '../../core/training/model-spec';
import { createModel, type Model } from '../../kernels/model/model';
import type { Gpu } from '../../kernels/runtime';
import { hashModelParams, hashModelState } from '../../kernels/model/training-state';
import { ImageBatches } from '../../web/worker/data/batches';
import { ElasticSteps } from '../../web/worker/elastic-steps';
import { nodeGpu, skipWithoutNodeGpu, withValidation } from '../support/node-gpu';
import { treeHashReference } from '../support/tree-hash-reference';

const ADAMW = { kind: 'adamw', lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 } as const;
const BATCH = 8;

function imageBatches(count: number): ImageBatches {
  const images = Uint8Array.from({ length: count * 784 }, (_, i) => (i * 2654435761) >>> 24);
  const labels = Uint8Array.from({ length: count }, (_, i) => i % 10);
  return new ImageBatches({ images, labels, count, rows: 28, cols: 28 }, BATCH);
}
/**
 * The whole training state's hash by the independent reference: params, each moment, then t as a
 * little-endian u64, one part each (core/state/hash.ts `trainingStateHash`).
 */
async function stateReference(model: Model): Promise<string> {
  const buffers = await Promise.all(
    [model.params, ...model.moments].map((t) => model.readFloats(t, model.totalElements)),
  );
  const t = Buffer.alloc(8);
  t.writeBigUInt64LE(BigInt(model.optimizerStep));
  return treeHashReference(...buffers, t);
}

const indicesOf = (i: number) => Uint32Array.from({ length: BATCH }, (_, k) => (i * BATCH + k) % 64);

// The device is taken in beforeAll, which runs before the per-test skip: skip the suite here.
describe.skipIf(await skipWithoutNodeGpu())('the parameter hash on the GPU', () => {
  let gpu: Gpu;
  const models: Model[] = [];
  const make = (spec: ModelSpec, seed: number) => {
    const model = createModel(gpu, spec, parameterLayout(spec), { maxBatch: BATCH, optimizer: ADAMW, seed });
    models.push(model);
    return model;
  };
  beforeAll(async () => {
    gpu = await nodeGpu();
  });
  afterAll(() => {
    for (const m of models) m.destroy();
  });

  it.each([
    ['mlp', MLP_SPEC],
    ['gpt-tiny', GPT_TINY_SPEC],
  ] as const)('withParamDigests of %s equals the chunk digests of the read-back params', async (_, spec) => {
    const model = make(spec, 3);
    const params = await model.readParams();
    const bytes = model.totalElements * 4;
    const [digests, hash] = await withValidation(gpu, () =>
      Promise.all([
        model.withParamDigests(HASH_CHUNK_BYTES, (d) => d.slice()),
        model.withParamDigests(HASH_CHUNK_BYTES, (d) => paramsHasher.digests.root(bytes, d)),
      ]),
    );
    expect(digests.length).toBe(Math.ceil(bytes / HASH_CHUNK_BYTES) * 32);
    expect(Buffer.from(digests).equals(Buffer.from(chunkDigests(params)))).toBe(true);
    expect(hash).toBe(hashParams(params));
    expect(hash).toBe(treeHashReference(params));
    // A hasher without a GPU form reads the parameters back: the same value.
    expect(await hashModelParams(model, { ofParams: hashParams, ofState: trainingStateHash })).toBe(hash);
    // Local mode: the momentum, in the worker's memory, is hashed on the CPU into the same root.
    const momentum = params.map((x) => -x / 4);
    const local = await model.withParamDigests(HASH_CHUNK_BYTES, (d) => stateHashOfDigests(bytes, d, momentum));
    expect(local).toBe(stateHash(params, momentum));
    expect(local).toBe(treeHashReference(params, momentum));
  });

  it('hashes the whole training state (params, moments, t) on the GPU as the read-back and the reference do', async () => {
    const model = make(MLP_SPEC, 5);
    const steps = new ElasticSteps(
      model,
      () => imageBatches(64),
      paramsHasher,
      () => undefined,
    );
    await steps.computeGradients(indicesOf(0), true);
    await steps.applyAndHash(null, BATCH, null);
    const readBack = { ofParams: hashParams, ofState: trainingStateHash };
    const [onGpu, cpu] = await withValidation(gpu, () =>
      Promise.all([hashModelState(model, paramsHasher), hashModelState(model, readBack)]),
    );
    expect(onGpu).toBe(cpu);
    expect(onGpu).toBe(await stateReference(model));
    // A moment or t that differs is another state.
    expect(onGpu).not.toBe(treeHashReference(await model.readParams()));
    model.optimizerStep += 1;
    expect(await hashModelState(model, paramsHasher)).not.toBe(onGpu);
    steps.destroy();
  });

  it('applyAndHash hashes on the GPU what the CPU path (with sketches) hashes, step after step', async () => {
    const gpuPath = make(MLP_SPEC, 7);
    const cpuPath = make(MLP_SPEC, 7);
    const batches = imageBatches(64);
    const a = new ElasticSteps(
      gpuPath,
      () => batches,
      paramsHasher,
      () => undefined,
    );
    const b = new ElasticSteps(
      cpuPath,
      () => batches,
      paramsHasher,
      () => undefined,
    );
    const seen = new Set<string>();
    for (let step = 0; step < 3; step++) {
      const grads = await a.computeGradients(indicesOf(step), false);
      const sums = grads.gradients!;
      const ga = await a.applyAndHash(sums.slice(0), BATCH, null);
      const gb = await b.applyAndHash(sums.slice(0), BATCH, null, {
        sketch: { own: sums.slice(0), sent: sums.slice(0), received: sums.slice(0), world: 1 },
      });
      expect(gb.sketch, 'the CPU path ran').toBeDefined();
      expect(ga.hash, `step ${step}`).toBe(gb.hash);
      expect(ga.hash).toBe(await stateReference(gpuPath));
      seen.add(ga.hash);
    }
    expect(seen.size).toBe(3);
    a.destroy();
    b.destroy();
  });

  it('creates no GPU buffer per step once the first hash has made its digests and staging buffers', async () => {
    const model = make(MLP_SPEC, 11);
    const steps = new ElasticSteps(
      model,
      () => imageBatches(64),
      paramsHasher,
      () => undefined,
    );
    const run = async (step: number) => {
      const g = await steps.computeGradients(indicesOf(step), true);
      expect(g.gradients).toBeNull();
      return steps.applyAndHash(null, BATCH, null);
    };
    await run(0);
    await run(1);
    const device = gpu.device;
    const create = device.createBuffer.bind(device);
    let created = 0;
    device.createBuffer = (desc) => {
      created += 1;
      return create(desc);
    };
    try {
      for (let step = 2; step < 6; step++) await run(step);
    } finally {
      device.createBuffer = create;
    }
    expect(created).toBe(0);
    steps.destroy();
  });
});
