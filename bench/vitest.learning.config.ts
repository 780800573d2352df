import { defineConfig } from 'vitest/config';

/**
 * Runs the learning benches in Node on our kernels: bench/transformer-learning.ts and
 * bench/precision-learning.ts (WebGPU in Node needs SwiftShader's ICD here, as the kernels tests).
 */
const env = {
  VK_ICD_FILENAMES: process.env.VK_ICD_FILENAMES ?? '/usr/lib/chromium/vk_swiftshader_icd.json',
  LD_LIBRARY_PATH: [process.env.LD_LIBRARY_PATH, '/usr/lib/chromium'].filter(Boolean).join(':'),
};
Object.assign(process.env, env);

export default defineConfig({
  test: { include: ['bench/transformer-learning.ts', 'bench/precision-learning.ts'], pool: 'forks', env },
});
