/**
 * The heartbeat's optional `peerRttMs`: validated by the protocol, stored on the worker, shown in
 * `/api/status`; heartbeats without it (older tabs) stay valid and keep the last known value.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_STATUS_PAGE } from '../../../../core/protocol/views';
import { statusResponse } from '../../../../coordinator/machine/status-view';
import { PROTOCOL_VERSION } from '../../../../core/protocol/control-fields';
import { clientMessageSchema } from '../../../../core/protocol/tab-messages';
import { parseClientMessage } from '../../../../core/protocol/control-parse';
import { LatestSample, linkStats, selectedPairRttMs } from '../../../../web/net/link-rtt';
import { memoryLinkPair } from '../../../../web/net/memory-link';
import { Harness } from '../../coordinator/machine/coordinator-harness';
import { workerOf } from '../../../../coordinator/machine/worker-table';

const JOB = {
  model: 'tiny-mlp',
  globalBatch: 8,
  epochs: 1,
  minWorkers: 2,
  maxWorkers: 4,
  lastCallMs: 500,
  heartbeatMs: 1000,
} as const;

function heartbeat(extra: Record<string, unknown>): Record<string, unknown> {
  return { v: PROTOCOL_VERSION, type: 'heartbeat', runId: 'run-1', workerId: 'w-1', ...extra };
}

describe('heartbeat peerRttMs', () => {
  it('accepts heartbeats without it, with null, and with a finite 0..60000 ms value', () => {
    for (const extra of [{}, { peerRttMs: null }, { peerRttMs: 0 }, { peerRttMs: 3.25 }, { peerRttMs: 60_000 }]) {
      expect(clientMessageSchema.safeParse(heartbeat(extra)).success, JSON.stringify(extra)).toBe(true);
    }
  });

  it('rejects NaN, infinities, negative and huge values, and strings', () => {
    for (const bad of [
      Number.NaN,
      Number.POSITIVE_INFINITY,
      Number.NEGATIVE_INFINITY,
      -1,
      -0.001,
      60_000.5,
      1e9,
      '12',
    ]) {
      expect(clientMessageSchema.safeParse(heartbeat({ peerRttMs: bad })).success, String(bad)).toBe(false);
    }
    // On the wire (JSON text) too.
    const wire = parseClientMessage(JSON.stringify(heartbeat({ peerRttMs: -5 })));
    expect(wire.ok).toBe(false);
    if (!wire.ok) expect(wire.code).toBe('bad_message');
  });

  it('stores the reported value on the worker and shows it in statusView; an older heartbeat keeps it', () => {
    const h = new Harness(JOB, 100);
    h.join('a');
    h.join('b');
    h.advance(500);
    expect(h.members()).toEqual(['a', 'b']);
    const rttOf = (name: string) =>
      statusResponse(h.state, h.now, DEFAULT_STATUS_PAGE).world.items.find((w) => w.id === h.worker(name).workerId)
        ?.peerRttMs;
    expect(rttOf('a')).toBeNull();
    expect(rttOf('b')).toBeNull();

    h.send('a', { type: 'heartbeat', runId: h.runId, workerId: h.worker('a').workerId!, peerRttMs: 12.5 });
    expect(workerOf(h.state.workers, h.worker('a').workerId!)!.peerRttMs).toBe(12.5);
    expect(rttOf('a')).toBe(12.5);
    expect(rttOf('b')).toBeNull();

    // A heartbeat without the field (older tab) leaves it; an explicit null clears it.
    h.send('a', { type: 'heartbeat', runId: h.runId, workerId: h.worker('a').workerId! });
    expect(rttOf('a')).toBe(12.5);
    h.send('a', { type: 'heartbeat', runId: h.runId, workerId: h.worker('a').workerId!, peerRttMs: null });
    expect(rttOf('a')).toBeNull();
  });
});

describe('tab-side RTT reading', () => {
  it('takes the transport-selected candidate pair, else a nominated succeeded pair, in ms', () => {
    const pairs: [string, Record<string, unknown>][] = [
      ['CPa', { type: 'candidate-pair', state: 'succeeded', nominated: true, currentRoundTripTime: 0.5 }],
      ['CPb', { type: 'candidate-pair', state: 'succeeded', nominated: true, currentRoundTripTime: 0.0042 }],
      ['CPc', { type: 'candidate-pair', state: 'failed', nominated: false, currentRoundTripTime: 0.001 }],
    ];
    expect(selectedPairRttMs(new Map([...pairs, ['T', { type: 'transport', selectedCandidatePairId: 'CPb' }]]))).toBe(
      4.2,
    );
    expect(selectedPairRttMs(new Map(pairs))).toBe(500);
    // No pair yet, a failed pair only, or a pair without an RTT: unknown.
    expect(selectedPairRttMs(new Map())).toBeNull();
    expect(selectedPairRttMs(new Map([pairs[2]!]))).toBeNull();
    expect(
      selectedPairRttMs(new Map([['CP', { type: 'candidate-pair', state: 'succeeded', nominated: true }]])),
    ).toBeNull();
    // Clamped to what the protocol accepts.
    expect(
      selectedPairRttMs(
        new Map([['CP', { type: 'candidate-pair', state: 'succeeded', nominated: true, currentRoundTripTime: 99 }]]),
      ),
    ).toBe(60_000);
  });

  it('reads nothing from non-WebRTC links', async () => {
    const [a, b] = memoryLinkPair('a', 'b');
    expect(
      await linkStats([
        { peer: 'b', link: a },
        { peer: 'a', link: b },
      ]),
    ).toEqual({ peerRttMs: null, peerLinks: [] });
    expect(await linkStats([])).toEqual({ peerRttMs: null, peerLinks: [] });
  });

  it('the sampler measures at most once per take and never twice at once', async () => {
    const resolvers: ((v: number | null) => void)[] = [];
    const sampler = new LatestSample<number>(() => new Promise((resolve) => resolvers.push(resolve)));
    expect(sampler.take()).toBeNull();
    expect(sampler.take()).toBeNull();
    expect(resolvers.length).toBe(1);
    resolvers[0]!(7);
    await Promise.resolve();
    await Promise.resolve();
    expect(sampler.take()).toBe(7);
    expect(resolvers.length).toBe(2);
    resolvers[1]!(null);
    await Promise.resolve();
    await Promise.resolve();
    expect(sampler.take()).toBeNull();
  });
});
