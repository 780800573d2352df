// The entry of one headless worker's training thread (a Node worker_thread, started by trainer-host.ts):
// register tsx's loader and the `?raw` WGSL hook (node/raw-hooks.js, registered last so it sees those
// imports first), as verifier/entry.js does, then run trainer-thread.ts. Module hooks registered on the
// main thread do not reach a worker thread in Node 20, so each thread registers its own.
import { register } from 'node:module';
import { register as registerTsx } from 'tsx/esm/api';

registerTsx();
register('../node/raw-hooks.js', import.meta.url);
await import('./trainer-thread.ts');
