import { describe, expect, it } from 'vitest';
import { hashBytes } from '../../../../core/state/hash';
import { broadcast, broadcastReceive, broadcastRelay, broadcastSend } from '../../../../web/net/broadcast';
import { blockChunksFor } from '../../../../web/net/broadcast-frames';
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
      // The receiver finds the block that does not match the root's manifest and names the root; its
      // Abort frame tells the root so, as a ring's Abort tells every rank whom the failure names.
      expect(err.peer).toBe('root');
      expect(err.message).toMatch(i === 0 ? /joiner1 gave up: .*block 3 from root/ : /block 3 from root/);
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

/**
 * A chain root → r1 → r2 → r3 on memory links: r1 and r2 relay (`broadcastRelay`), r3 receives. The
 * links are logged in one timeline so the test can see when each chunk left each rank.
 */
function chain(
  opts: { tamperR1Right?: (message: Uint8Array, index: number) => 'drop' | undefined; closeR2AfterBytes?: number } = {},
) {
  const [root, r1Left] = memoryLinkPair('root', 'r1', { latencyMs: 0.2 });
  const [r1Right, r2Left] = memoryLinkPair('r1', 'r2', { latencyMs: 0.2, a: { tamper: opts.tamperR1Right } });
  const [r2Right, r3Left] = memoryLinkPair('r2', 'r3', {
    latencyMs: 0.2,
    ...(opts.closeR2AfterBytes !== undefined ? { a: { closeAfterSentBytes: opts.closeR2AfterBytes } } : {}),
  });
  const timeline: string[] = [];
  const logged = (link: MemoryLink, name: string): Link =>
    new Proxy(link, {
      get(target, prop) {
        if (prop === 'send')
          return (message: ArrayBuffer) => {
            const bytes = new Uint8Array(message);
            if (bytes[3] === FrameKind.BroadcastChunk)
              timeline.push(`${name} sends ${new DataView(message).getUint32(20, true)}`);
            target.send(message);
          };
        const value = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  return {
    root: logged(root, 'root'),
    r1Left,
    r1Right: logged(r1Right, 'r1'),
    r2Left,
    r2Right: logged(r2Right, 'r2'),
    r3Left,
    timeline,
  };
}

/** Every rank of `chain()`'s broadcast of `state`: the root, the two relays, the last receiver. */
function runChain(c: ReturnType<typeof chain>, state: ArrayBuffer, opts: Parameters<typeof broadcastSend>[2]) {
  return [
    broadcastSend([c.root], state, opts).then(() => state),
    broadcastRelay(c.r1Left, c.r1Right, opts),
    broadcastRelay(c.r2Left, c.r2Right, opts),
    broadcastReceive(c.r3Left, opts),
  ];
}

describe('broadcast relay (a chain of receivers)', () => {
  it('delivers 1 MB along a chain of three byte for byte, each relay passing chunks on before the last one reached it', async () => {
    const state = randomBytes(11, 1_000_004);
    const c = chain();
    const opts = { id, timeoutMs: 10_000, hash };
    const [, ...copies] = await Promise.all(runChain(c, state, opts));
    for (const copy of copies) expectSameBytes(copy, state);
    // Cut-through: r1 sent its first chunk on before the root sent its last, and so did r2 after r1.
    const count = Math.ceil(state.byteLength / (16_300 - FRAME_HEADER_BYTES));
    const at = (event: string) => c.timeline.indexOf(event);
    expect(at('r1 sends 0')).toBeGreaterThan(-1);
    expect(at('r1 sends 0')).toBeLessThan(at(`root sends ${count - 1}`));
    expect(at('r2 sends 0')).toBeLessThan(at(`r1 sends ${count - 1}`));
    // Each link carried the state once.
    for (const who of ['root', 'r1', 'r2'])
      expect(c.timeline.filter((e) => e.startsWith(`${who} `))).toHaveLength(count);
  });

  it('a state too big for one digest per chunk (9 MB: blocks of two chunks) relays byte for byte', async () => {
    const chunk = 16_300 - FRAME_HEADER_BYTES;
    expect(blockChunksFor(100)).toBe(1);
    const state = randomBytes(14, 9_000_000);
    expect(blockChunksFor(Math.ceil(state.byteLength / chunk))).toBe(2);
    const c = chain();
    const opts = { id, timeoutMs: 20_000, hash };
    const [, ...copies] = await Promise.all(runChain(c, state, opts));
    for (const copy of copies) expectSameBytes(copy, state);
  });

  it('a chunk corrupted after the first relay is caught by the next rank, naming that relay; nothing bad goes further', async () => {
    const state = randomBytes(12, 200_000);
    let chunks = 0;
    const c = chain({
      tamperR1Right: (message) => {
        if (message[3] === FrameKind.BroadcastChunk && chunks++ === 2) message[FRAME_HEADER_BYTES + 7] ^= 0x01;
        return undefined;
      },
    });
    const opts = { id, timeoutMs: 5000, hash };
    const results = await Promise.allSettled(runChain(c, state, opts));
    // The root's receiver r1 verified its copy: the root may have finished before r2's Abort reached r1.
    expect(results.slice(1).map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected']);
    const errors = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as CollectiveError] : []));
    // r2 found block 2 from r1 wrong; every failure names r1.
    const r2 = (results[2] as PromiseRejectedResult).reason as CollectiveError;
    expect(r2).toMatchObject({ kind: 'hash_mismatch', peer: 'r1' });
    expect(r2.message).toMatch(/block 2 from r1/);
    for (const err of errors) expect(err.peer).toBe('r1');
    // r2 passed on only the blocks before the corrupted one.
    expect(c.timeline.filter((e) => e.startsWith('r2 ')).every((e) => Number(e.split(' ')[2]) < 2)).toBe(true);
  });

  it('a root that sends a state other than the expected one is named by every rank; nothing behind the first relay completes a copy', async () => {
    const state = randomBytes(15, 300_000);
    const c = chain();
    const send = { id, timeoutMs: 5000, hash };
    // The receivers were told the committed state's hash: the root's bytes (and its own claim) are another.
    const expect_ = { ...send, expectedHash: hash(new Uint8Array(randomBytes(16, 300_000))) };
    const results = await Promise.allSettled([
      broadcastSend([c.root], state, send),
      broadcastRelay(c.r1Left, c.r1Right, expect_),
      broadcastRelay(c.r2Left, c.r2Right, expect_),
      broadcastReceive(c.r3Left, expect_),
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected', 'rejected']);
    const errors = results.map((r) => (r as PromiseRejectedResult).reason as CollectiveError);
    expect(errors[1]).toMatchObject({ kind: 'hash_mismatch', peer: 'root' });
    for (const err of errors.slice(2)) expect(err.peer, err.message).toBe('root');
    // r1 held back the block that would have completed r2's copy: neither r2 nor r3 ever had a whole one.
    const count = Math.ceil(state.byteLength / (16_300 - FRAME_HEADER_BYTES));
    expect(c.timeline.filter((e) => e.startsWith('r1 ')).length).toBeLessThan(count);
    expect(c.timeline.filter((e) => e.startsWith('r2 ')).length).toBeLessThan(count);
    for (const err of errors.slice(2)) expect(err.message).toMatch(/gave up/);
  });

  it('a relay whose right neighbour vanishes fails with peer_closed naming it, and so does the root', async () => {
    const state = randomBytes(13, 2_000_000);
    const c = chain({ closeR2AfterBytes: 300_000 });
    const opts = { id, timeoutMs: 5000, hash };
    const results = await Promise.allSettled(runChain(c, state, opts));
    for (const r of results) expect(r.status).toBe('rejected');
    const errors = results.map((r) => (r as PromiseRejectedResult).reason as CollectiveError);
    expect(errors[2]).toMatchObject({ kind: 'peer_closed', peer: 'r3' });
    expect(errors[3]).toMatchObject({ kind: 'peer_closed', peer: 'r2' });
    expect(errors[0].kind).toBe('peer_closed');
  });
});
