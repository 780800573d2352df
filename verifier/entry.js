// The verifier process's entry (forked by coordinator/trust/verifier-client.ts): the sources are TypeScript,
// so register tsx's loader, as bin/tabswarm.js does, then the `?raw` imports of the kernels' WGSL
// (node/raw-hooks.js; registered last, so it sees those imports first), and run verifier/main.ts.
import { register } from 'node:module';
import { register as registerTsx } from 'tsx/esm/api';

registerTsx();
register('../node/raw-hooks.js', import.meta.url);
await import('./main.ts');
