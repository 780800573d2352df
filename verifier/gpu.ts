/**
 * The verifier's WebGPU device: Dawn through the `webgpu` package, the same WGSL kernels the tabs run.
 *
 * On a machine without a GPU, Vulkan finds an adapter only when pointed at a software driver: Debian's
 * chromium ships SwiftShader's ICD (node/gpu-env.ts). The coordinator spawns this process with
 * that environment; run by hand, `VK_ICD_FILENAMES` is still set here before Dawn's instance is created
 * (the Vulkan loader reads it then), but `LD_LIBRARY_PATH` only counts from the process's start, so the
 * error says what to set. Elsewhere (a host with a GPU) Vulkan finds its own driver. No adapter is one
 * clear error, never a device that computes nothing.
 */
import { create, globals } from 'webgpu';
import { SWIFTSHADER_ICD, swiftshaderEnv } from '../node/gpu-env';
import { createGpu, kernelDeviceDescriptor, type Gpu } from '../kernels/runtime';

export class NoAdapterError extends Error {
  override name = 'NoAdapterError';
}

/** Held for the life of the process: if Dawn's instance is garbage-collected it tears the device down. */
const pinned: GPU[] = [];

export interface VerifierGpu {
  gpu: Gpu;
  /** The adapter as one line (vendor, architecture, description), for the coordinator's log. */
  adapter: string;
}

/**
 * A device with the adapter's full storage limits (a model's flat buffers can be large). `onFailure` is
 * called when the device is lost or reports an error nothing captured (a validation error leaves
 * buffers unwritten: every answer after it could be wrong, so the process must stop rather than serve).
 */
export async function openGpu(onFailure: (why: string) => void): Promise<VerifierGpu> {
  Object.assign(process.env, swiftshaderEnv(process.env));
  Object.assign(globalThis, globals);
  const instance = create([]);
  pinned.push(instance);
  const adapter = await instance.requestAdapter();
  if (!adapter) {
    const env = `VK_ICD_FILENAMES=${process.env.VK_ICD_FILENAMES ?? ''} LD_LIBRARY_PATH=${process.env.LD_LIBRARY_PATH ?? ''}`;
    throw new NoAdapterError(
      `the verifier found no WebGPU adapter (${env}): install a GPU driver, or Debian's chromium for ` +
        `SwiftShader (${SWIFTSHADER_ICD}, with /usr/lib/chromium on LD_LIBRARY_PATH from the process's start), ` +
        'or turn verification off',
    );
  }
  const device = await adapter.requestDevice(kernelDeviceDescriptor(adapter, 'tabswarm.verifier'));
  device.lost.then((info) => onFailure(`WebGPU device lost (${info.reason}): ${info.message}`));
  device.addEventListener('uncapturederror', (e) =>
    onFailure(`WebGPU error: ${(e as GPUUncapturedErrorEvent).error.message}`),
  );
  const info = adapter.info;
  const name = [info.vendor, info.architecture, info.description].filter(Boolean).join(' / ') || 'unknown adapter';
  return { gpu: createGpu(device), adapter: name };
}
