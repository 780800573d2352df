/**
 * Setup for the `kernels` project: every test skips where Node has no WebGPU adapter (no SwiftShader,
 * no GPU), except under CI, where it runs and fails with nodeGpu()'s message.
 */
import { beforeEach } from 'vitest';
import { skipWithoutNodeGpu } from './node-gpu';

beforeEach(async (ctx) => {
  if (await skipWithoutNodeGpu()) ctx.skip();
});
