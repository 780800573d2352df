/** Reconnect secrets: an id comes back only with the secret its welcome carried. */
import { describe, expect, it } from 'vitest';
import type { HelloMessage } from '../../../../core/protocol/tab-messages';
import { WorkerSecrets } from '../../../../coordinator/runtime/worker-secrets';

const hello = (fields: Partial<HelloMessage>): HelloMessage => ({
  v: 1,
  type: 'hello',
  runId: 'run-1',
  workerId: 'w1-abc',
  peerId: 'p',
  adapter: { vendor: '', architecture: '', description: '' },
  haveStep: 3,
  haveHash: 'ab'.repeat(32),
  ...fields,
});

describe('WorkerSecrets', () => {
  const secrets = new WorkerSecrets(Buffer.alloc(32, 7));

  it('keeps the id of a hello with the right secret', () => {
    const msg = hello({ secret: secrets.issue('run-1', 'w1-abc') });
    expect(secrets.vet(msg)).toBe(msg);
  });

  it.each([
    ['no secret', {}],
    ['another worker’s secret', { secret: secrets.issue('run-1', 'w2-def') }],
    ['another run’s secret', { secret: secrets.issue('run-0', 'w1-abc') }],
    ['a truncated secret', { secret: secrets.issue('run-1', 'w1-abc').slice(0, 20) }],
  ])('drops the id of a hello with %s (a new worker, its claims kept but unvouched)', (_, fields) => {
    expect(secrets.vet(hello(fields))).toMatchObject({ workerId: null, haveStep: 3 });
  });

  it('is a different secret under another key (a new data dir)', () => {
    expect(new WorkerSecrets(Buffer.alloc(32, 8)).issue('run-1', 'w1-abc')).not.toBe(secrets.issue('run-1', 'w1-abc'));
    expect(() => new WorkerSecrets(Buffer.alloc(16))).toThrow(/32 bytes/);
  });
});
