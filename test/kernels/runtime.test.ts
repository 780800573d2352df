import { describe, expect, it } from 'vitest';
import { createTensor, readTensor, tensorView, writeTensor, alignElements } from '../../kernels/runtime';
import { nodeGpu } from '../support/node-gpu';

describe('kernel runtime', () => {
  it('round-trips a tensor and a view at a 256-byte aligned offset', async () => {
    const gpu = await nodeGpu();
    const flat = createTensor(gpu, [alignElements(5) + 3], 'flat');
    const view = tensorView(flat, alignElements(5), [3], 'view');
    writeTensor(gpu, view, new Float32Array([1.5, -2, 3]));
    expect(Array.from(await readTensor(gpu, view))).toEqual([1.5, -2, 3]);
    const all = await readTensor(gpu, flat);
    expect(all[0]).toBe(0);
    expect(all[64]).toBe(1.5);
  });
});
