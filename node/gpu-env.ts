/**
 * The environment a Node process needs for WebGPU (the `webgpu` package, Dawn on Vulkan) on a machine
 * without a GPU: Debian's chromium ships SwiftShader's Vulkan ICD and the Vulkan loader beside it.
 * `VK_ICD_FILENAMES` points the loader at the ICD; `LD_LIBRARY_PATH` lets Dawn find `libvulkan.so.1`,
 * and the dynamic linker reads it only when a process starts, so the coordinator sets both for the
 * verifier process it spawns (verifier-client.ts). Where `VK_ICD_FILENAMES` is already set, or the ICD
 * does not exist (a host with its own Vulkan driver), nothing is added.
 */
import { existsSync } from 'node:fs';

/** Where Debian's chromium package installs SwiftShader's Vulkan ICD. */
export const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
const CHROMIUM_LIB_DIR = '/usr/lib/chromium';

/** What to add to `env` so Dawn finds SwiftShader (empty: nothing to add). */
export function swiftshaderEnv(
  env: Record<string, string | undefined>,
  icd = SWIFTSHADER_ICD,
  exists: (path: string) => boolean = existsSync,
): Record<string, string> {
  if (env.VK_ICD_FILENAMES || !exists(icd)) return {};
  return {
    VK_ICD_FILENAMES: icd,
    LD_LIBRARY_PATH: [env.LD_LIBRARY_PATH, CHROMIUM_LIB_DIR].filter(Boolean).join(':'),
  };
}
