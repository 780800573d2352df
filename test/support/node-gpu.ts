/**
 * A WebGPU device in Node through the `webgpu` package (Dawn) on SwiftShader, for fast kernel tests.
 * Dawn finds no adapter on a CPU-only machine unless Vulkan is pointed at Chromium's SwiftShader ICD
 * (docs/chromium.md); vitest.config.ts sets VK_ICD_FILENAMES / LD_LIBRARY_PATH where that ICD exists.
 *
 * Without an adapter the kernel tests skip (`skipWithoutNodeGpu`, used by test/support/kernels-setup.ts
 * for every test and by suites that take the device in `beforeAll`); under `CI` they run and fail with
 * `nodeGpu()`'s message instead.
 */
import { create, globals } from 'webgpu';
import { createGpu, kernelDeviceDescriptor, type Gpu } from '../../kernels/runtime';
import { skipWithout } from './skip';

let cached: Promise<Gpu> | undefined;
/** Kept alive for the process: if Dawn's instance is garbage-collected it tears the device down mid-work. */
// biome-ignore lint/correctness/noUnusedVariables: written, never read: holding the reference is the point
let pinnedInstance: GPU | undefined;

export function nodeGpu(): Promise<Gpu> {
  cached ??= (async () => {
    Object.assign(globalThis, globals);
    const navigatorGpu = create([]);
    pinnedInstance = navigatorGpu;
    const adapter = await navigatorGpu.requestAdapter();
    if (!adapter) {
      throw new Error(
        'no WebGPU adapter in Node: install Debian chromium (SwiftShader) and run through `npm test`, ' +
          'which sets VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json',
      );
    }
    const device = await adapter.requestDevice(kernelDeviceDescriptor(adapter, 'tabswarm.test'));
    device.addEventListener('uncapturederror', (e) => {
      // Validation errors must fail tests loudly rather than produce zeros.
      console.error('WebGPU uncaptured error:', (e as GPUUncapturedErrorEvent).error.message);
    });
    return createGpu(device);
  })();
  return cached;
}

/** Whether Dawn offers an adapter here (probed once per process, never throws). */
let probed: Promise<boolean> | undefined;
export function nodeGpuAvailable(): Promise<boolean> {
  probed ??= nodeGpu().then(
    () => true,
    () => false,
  );
  return probed;
}

/** True when a test needing WebGPU in Node should skip: no adapter, and not under CI. */
export async function skipWithoutNodeGpu(): Promise<boolean> {
  return skipWithout(
    'a WebGPU adapter in Node (Debian chromium ships SwiftShader: apt-get install chromium)',
    await nodeGpuAvailable(),
  );
}

/** Run `fn` inside a validation error scope and throw if WebGPU reported an error. */
export async function withValidation<T>(gpu: Gpu, fn: () => Promise<T> | T): Promise<T> {
  gpu.device.pushErrorScope('validation');
  const result = await fn();
  const error = await gpu.device.popErrorScope();
  if (error) throw new Error(`WebGPU validation error: ${error.message}`);
  return result;
}
