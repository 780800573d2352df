import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashParams, paramsHasher } from '../../core/state/hash';
import { MLP_SPEC, parameterLayout, type SequentialSpec } from '../../core/training/model-spec';
import { decodeSnapshot, encodeSnapshot } from '../../core/state/snapshot';
import { createModel, type Model, type ModelOptions } from '../../kernels/model/model';
import type { Gpu } from '../../kernels/runtime';
import { createTrainingState, type ExportedState } from '../../kernels/model/training-state';
import { nodeGpu, withValidation, skipWithoutNodeGpu } from '../support/node-gpu';
import { mulberry32, randomArray } from '../support/rng';

const SPEC: SequentialSpec = {
  name: 'state-test',
  input: [12, 12, 1],
  classes: 10,
  layers: [
    { type: 'conv2d', filters: 3, kernel: 3, padding: 'same', activation: 'relu' },
    { type: 'maxpool2' },
    { type: 'dense', units: 24, activation: 'relu' },
    { type: 'dense', units: 10, activation: 'none' },
  ],
};
const ADAMW = { kind: 'adamw', lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 } as const;
const BATCH = 16;

function batchOf(spec: SequentialSpec, seed: number): { x: Float32Array; labels: Uint32Array } {
  const rand = mulberry32(seed);
  const x = randomArray(rand, BATCH * spec.input[0] * spec.input[1] * spec.input[2], 0, 1);
  return { x, labels: Uint32Array.from({ length: BATCH }, () => Math.floor(rand() * spec.classes)) };
}

/** Index of the first differing byte of two float arrays, or -1. */
function firstByteDifference(a: Float32Array, b: Float32Array): number {
  const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  if (x.length !== y.length) return Math.min(x.length, y.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
  return -1;
}

function expectSameState(got: ExportedState, want: ExportedState): void {
  expect(got.step).toBe(want.step);
  expect(firstByteDifference(got.params, want.params), 'params').toBe(-1);
  expect(got.moments.length).toBe(want.moments.length);
  got.moments.forEach((m, i) => {
    expect(firstByteDifference(m, want.moments[i]), `moment ${i}`).toBe(-1);
  });
}

// The device is taken in beforeAll, which runs before the per-test skip: skip the suite here.
describe.skipIf(await skipWithoutNodeGpu())('training state', () => {
  let gpu: Gpu;
  const models: Model[] = [];
  const make = (options: Partial<ModelOptions> = {}) => {
    const model = createModel(gpu, SPEC, parameterLayout(SPEC), { maxBatch: BATCH, optimizer: ADAMW, ...options });
    models.push(model);
    return { model, state: createTrainingState(model, paramsHasher) };
  };
  beforeAll(async () => {
    gpu = await nodeGpu();
  });
  afterAll(() => {
    for (const m of models) m.destroy();
  });

  it('restores the backup bit-identically: params, moments and step', async () => {
    const { model, state } = make({ seed: 1 });
    const { x, labels } = batchOf(SPEC, 1);
    model.trainStep(x, labels);
    await withValidation(gpu, () => state.saveBackup());
    const saved = await state.exportState();
    const savedHash = await state.hashParams();
    expect(state.backupStep).toBe(1);

    model.trainStep(x, labels);
    model.trainStep(x, labels);
    expect(model.optimizerStep).toBe(3);
    expect(await state.hashParams()).not.toBe(savedHash);

    await withValidation(gpu, () => state.restoreBackup());
    expect(model.optimizerStep).toBe(1);
    expect(await state.hashParams()).toBe(savedHash);
    expectSameState(await state.exportState(), saved);

    // Training on from the restored state repeats the lost step exactly (same bits).
    const again = make({ seed: 1 });
    again.model.trainStep(x, labels);
    again.model.trainStep(x, labels);
    model.trainStep(x, labels);
    expect(await state.hashParams()).toBe(await again.state.hashParams());
  });

  it('hashes the params on the GPU to the CPU hash of the read-back bytes, before and after steps', async () => {
    const { model, state } = make({ seed: 5 });
    // 3,000-odd floats: three 4 KiB chunks, the last one short.
    expect((model.totalElements * 4) % 4096).not.toBe(0);
    expect(await state.hashParams()).toBe(hashParams(await model.readParams()));
    const { x, labels } = batchOf(SPEC, 5);
    model.trainStep(x, labels);
    model.trainStep(x, labels);
    expect(await state.hashParams()).toBe(hashParams(await model.readParams()));
  });

  it('exports with one read-back and imports into another model, which then trains identically', async () => {
    const a = make({ seed: 2 });
    const b = make({ seed: 3 });
    const { x, labels } = batchOf(SPEC, 2);
    a.model.trainStep(x, labels);
    a.model.trainStep(x, labels);
    const exported = await a.state.exportState();
    expect(exported.step).toBe(2);
    expect(exported.params.length).toBe(parameterLayout(SPEC).totalElements);
    expect(exported.moments.length).toBe(2);
    expect(exported.moments[1].some((v) => v > 0)).toBe(true); // v is non-zero after two steps

    expect(await b.state.hashParams()).not.toBe(await a.state.hashParams());
    b.state.importState(exported);
    expectSameState(await b.state.exportState(), exported);
    a.model.trainStep(x, labels);
    b.model.trainStep(x, labels);
    expect(b.model.optimizerStep).toBe(3);
    expectSameState(await b.state.exportState(), await a.state.exportState());
  });

  it('round-trips through a snapshot ArrayBuffer', async () => {
    const a = make({ seed: 4 });
    const { x, labels } = batchOf(SPEC, 4);
    a.model.trainStep(x, labels);
    const exported = await a.state.exportState();
    const buffer = encodeSnapshot({
      spec: SPEC,
      step: 1,
      epoch: 0,
      cursor: BATCH,
      optimizer: { kind: 'adamw', t: exported.step },
      params: exported.params,
      moments: exported.moments,
    });
    const decoded = decodeSnapshot(buffer);
    expect(decoded.paramsHash).toBe(await a.state.hashParams());
    const b = make({ seed: 9 });
    b.state.importState({ params: decoded.params, moments: decoded.moments, step: decoded.optimizer.t });
    expectSameState(await b.state.exportState(), exported);
  });

  it('rejects states that do not fit the model', async () => {
    const { state } = make({ seed: 1 });
    const good = await state.exportState();
    expect(() => state.importState({ ...good, params: good.params.subarray(1) })).toThrow(/params has/);
    expect(() => state.importState({ ...good, moments: [good.moments[0]] })).toThrow(/1 moment buffers/);
    expect(() => state.restoreBackup()).toThrow(/no backup/);
  });

  it('exports an SGD state with its velocity', async () => {
    const { model, state } = make({ seed: 1, optimizer: { kind: 'sgd', lr: 0.1, momentum: 0.9 } });
    const { x, labels } = batchOf(SPEC, 5);
    model.trainStep(x, labels);
    const exported = await state.exportState();
    expect(model.momentNames).toEqual(['velocity']);
    expect(exported.moments.length).toBe(1);
    // After one step from zero velocity, velocity = mean gradient = (params0 − params1)/lr.
    expect(exported.moments[0].some((v) => v !== 0)).toBe(true);
  });

  it('keeps a backup of the full mlp in a few milliseconds of recording (no read-back)', async () => {
    const model = createModel(gpu, MLP_SPEC, parameterLayout(MLP_SPEC), { maxBatch: 4, optimizer: ADAMW });
    models.push(model);
    const state = createTrainingState(model, paramsHasher);
    state.saveBackup();
    await gpu.device.queue.onSubmittedWorkDone();
    const start = performance.now();
    for (let i = 0; i < 10; i++) state.saveBackup();
    const recordMs = (performance.now() - start) / 10;
    await gpu.device.queue.onSubmittedWorkDone();
    expect(recordMs).toBeLessThan(20);
  });
});
