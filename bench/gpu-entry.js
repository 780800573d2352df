// The entry of `npm run bench:gpu` in the repository: the sources are TypeScript and the kernels import
// their WGSL as `./x.wgsl?raw` (a Vite feature), so register tsx's loader and the verifier's `?raw`
// hooks (node/raw-hooks.js, as verifier/entry.js does), then run bench/gpu.ts. The portable bundle
// (bench/gpu-bundle.ts) needs neither: esbuild inlines the WGSL.
import { register } from 'node:module';
import { register as registerTsx } from 'tsx/esm/api';

registerTsx();
register('../node/raw-hooks.js', import.meta.url);
await import('./gpu.ts');
