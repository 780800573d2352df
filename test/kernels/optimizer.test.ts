import { describe, expect, it } from 'vitest';
import { adamw, sgdMomentum, type AdamWHyper } from '../../kernels/ops/optimizer';
import { createTensor, readTensor, submitCalls, writeTensor } from '../../kernels/runtime';
import { expectClose } from '../support/compare';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { adamwStepRef, sgdStepRef } from '../support/reference-conv';
import { mulberry32, randomArray } from '../support/rng';

const STEPS = 5;

describe('optimizer kernels', () => {
  it('adamw follows torch.optim.AdamW (float64 reference) for steps 1..5 with weight decay and a gradient scale', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(11);
    const n = 1531;
    // Only a prefix is updated: the tail must keep its values.
    const size = 1500;
    const hyper: AdamWHyper = { lr: 3e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.05 };
    const samples = 7;
    const p0 = randomArray(rand, n, -1, 1);
    const params = createTensor(gpu, [n], 'params', p0);
    const grads = createTensor(gpu, [n], 'grads');
    const m = createTensor(gpu, [n], 'm');
    const v = createTensor(gpu, [n], 'v');
    const ref = { params: Float64Array.from(p0), m: new Float64Array(n), v: new Float64Array(n) };
    const kernel = adamw(gpu, { params, grads, m, v }, { size, gradScale: 1 / samples, t: 1, ...hyper });
    for (let t = 1; t <= STEPS; t++) {
      // Gradient sums over `samples` samples, of varied magnitude (some tiny, as late in training).
      const g = randomArray(rand, n, -3, 3).map((x, i) => (i % 5 === 0 ? x * 1e-4 : x));
      writeTensor(gpu, grads, g);
      kernel.update({ size, gradScale: 1 / samples, t, ...hyper });
      await withValidation(gpu, () => submitCalls(gpu, [kernel.call]));
      const mean = Float64Array.from(g.subarray(0, size), (x) => x / samples);
      const prefix = { params: ref.params.subarray(0, size), m: ref.m.subarray(0, size), v: ref.v.subarray(0, size) };
      adamwStepRef(prefix, mean, hyper, t);
      expectClose(await readTensor(gpu, params), ref.params, {
        atol: 1e-6,
        rtol: 1e-5,
        label: `adamw params at t=${t}`,
      });
      expectClose(await readTensor(gpu, m), ref.m, { atol: 1e-7, rtol: 1e-5, label: `adamw m at t=${t}` });
      expectClose(await readTensor(gpu, v), ref.v, { atol: 1e-9, rtol: 1e-5, label: `adamw v at t=${t}` });
    }
    // The first step moves each parameter by about lr (Adam's normalised step): a check on the
    // reference itself, so a wrong bias correction in both would not pass unnoticed.
    const firstStepRef = { params: Float64Array.from([0.5]), m: new Float64Array(1), v: new Float64Array(1) };
    adamwStepRef(firstStepRef, [0.2], { ...hyper, weightDecay: 0 }, 1);
    expect(firstStepRef.params[0]).toBeCloseTo(0.5 - hyper.lr, 6);
  });

  it('adamw rejects a step number that is not 1-based', async () => {
    const gpu = await nodeGpu();
    const t = {
      params: createTensor(gpu, [4], 'p'),
      grads: createTensor(gpu, [4], 'g'),
      m: createTensor(gpu, [4], 'm'),
      v: createTensor(gpu, [4], 'v'),
    };
    const hyper = { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 };
    expect(() => adamw(gpu, t, { size: 4, gradScale: 1, t: 0, ...hyper })).toThrow(/1-based/);
  });

  it('sgdMomentum follows torch.optim.SGD (momentum, weight decay) for steps 1..5', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(12);
    const n = 777;
    const hyper = { lr: 0.05, momentum: 0.9, weightDecay: 1e-3 };
    const samples = 13;
    const p0 = randomArray(rand, n);
    const params = createTensor(gpu, [n], 'params', p0);
    const grads = createTensor(gpu, [n], 'grads');
    const velocity = createTensor(gpu, [n], 'velocity');
    const ref = { params: Float64Array.from(p0), velocity: null as Float64Array | null };
    const kernel = sgdMomentum(gpu, { params, grads, velocity }, { size: n, gradScale: 1 / samples, ...hyper });
    for (let t = 1; t <= STEPS; t++) {
      const g = randomArray(rand, n, -5, 5);
      writeTensor(gpu, grads, g);
      await withValidation(gpu, () => submitCalls(gpu, [kernel.call]));
      sgdStepRef(
        ref,
        Float64Array.from(g, (x) => x / samples),
        hyper,
      );
      expectClose(await readTensor(gpu, params), ref.params, { atol: 1e-6, rtol: 1e-5, label: `sgd params at t=${t}` });
      expectClose(await readTensor(gpu, velocity), ref.velocity!, {
        atol: 1e-6,
        rtol: 1e-5,
        label: `sgd velocity at t=${t}`,
      });
    }
  });

  it('sgdMomentum with momentum 0 is plain SGD with weight decay', async () => {
    const gpu = await nodeGpu();
    const rand = mulberry32(13);
    const n = 100;
    const hyper = { lr: 0.1, momentum: 0, weightDecay: 0.01 };
    const p0 = randomArray(rand, n);
    const g = randomArray(rand, n);
    const params = createTensor(gpu, [n], 'params', p0);
    const grads = createTensor(gpu, [n], 'grads', g);
    const velocity = createTensor(gpu, [n], 'velocity', randomArray(rand, n)); // stale contents must not matter
    const kernel = sgdMomentum(gpu, { params, grads, velocity }, { size: n, gradScale: 0.5, ...hyper });
    await withValidation(gpu, () => submitCalls(gpu, [kernel.call]));
    const ref = { params: Float64Array.from(p0), velocity: null };
    sgdStepRef(
      ref,
      Float64Array.from(g, (x) => x * 0.5),
      hyper,
    );
    expectClose(await readTensor(gpu, params), ref.params, { atol: 1e-7, rtol: 1e-6, label: 'plain sgd' });
  });
});
