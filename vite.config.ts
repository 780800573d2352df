import { defineConfig } from 'vite';
import { resolve } from 'node:path';

/**
 * Two pages: the volunteer page (`/`) and the coordinator admin page (`/admin/`).
 * The training Web Worker is an ES module worker (Comlink). `npm start` builds into dist/, which the
 * coordinator serves; `npm run dev` serves the same pages with HMR.
 */
export default defineConfig({
  root: '.',
  publicDir: false,
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    rollupOptions: {
      input: {
        volunteer: resolve(import.meta.dirname, 'index.html'),
        admin: resolve(import.meta.dirname, 'web/admin/index.html'),
      },
    },
  },
  worker: { format: 'es' },
  server: { host: '127.0.0.1' },
});
