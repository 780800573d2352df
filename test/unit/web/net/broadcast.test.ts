import { describe, expect, it } from 'vitest';
import { hashBytes } from '../../../../core/state/hash';
import { broadcast, broadcastReceive, broadcastSend } from '../../../../web/net/broadcast';
import { CollectiveError } from '../../../../web/net/collective-error';
import { FRAME_HEADER_BYTES, FrameKind } from '../../../../web/net/framing';
import type { Link } from '../../../../web/net/link';
import { memoryLinkPair, type MemoryLink } from '../../../../web/net/memory-link';
import { mulberry32 } from '../../../support/rng';

function randomBytes(seed: number, n: number): ArrayBuffer {
  const rand = mulberry32(seed);
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(rand() * 256);
  return out.buffer;
}

/** Root's links to `count` receivers and each receiver's link to the root. */
function star(
  count: number,
  opts: Parameters<typeof memoryLinkPair>[2] = {},
): { toReceivers: MemoryLink[]; toRoot: MemoryLink[] } {
  const toReceivers: MemoryLink[] = [];
  const toRoot: MemoryLink[] = [];
  for (let i = 0; i < count; i++) {
    const [rootEnd, receiverEnd] = memoryLinkPair('root', `joiner${i}`, opts);
    toReceivers.push(rootEnd);
    toRoot.push(receiverEnd);
  }
  return { toReceivers, toRoot };
}

/** A link that flips one byte of the n-th broadcast chunk it sends: corruption a hash must catch. */
function corrupting(link: MemoryLink, chunkToCorrupt: number): Link {
  let chunks = 0;
  return new Proxy(link, {
    get(target, prop) {
      if (prop === 'send') {
        return (message: ArrayBuffer) => {
          const bytes = new Uint8Array(message);
          if (bytes[3] === FrameKind.BroadcastChunk && chunks++ === chunkToCorrupt)
            bytes[FRAME_HEADER_BYTES + 5] ^= 0x40;
          target.send(message);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * A link that holds what is sent through it and passes it on in reverse order a moment later (the
 * Begin frame last), or with `duplicate` the n-th chunk twice: what a striped link may do, and worse.
 */
function reordering(link: MemoryLink, opts: { duplicate?: number } = {}): Link {
  let held: ArrayBuffer[] = [];
  let chunks = 0;
  const flush = () => {
    for (const m of held.reverse()) link.send(m);
    held = [];
  };
  return new Proxy(link, {
    get(target, prop) {
      if (prop === 'send') {
        return (message: ArrayBuffer) => {
          if (held.length === 0) setTimeout(flush, 5);
          held.push(message);
          if (new Uint8Array(message)[3] === FrameKind.BroadcastChunk && chunks++ === opts.duplicate)
            held.push(message);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** Byte equality without vitest's deep-equal (which is slow on megabytes), reporting the first difference. */
function expectSameBytes(got: ArrayBuffer, want: ArrayBuffer): void {
  const a = new Uint8Array(got);
  const b = new Uint8Array(want);
  expect(a.length).toBe(b.length);
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) expect.fail(`byte ${i}: got ${a[i]}, want ${b[i]}`);
}

const hash = (bytes: Uint8Array) => hashBytes(bytes);
const id = { round: 3, step: 40, seq: 1 };

describe('broadcast over in-memory links', () => {
  it('delivers 1 MB to three receivers byte for byte, with the hash verified and progress reported', async () => {
    const state = randomBytes(1, 1_000_004);
    const { toReceivers, toRoot } = star(3, { latencyMs: 0.5 });
    const rootProgress: number[] = [];
    const receiverProgress: number[] = [];
    const [, ...received] = await Promise.all([
      broadcastSend(toReceivers, state, {
        id,
        timeoutMs: 10_000,
        hash,
        onProgress: (done, total) => rootProgress.push(done / total),
      }),
      ...toRoot.map((link, i) =>
        broadcastReceive(link, {
          id,
          timeoutMs: 10_000,
          hash,
          onProgress: i === 0 ? (done, total) => receiverProgress.push(done / total) : undefined,
        }),
      ),
    ]);
    for (const copy of received) expectSameBytes(copy, state);
    for (const progress of [rootProgress, receiverProgress]) {
      expect(progress.at(-1)).toBe(1);
      expect(progress.every((p, i) => i === 0 || p >= progress[i - 1])).toBe(true);
    }
    for (const link of [...toReceivers, ...toRoot]) expect(link.listenerCounts.bufferedAmountLow).toBe(0);
  });

  it('works through the combined entry point and for an empty state', async () => {
    const { toReceivers, toRoot } = star(1);
    const [sent, got] = await Promise.all([
      broadcast(toReceivers, true, new ArrayBuffer(0), { id, timeoutMs: 5000, hash }),
      broadcast(toRoot, false, null, { id, timeoutMs: 5000, hash }),
    ]);
    expect(sent.byteLength).toBe(0);
    expect(got.byteLength).toBe(0);
  });

  it('delivers to a receiver that starts listening after the root sent everything', async () => {
    const state = randomBytes(2, 200_000);
    const { toReceivers, toRoot } = star(1);
    const sending = broadcastSend(toReceivers, state, { id, timeoutMs: 5000, hash, chunkBytes: 1000 });
    await new Promise((resolve) => setTimeout(resolve, 30));
    const got = await broadcastReceive(toRoot[0], { id, timeoutMs: 5000, hash });
    await sending;
    expectSameBytes(got, state);
  });

  it('paces the root: the channel buffer stays near high water on a slow link', async () => {
    const state = randomBytes(3, 2_000_000);
    const { toReceivers, toRoot } = star(2, { bytesPerMs: 50_000, bufferedAmountLowThreshold: 32 * 1024 });
    await Promise.all([
      broadcastSend(toReceivers, state, { id, timeoutMs: 10_000, hash, highWaterBytes: 128 * 1024 }),
      ...toRoot.map((link) => broadcastReceive(link, { id, timeoutMs: 10_000, hash })),
    ]);
    for (const link of toReceivers) expect(link.peakBufferedAmount).toBeLessThanOrEqual(128 * 1024 + 16_300);
  });

  it('a byte corrupted in transit fails both sides with hash_mismatch', async () => {
    const state = randomBytes(4, 100_000);
    const { toReceivers, toRoot } = star(2);
    const links = [toReceivers[0], corrupting(toReceivers[1], 3)];
    const results = await Promise.allSettled([
      broadcastSend(links, state, { id, timeoutMs: 5000, hash }),
      broadcastReceive(toRoot[0], { id, timeoutMs: 5000, hash }),
      broadcastReceive(toRoot[1], { id, timeoutMs: 5000, hash }),
    ]);
    expect(results[1].status).toBe('fulfilled'); // the clean receiver is fine
    for (const i of [0, 2]) {
      const result = results[i];
      expect(result.status).toBe('rejected');
      const err = (result as PromiseRejectedResult).reason as CollectiveError;
      expect(err).toBeInstanceOf(CollectiveError);
      expect(err.kind).toBe('hash_mismatch');
      expect(err.peer).toBe(i === 0 ? 'joiner1' : 'root');
    }
  });

  it('a receiver told to expect another hash (a stale root) rejects with hash_mismatch', async () => {
    const { toReceivers, toRoot } = star(1);
    const results = await Promise.allSettled([
      broadcastSend(toReceivers, randomBytes(5, 4000), { id, timeoutMs: 5000, hash }),
      broadcastReceive(toRoot[0], { id, timeoutMs: 5000, hash, expectedHash: '0123456789abcdef'.repeat(4) }),
    ]);
    for (const r of results) expect(r).toMatchObject({ status: 'rejected', reason: { kind: 'hash_mismatch' } });
  });

  it('the root vanishing mid-transfer rejects the receiver with peer_closed at once', async () => {
    const state = randomBytes(6, 3_000_000);
    const { toReceivers, toRoot } = star(1, { latencyMs: 0.2, a: { closeAfterSentBytes: 1_000_000 } });
    const t0 = performance.now();
    const results = await Promise.allSettled([
      broadcastSend(toReceivers, state, { id, timeoutMs: 10_000, hash }),
      broadcastReceive(toRoot[0], { id, timeoutMs: 10_000, hash }),
    ]);
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(results[0]).toMatchObject({ status: 'rejected', reason: { kind: 'peer_closed', peer: 'joiner0' } });
    expect(results[1]).toMatchObject({ status: 'rejected', reason: { kind: 'peer_closed', peer: 'root' } });
  });

  it('a receiver that never answers makes the root reject with timeout, naming it', async () => {
    const { toReceivers } = star(2);
    const t0 = performance.now();
    await expect(broadcastSend(toReceivers, randomBytes(7, 1000), { id, timeoutMs: 100, hash })).rejects.toMatchObject({
      kind: 'timeout',
      peer: 'joiner0',
    });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(95);
  });

  it('refuses an announced size above the receiver limit with protocol', async () => {
    const { toReceivers, toRoot } = star(1);
    const results = await Promise.allSettled([
      broadcastSend(toReceivers, randomBytes(8, 4096), { id, timeoutMs: 5000, hash }),
      broadcastReceive(toRoot[0], { id, timeoutMs: 5000, hash, maxBytes: 1024 }),
    ]);
    expect(results[1]).toMatchObject({ status: 'rejected', reason: { kind: 'protocol' } });
    expect(results[0]).toMatchObject({ status: 'rejected', reason: { kind: 'protocol' } }); // via the receiver's abort
  });

  it('delivers byte for byte when the frames arrive in reverse order, Begin last', async () => {
    const { toReceivers, toRoot } = star(1);
    const state = randomBytes(11, 300_000);
    const [, got] = await Promise.all([
      broadcastSend([reordering(toReceivers[0])], state, { id, timeoutMs: 5000, hash, chunkBytes: 4000 }),
      broadcastReceive(toRoot[0], { id, timeoutMs: 5000, hash }),
    ]);
    expectSameBytes(got, state);
  });

  it('refuses a chunk that arrives twice with protocol, on both sides', async () => {
    const { toReceivers, toRoot } = star(1);
    const results = await Promise.allSettled([
      broadcastSend([reordering(toReceivers[0], { duplicate: 3 })], randomBytes(12, 40_000), {
        id,
        timeoutMs: 5000,
        hash,
        chunkBytes: 4000,
      }),
      broadcastReceive(toRoot[0], { id, timeoutMs: 5000, hash }),
    ]);
    expect(results[1]).toMatchObject({ status: 'rejected', reason: { kind: 'protocol' } });
    expect(String((results[1] as PromiseRejectedResult).reason.message)).toMatch(/chunk 3 arrived twice/);
    expect(results[0]).toMatchObject({ status: 'rejected', reason: { kind: 'protocol' } });
  });
});
