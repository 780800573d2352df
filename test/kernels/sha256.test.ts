import { Buffer } from 'node:buffer';
import { randomFillSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { chunkDigests, HASH_CHUNK_BYTES } from '../../core/state/hash';
import { chunkCount, chunkSha256 } from '../../kernels/ops/sha256';
import { createTensor, readBuffer, submitCalls, tensorView, type Gpu } from '../../kernels/runtime';
import { nodeGpu, withValidation } from '../support/node-gpu';
import { mulberry32 } from '../support/rng';
import { chunkDigestsReference } from '../support/tree-hash-reference';

function seededBytes(n: number, seed: number): Uint8Array {
  const rand = mulberry32(seed);
  return Uint8Array.from({ length: n }, () => Math.floor(rand() * 256));
}

/** The kernel's digests of `bytes` (uploaded as u32 words), read back as bytes. */
async function gpuChunks(gpu: Gpu, bytes: Uint8Array, chunkBytes: number): Promise<Buffer> {
  const words = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  const data = createTensor(gpu, [Math.max(1, words.length)], 'data', words.length ? words.slice() : undefined);
  const dims = { byteLength: bytes.length, chunkBytes };
  const chunks = chunkCount(dims);
  const digests = createTensor(gpu, [Math.max(1, chunks * 8)], 'digests', new Uint32Array(Math.max(1, chunks * 8)));
  await withValidation(gpu, () => submitCalls(gpu, [chunkSha256(gpu, { data, digests }, dims).call]));
  const got = Buffer.from(await readBuffer(gpu, digests.buffer, chunks * 32));
  data.buffer.destroy();
  digests.buffer.destroy();
  return got;
}

describe('chunkSha256 (kernels/ops/sha256.wgsl)', () => {
  const C = HASH_CHUNK_BYTES;

  it.each([0, 4, 52, 56, 60, 64, C - 4, C, C + 4, 3 * C + 124, 5 * C])(
    'equals OpenSSL SHA-256 per %i-byte input in 4 KiB chunks, and the core chunkDigests',
    async (n) => {
      const gpu = await nodeGpu();
      const bytes = seededBytes(n, n + 1);
      const got = await gpuChunks(gpu, bytes, C);
      expect(got.length).toBe(Math.ceil(n / C) * 32);
      expect(got.toString('hex')).toBe(chunkDigestsReference(bytes, C).toString('hex'));
      expect(got.equals(Buffer.from(chunkDigests(bytes)))).toBe(true);
    },
  );

  it('pads every short-chunk length around the one- and two-block boundary (64-byte chunks)', async () => {
    const gpu = await nodeGpu();
    // Chunks of 128 bytes: a last chunk of 4..124 bytes covers one-block (≤ 55) and two-block (≥ 56) padding.
    for (let n = 128; n <= 256; n += 4) {
      const bytes = seededBytes(n, n);
      expect((await gpuChunks(gpu, bytes, 128)).toString('hex'), `n=${n}`).toBe(
        chunkDigestsReference(bytes, 128).toString('hex'),
      );
    }
  });

  it('hashes a random 3.2 MB buffer (gpt-tiny) like OpenSSL, from a view at an offset', async () => {
    const gpu = await nodeGpu();
    const n = 800 * C + 36;
    const bytes = randomFillSync(new Uint8Array(n));
    // The parameters are a view into a flat buffer at a 256-byte aligned offset; fill before and after.
    const words = n / 4;
    const whole = new Uint32Array(64 + words + 64).fill(0xdeadbeef);
    whole.set(new Uint32Array(bytes.buffer), 64);
    const base = createTensor(gpu, [whole.length], 'flat', whole);
    const data = tensorView(base, 64, [words], 'params');
    const dims = { byteLength: n, chunkBytes: C };
    const digests = createTensor(gpu, [chunkCount(dims) * 8], 'digests');
    await withValidation(gpu, () => submitCalls(gpu, [chunkSha256(gpu, { data, digests }, dims).call]));
    const got = Buffer.from(await readBuffer(gpu, digests.buffer, chunkCount(dims) * 32));
    expect(chunkCount(dims)).toBe(801);
    expect(got.equals(chunkDigestsReference(bytes, C))).toBe(true);
    base.buffer.destroy();
    digests.buffer.destroy();
  });

  it('update() rehashes after the data changes, and bad dims are refused before anything runs', async () => {
    const gpu = await nodeGpu();
    const bytes = seededBytes(2 * C, 5);
    const data = createTensor(gpu, [(2 * C) / 4], 'data', new Uint32Array(bytes.buffer));
    const digests = createTensor(gpu, [16], 'digests');
    const kernel = chunkSha256(gpu, { data, digests }, { byteLength: 2 * C, chunkBytes: C });
    await withValidation(gpu, async () => {
      submitCalls(gpu, [kernel.call]);
      expect(Buffer.from(await readBuffer(gpu, digests.buffer, 64)).equals(chunkDigestsReference(bytes, C))).toBe(true);
      // One flipped bit in the second chunk changes only the second digest.
      bytes[C + 7] ^= 0x10;
      gpu.device.queue.writeBuffer(data.buffer, 0, bytes.buffer as ArrayBuffer);
      submitCalls(gpu, [kernel.call]);
      const again = Buffer.from(await readBuffer(gpu, digests.buffer, 64));
      expect(again.equals(chunkDigestsReference(bytes, C))).toBe(true);
      kernel.update({ byteLength: C, chunkBytes: C });
      submitCalls(gpu, [kernel.call]);
      expect(
        Buffer.from(await readBuffer(gpu, digests.buffer, 32)).equals(chunkDigestsReference(bytes.subarray(0, C), C)),
      ).toBe(true);
    });
    expect(() => kernel.update({ byteLength: 6, chunkBytes: C })).toThrow(/not a non-negative multiple of 4/);
    expect(() => kernel.update({ byteLength: 8, chunkBytes: 100 })).toThrow(/not a positive multiple of 64/);
    expect(() => kernel.update({ byteLength: 2 * C + 4, chunkBytes: C })).toThrow(/exceeds data/);
    expect(() => kernel.update({ byteLength: 2 * C, chunkBytes: 64 })).toThrow(/128 digests need 1024 words/);
  });
});
