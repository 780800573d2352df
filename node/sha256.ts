/**
 * node:crypto's SHA-256 as a core `Sha256Factory` (core/state/hash.ts). The coordinator verifies
 * uploaded checkpoints with it: the same digests as the core's pure-JS default, about 10× faster
 * (`npm run bench:hash`), so a large upload holds the event loop for milliseconds, not a tenth of a second.
 */
import { createHash } from 'node:crypto';
import type { Sha256Factory } from '../core/state/hash';

export const nodeSha256: Sha256Factory = () => createHash('sha256');
