import { describe, expect, it } from 'vitest';
import { createTensor, readTensor, StagingReader, tensorView, writeTensor, alignElements } from '../../kernels/runtime';
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

  it('reads ranges through reused staging buffers, fresh data each time, concurrent reads apart', async () => {
    const gpu = await nodeGpu();
    const big = createTensor(
      gpu,
      [300],
      'big',
      Float32Array.from({ length: 300 }, (_, i) => i),
    );
    const small = createTensor(gpu, [1], 'small', new Float32Array([7]));
    const reader = new StagingReader(gpu, 'test-reader');
    const created: number[] = [];
    const createBuffer = gpu.device.createBuffer.bind(gpu.device);
    gpu.device.createBuffer = (d: GPUBufferDescriptor) => {
      created.push(d.size);
      return createBuffer(d);
    };
    try {
      const floats = async (t: typeof big, offsetElements: number, count: number) =>
        Array.from(new Float32Array(await reader.read(t.buffer, t.offset + offsetElements * 4, count * 4)));
      // Concurrent: each read needs its own buffer while mapped.
      const [all, one] = await Promise.all([floats(big, 0, 300), floats(small, 0, 1)]);
      expect(all).toEqual(Array.from({ length: 300 }, (_, i) => i));
      expect(one).toEqual([7]);
      expect(created).toEqual([1200, 4]);
      // Sequential steps reuse them (best fit), returning only the requested, current bytes.
      for (let step = 1; step <= 3; step++) {
        writeTensor(gpu, big, new Float32Array([step, step]), 64);
        writeTensor(gpu, small, new Float32Array([-step]));
        expect(await floats(big, 64, 3)).toEqual([step, step, 66]);
        expect(await floats(small, 0, 1)).toEqual([-step]);
        expect((await floats(big, 0, 300)).length).toBe(300);
      }
      expect(created).toEqual([1200, 4]);
    } finally {
      gpu.device.createBuffer = createBuffer;
      reader.destroy();
    }
  });

  it('hands the mapped range to `use` without a copy, and reuses its buffer also after `use` throws', async () => {
    const gpu = await nodeGpu();
    const t = createTensor(gpu, [4], 't', new Float32Array([1, 2, 3, 4]));
    const reader = new StagingReader(gpu, 'test-use');
    let created = 0;
    const createBuffer = gpu.device.createBuffer.bind(gpu.device);
    gpu.device.createBuffer = (d: GPUBufferDescriptor) => {
      created++;
      return createBuffer(d);
    };
    try {
      const sum = (mapped: ArrayBuffer) => new Float32Array(mapped).reduce((a, b) => a + b, 0);
      expect(await reader.use(t.buffer, t.offset, 16, sum)).toBe(10);
      await expect(
        reader.use(t.buffer, t.offset, 16, () => {
          throw new Error('hash failed');
        }),
      ).rejects.toThrow('hash failed');
      writeTensor(gpu, t, new Float32Array([5]));
      expect(await reader.use(t.buffer, t.offset, 16, sum)).toBe(14);
      expect(created).toBe(1);
    } finally {
      gpu.device.createBuffer = createBuffer;
      reader.destroy();
    }
  });
});
