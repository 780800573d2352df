import { existsSync } from 'node:fs';
import { defineConfig } from 'vitest/config';

/**
 * One runner for every test (`npm test`). Projects:
 * - unit: pure modules (coordinator core, model specs, dataset parsing) — milliseconds.
 * - kernels: WGSL kernels on WebGPU in Node (Dawn + SwiftShader) against float64 references.
 * - integration: a real coordinator process with simulated WebSocket workers.
 * - browser: real headless Chromium tabs through Playwright against a real coordinator.
 * Kernel and browser tests need SwiftShader's Vulkan ICD, which Debian's chromium ships.
 *
 * Files run one at a time on CI's 2 cores (vitest's default: cores − 1 workers). Two workers were tried
 * on such a machine (2026-11-27): the suite took 2,016 s against 1,816 s one at a time, since the browser
 * and kernel files are CPU-bound (SwiftShader) and slowed each other, and 7 tests failed on the
 * contention (a local-mode tab dropped below the job's minWorkers, the soak's memory bound). So the
 * default stays. `isolate: false` for the unit project took it from 137 s to 89 s here, but one of three
 * runs with shuffled files failed a simulated-tab test (local-steps-loop) that passed alone five times
 * out of five: a leak between files not found yet, so each file keeps its own worker.
 */
const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
// Point Vulkan at SwiftShader only where it exists: elsewhere (a laptop with a GPU) Vulkan finds its own driver.
const swiftshaderEnv: Record<string, string> =
  process.env.VK_ICD_FILENAMES || !existsSync(SWIFTSHADER_ICD)
    ? {}
    : {
        VK_ICD_FILENAMES: SWIFTSHADER_ICD,
        LD_LIBRARY_PATH: [process.env.LD_LIBRARY_PATH, '/usr/lib/chromium'].filter(Boolean).join(':'),
      };
Object.assign(process.env, swiftshaderEnv);

export default defineConfig({
  test: {
    projects: [
      { test: { name: 'unit', include: ['test/unit/**/*.test.ts'], environment: 'node' } },
      {
        test: {
          name: 'kernels',
          include: ['test/kernels/**/*.test.ts'],
          pool: 'forks',
          env: swiftshaderEnv,
          setupFiles: ['test/support/kernels-setup.ts'],
          testTimeout: 120_000,
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          pool: 'forks',
          testTimeout: 120_000,
          hookTimeout: 120_000,
        },
      },
      {
        test: {
          name: 'browser',
          include: ['test/browser/**/*.test.ts'],
          pool: 'forks',
          fileParallelism: false,
          testTimeout: 600_000,
          hookTimeout: 180_000,
        },
      },
    ],
  },
});
