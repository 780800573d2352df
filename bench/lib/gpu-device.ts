/**
 * bench:gpu's device: Dawn through the `webgpu` package on whatever adapter the machine has (the
 * high-performance one), with the optional features the kernels use (kernels/runtime.ts
 * `kernelDeviceDescriptor`). Where Dawn finds no adapter and Debian's chromium ships SwiftShader
 * (node/gpu-env.ts), the bench runs itself again with SwiftShader's environment: the dynamic linker
 * reads `LD_LIBRARY_PATH` only when a process starts, so it cannot be set from inside.
 *
 * The same `navigator.gpu` is given to TF.js (its webgpu backend asks `navigator.gpu` for an adapter),
 * so both sides run on one adapter.
 */
import { spawnSync } from 'node:child_process';
import { create, globals } from 'webgpu';
import { swiftshaderEnv } from '../../node/gpu-env';
import { createGpu, kernelDeviceDescriptor, type Gpu } from '../../kernels/runtime';

export interface AdapterReport {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  isFallback: boolean;
  /** Every feature the adapter offers (the kernels use `subgroups`; `shader-f16` is reported). */
  features: string[];
  /** The adapter's subgroup sizes, where it says (Chrome's and Dawn's `GPUAdapterInfo`). */
  subgroupSizes: [number, number] | null;
  maxComputeInvocationsPerWorkgroup: number;
  maxComputeWorkgroupStorageSize: number;
}

/** Set in the environment of the run that already carries SwiftShader's variables. */
const RERUN_FLAG = 'TABSWARM_BENCH_GPU_RERUN';

/** Held for the process's life: Dawn tears the device down if its instance is collected. */
const pinned: GPU[] = [];

export async function openBenchGpu(): Promise<{ gpu: Gpu; adapter: AdapterReport } | null> {
  Object.assign(globalThis, globals);
  const instance = create([]);
  pinned.push(instance);
  Object.defineProperty(globalThis, 'navigator', {
    value: { gpu: instance, userAgent: `node ${process.version}` },
    configurable: true,
  });
  const adapter = await instance.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) return null;
  const device = await adapter.requestDevice(kernelDeviceDescriptor(adapter, 'bench.gpu'));
  device.addEventListener('uncapturederror', (e) =>
    console.error(`WebGPU error: ${(e as GPUUncapturedErrorEvent).error.message}`),
  );
  const info = adapter.info as GPUAdapterInfo & { subgroupMinSize?: number; subgroupMaxSize?: number };
  return {
    gpu: createGpu(device),
    adapter: {
      vendor: info.vendor,
      architecture: info.architecture,
      device: info.device,
      description: info.description,
      isFallback: (info as { isFallbackAdapter?: boolean }).isFallbackAdapter ?? false,
      features: [...adapter.features].sort(),
      subgroupSizes: info.subgroupMinSize ? [info.subgroupMinSize, info.subgroupMaxSize ?? info.subgroupMinSize] : null,
      maxComputeInvocationsPerWorkgroup: adapter.limits.maxComputeInvocationsPerWorkgroup,
      maxComputeWorkgroupStorageSize: adapter.limits.maxComputeWorkgroupStorageSize,
    },
  };
}

/**
 * No adapter: run this same command again with SwiftShader's environment, once, and return its exit
 * code; null when there is nothing to try (no SwiftShader here, or this is already the second run).
 */
export function rerunOnSwiftShader(): number | null {
  const extra = swiftshaderEnv(process.env);
  if (process.env[RERUN_FLAG] || Object.keys(extra).length === 0) return null;
  process.stderr.write(`no WebGPU adapter; running again on SwiftShader (${extra.VK_ICD_FILENAMES})\n`);
  const child = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    env: { ...process.env, ...extra, [RERUN_FLAG]: '1' },
    stdio: 'inherit',
  });
  return child.status ?? 1;
}
