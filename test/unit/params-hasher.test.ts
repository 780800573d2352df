import { describe, expect, it } from 'vitest';
import { paramsHasher } from '../../coordinator/core/hash';
import { cpuBackedAdapter, paramsHasherFor, readBackParamsHasher } from '../../web/worker/params-hasher';
import { treeHashReference } from '../support/tree-hash-reference';

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
});
