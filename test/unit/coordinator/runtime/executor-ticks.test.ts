/**
 * The executor's tick timers (coordinator/runtime/executor.ts): it remembers when the first heartbeat
 * times out instead of scanning every worker per event, and must still drop a silent worker on time
 * while the others, who keep talking, stay.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HEARTBEAT_TIMEOUT_FACTOR, initialState } from '../../../../coordinator/machine/machine';
import { MachineExecutor } from '../../../../coordinator/runtime/executor';
import { PROTOCOL_VERSION } from '../../../../core/protocol/control-fields';
import type { ClientMessage } from '../../../../core/protocol/tab-messages';
import { parseJobSpec } from '../../../../core/training/job';
import { NO_EXECUTOR_METRICS } from '../../../kit/executor-metrics';

const HEARTBEAT_MS = 1000;

describe('the executor ticks at heartbeat deadlines', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 1_000_000 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('drops a silent worker at its heartbeat deadline while the workers that keep talking stay', () => {
    const job = parseJobSpec({
      model: 'tiny-mlp',
      globalBatch: 8,
      minWorkers: 10,
      maxWorkers: 10,
      heartbeatMs: HEARTBEAT_MS,
    });
    const closed = new Map<string, number>();
    const ids = new Map<string, string>();
    const executor = new MachineExecutor(initialState(job, 64, 'run-1'), {
      store: { apply: () => {}, pruneEvents: () => 0 },
      runId: 'run-1',
      metrics: NO_EXECUTOR_METRICS,
      sockets: {
        send: (conn, text) => {
          const msg = JSON.parse(text) as { type: string; workerId?: string };
          if (msg.type === 'welcome') ids.set(conn, msg.workerId!);
          return true;
        },
        close: (conn) => {
          if (!closed.has(conn)) closed.set(conn, Date.now());
          executor.dispatch({ kind: 'disconnected', conn });
        },
      },
      onFatal: (error) => {
        throw error;
      },
    });
    executor.start();
    const send = (conn: string, body: Record<string, unknown>) =>
      executor.dispatch({ kind: 'message', conn, msg: { v: PROTOCOL_VERSION, ...body } as ClientMessage });
    const start = Date.now();
    const conns = ['talker-1', 'silent', 'talker-2'];
    for (const [i, conn] of conns.entries()) {
      vi.advanceTimersByTime(i * 100);
      executor.dispatch({ kind: 'connected', conn, nonce: `nonce${i}`, addr: '127.0.0.1' });
      send(conn, {
        type: 'hello',
        runId: null,
        workerId: null,
        peerId: `peer-${conn}`,
        adapter: { vendor: 'sim', architecture: '', description: '' },
        haveStep: null,
        haveHash: null,
      });
    }
    const silentJoinedAt = start + 100;
    for (let t = 0; t < 10_000; t += 250) {
      vi.advanceTimersByTime(250);
      for (const conn of ['talker-1', 'talker-2'])
        send(conn, { type: 'heartbeat', runId: 'run-1', workerId: ids.get(conn) });
    }
    executor.stop();
    const limit = HEARTBEAT_TIMEOUT_FACTOR * HEARTBEAT_MS;
    expect([...closed.keys()]).toEqual(['silent']);
    expect(closed.get('silent')! - silentJoinedAt).toBeGreaterThan(limit);
    // At its deadline, not at the next periodic tick: the other workers' messages keep rescheduling it.
    expect(closed.get('silent')! - silentJoinedAt).toBeLessThanOrEqual(limit + 5);
  });
});
