/**
 * Reconnect secrets. `welcome` carries `secret = HMAC-SHA256(key, runId ":" workerId)` (base64url); a
 * hello that asks for an existing worker id must bring it back, otherwise it is welcomed as a new worker.
 * So a worker id read from `/api/status` cannot be used to take over that worker, and the secret
 * survives a coordinator restart without storing one per worker: the key lives in the data dir
 * (`worker-secret.key`, mode 0600), created once.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClientMessage } from '../../core/protocol/tab-messages';
import { sameSecret } from '../http/http-util';
import { writeFileAtomic } from './store';

export class WorkerSecrets {
  constructor(private readonly key: Buffer) {
    if (key.length < 32) throw new Error('worker secret key: at least 32 bytes');
  }

  /** The key of `dataDir`, created on first use. */
  static forDataDir(dataDir: string): WorkerSecrets {
    const path = join(dataDir, 'worker-secret.key');
    if (!existsSync(path)) writeFileAtomic(path, randomBytes(32), 0o600);
    return new WorkerSecrets(readFileSync(path));
  }

  issue(runId: string, workerId: string): string {
    return createHmac('sha256', this.key).update(`${runId}:${workerId}`).digest('base64url');
  }

  verify(runId: string, workerId: string, secret: string | undefined): boolean {
    return sameSecret(secret ?? null, this.issue(runId, workerId));
  }

  /**
   * A hello that names a worker id without its secret loses the id (welcomed as new, its state claims
   * then prove nothing either). Every other message passes unchanged.
   */
  vet(msg: ClientMessage): ClientMessage {
    if (msg.type !== 'hello' || msg.workerId === null || msg.runId === null) return msg;
    if (this.verify(msg.runId, msg.workerId, msg.secret)) return msg;
    return { ...msg, workerId: null };
  }
}
