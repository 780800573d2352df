import { describe, expect, it } from 'vitest';
import { chunkDigests, hashParams, paramsHasher } from '../../../../core/state/hash';
import {
  chooseParamsHasher,
  cpuBackedAdapter,
  paramsHasherFor,
  readBackParamsHasher,
  wasmSha256,
} from '../../../../web/worker/params-hasher';
import { chunkDigestsReference, treeHashReference } from '../../../support/tree-hash-reference';

const real = { isFallback: false };

describe('where the worker hashes the parameters', () => {
  it('hashes on the CPU on software adapters (the GPU is the CPU there)', () => {
    for (const a of [
      // What headless Chromium and Dawn in Node report on this project's CI machine.
      { vendor: 'google', architecture: 'swiftshader', description: 'SwiftShader Device (Subzero)', ...real },
      { vendor: 'mesa', architecture: '', description: 'llvmpipe (LLVM 15.0.6, 256 bits)', ...real },
      { vendor: 'mesa', architecture: '', description: 'lavapipe', ...real },
      { vendor: 'microsoft', architecture: '', description: 'Microsoft Basic Render Driver', ...real },
      { vendor: '', architecture: '', description: '', isFallback: true },
    ]) {
      expect(cpuBackedAdapter(a), JSON.stringify(a)).toBe(true);
      expect(paramsHasherFor(a)).toBe(readBackParamsHasher);
    }
  });

  it('hashes on the GPU on hardware adapters, including ones that report nothing', () => {
    for (const a of [
      { vendor: 'nvidia', architecture: 'ampere', description: 'NVIDIA GeForce RTX 3060', ...real },
      { vendor: 'intel', architecture: 'gen-12lp', description: '', ...real },
      { vendor: 'apple', architecture: 'metal-3', description: '', ...real },
      { vendor: 'amd', architecture: 'rdna-2', description: '', ...real },
      { vendor: '', architecture: '', description: '', ...real },
    ]) {
      expect(cpuBackedAdapter(a), JSON.stringify(a)).toBe(false);
      expect(paramsHasherFor(a)).toBe(paramsHasher);
      expect(paramsHasherFor(a).digests?.chunkBytes).toBe(4096);
    }
  });

  it('both hashers give the tree hash of parameters in memory (the node:crypto reference)', () => {
    const params = Float32Array.from({ length: 5000 }, (_, i) => i / 8 - 300);
    expect(readBackParamsHasher.ofParams(params)).toBe(treeHashReference(params));
    expect(paramsHasher.ofParams(params)).toBe(treeHashReference(params));
    expect(readBackParamsHasher.digests).toBeUndefined();
  });

  it('the WebAssembly SHA-256 gives the same chunk digests and tree hash as node:crypto', async () => {
    const sha256 = await wasmSha256();
    if (!sha256) throw new Error('no WebAssembly in Node: wasmSha256 returned null');
    // Sizes around the 4 KiB chunk and SHA-256's 64-byte block edges, and an mlp-sized buffer.
    for (const floats of [0, 1, 13, 14, 16, 1023, 1024, 1025, 5000, 235_146]) {
      const params = Float32Array.from({ length: floats }, (_, i) => Math.sin(i * 12.9898) * 43758.5453);
      expect(hashParams(params, sha256), `${floats} floats`).toBe(treeHashReference(params));
      const bytes = new Uint8Array(params.buffer);
      expect(Buffer.from(chunkDigests(bytes, sha256)).equals(Buffer.from(chunkDigestsReference(bytes)))).toBe(true);
    }
    const hasher = paramsHasherFor(
      { vendor: 'google', architecture: 'swiftshader', description: '', isFallback: false },
      sha256,
    );
    const params = Float32Array.from({ length: 3000 }, (_, i) => i - 1500);
    expect(hasher.ofParams(params)).toBe(treeHashReference(params));
    expect(hasher.digests).toBeUndefined();
  });

  it('refuses a WebAssembly hasher used after a newer one was made, instead of mixing inputs', async () => {
    const sha256 = await wasmSha256();
    if (!sha256) throw new Error('no WebAssembly');
    const first = sha256();
    first.update(new Uint8Array([1, 2, 3]));
    const second = sha256();
    expect(() => first.update(new Uint8Array([4]))).toThrow(/after a newer one/);
    expect(() => first.digest()).toThrow(/after a newer one/);
    second.update(new Uint8Array([97, 98, 99]));
    expect(Buffer.from(second.digest()).toString('hex')).toBe(
      'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', // SHA-256("abc"), FIPS 180-2
    );
  });

  it("chooses the worker's hasher once per device: WebAssembly on a software adapter, the GPU form on a real one", async () => {
    const soft = await chooseParamsHasher({
      vendor: 'google',
      architecture: 'swiftshader',
      description: '',
      isFallback: false,
    });
    const params = Float32Array.from({ length: 2000 }, (_, i) => (i % 17) - 8);
    expect(soft).not.toBe(readBackParamsHasher); // not the pure-JS one: Node has WebAssembly
    expect(soft.digests).toBeUndefined();
    expect(soft.ofParams(params)).toBe(treeHashReference(params));
    expect(
      await chooseParamsHasher({ vendor: 'nvidia', architecture: 'ampere', description: '', isFallback: false }),
    ).toBe(paramsHasher);
  });
});
