/**
 * StripedLink (web/net/striped-link.ts), one link over several memory link pairs: each message
 * delivered exactly once while stripes overtake each other, sends on the least-loaded stripe, the same
 * allreduce and broadcast bytes as unstriped links, stripes added mid-stream, and closing on any stripe.
 */
import { describe, expect, it } from 'vitest';
import { hashBytes } from '../../../../core/state/hash';
import { broadcast } from '../../../../web/net/broadcast';
import { CollectiveError } from '../../../../web/net/collective-error';
import type { Link, Ring } from '../../../../web/net/link';
import {
  type MemoryLink,
  type MemoryLinkEndOptions,
  memoryLinkPair,
  memoryRing,
} from '../../../../web/net/memory-link';
import { ringAllreduce } from '../../../../web/net/ring-allreduce';
import { MAX_AHEAD_MESSAGES, STRIPE_HEADER_BYTES, StripedLink } from '../../../../web/net/striped-link';
import { mulberry32, randomArray } from '../../../support/rng';

/** Two ends striped over `stripes` memory link pairs, each pair with its own options. */
function stripedPair(
  a: string,
  b: string,
  stripes: Array<{ a?: MemoryLinkEndOptions; b?: MemoryLinkEndOptions }>,
): { ab: StripedLink; ba: StripedLink; raw: Array<[MemoryLink, MemoryLink]> } {
  const raw = stripes.map((o) => memoryLinkPair(a, b, o));
  const ab = new StripedLink(raw[0][0]);
  const ba = new StripedLink(raw[0][1]);
  for (const [x, y] of raw.slice(1)) {
    ab.addStripe(x);
    ba.addStripe(y);
  }
  return { ab, ba, raw };
}

/** A message whose bytes say which it is: its index in every 4-byte word, `words` long. */
function numbered(i: number, words = 64): ArrayBuffer {
  return new Uint32Array(words).fill(i).buffer;
}

function collect(link: Link): { got: number[]; closed: Promise<string> } {
  const got: number[] = [];
  link.onMessage((m) => {
    const words = new Uint32Array(m);
    expect(words.every((w) => w === words[0])).toBe(true);
    got.push(words[0]);
  });
  const closed = new Promise<string>((resolve) => link.onClose((reason) => resolve(reason)));
  return { got, closed };
}

const until = async (check: () => boolean, what: string, ms = 5000) => {
  const end = performance.now() + ms;
  while (!check()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
};

/** A ring of `size` ranks whose every hop is striped over `stripes` memory pairs with these latencies. */
function stripedRing(size: number, latencies: Array<number | (() => number)>): Ring[] {
  const hops = Array.from({ length: size }, (_, r) =>
    stripedPair(
      `rank${r}`,
      `rank${(r + 1) % size}`,
      latencies.map((latencyMs) => ({ a: { latencyMs }, b: { latencyMs } })),
    ),
  );
  return Array.from({ length: size }, (_, r) => ({
    rank: r,
    size,
    left: hops[(r - 1 + size) % size].ba,
    right: hops[r].ab,
  }));
}

describe('StripedLink', () => {
  it('delivers every message exactly once, as it arrives, when stripes overtake each other', async () => {
    const rand = mulberry32(7);
    // Stripe 2 is far slower, and every stripe draws its latency per message: order only holds by reassembly.
    const { ab, ba } = stripedPair('a', 'b', [
      { a: { latencyMs: () => rand() * 4 } },
      { a: { latencyMs: () => 1 + rand() * 6 } },
      { a: { latencyMs: () => 20 + rand() * 10 } },
    ]);
    const { got } = collect(ba);
    for (let i = 0; i < 500; i++) ab.send(numbered(i));
    await until(() => got.length === 500, 'all messages');
    expect([...got].sort((x, y) => x - y)).toEqual(Array.from({ length: 500 }, (_, i) => i));
    expect(got).not.toEqual([...got].sort((x, y) => x - y)); // the stripes did overtake each other
  });

  it('sends on the stripe with the least backlog, so a slow stripe carries little', async () => {
    const { ab, ba, raw } = stripedPair('a', 'b', [
      { a: { bytesPerMs: 2, bufferedAmountLowThreshold: 1024 } },
      { a: { bytesPerMs: 200, bufferedAmountLowThreshold: 1024 } },
      { a: { bytesPerMs: 200, bufferedAmountLowThreshold: 1024 } },
    ]);
    const { got } = collect(ba);
    const pace = async () => {
      for (let i = 0; i < 300; i++) {
        while (ab.bufferedAmount > ab.bufferedAmountLowThreshold)
          await new Promise<void>((r) => ab.onBufferedAmountLow(() => r()));
        ab.send(numbered(i, 256));
      }
    };
    await pace();
    await until(() => got.length === 300, 'all messages', 20_000);
    expect([...got].sort((x, y) => x - y)).toEqual(Array.from({ length: 300 }, (_, i) => i));
    const sent = raw.map(([x]) => x.bytesSent);
    expect(sent[0]).toBeLessThan(sent[1] / 5);
    expect(sent[0]).toBeLessThan(sent[2] / 5);
  });

  it('reports the least-loaded stripe as its backlog and fires low when any stripe drains', async () => {
    const { ab } = stripedPair('a', 'b', [
      { a: { latencyMs: 10_000, bufferedAmountLowThreshold: 1000 } },
      { a: { latencyMs: 20, bufferedAmountLowThreshold: 1000 } },
    ]);
    ab.send(new ArrayBuffer(5000)); // stripe 1 (first in turn): stuck for 10 s
    ab.send(new ArrayBuffer(5000)); // stripe 2: drains in 20 ms
    expect(ab.bufferedAmount).toBe(5000 + STRIPE_HEADER_BYTES);
    const low = new Promise<number>((r) => ab.onBufferedAmountLow(() => r(ab.bufferedAmount)));
    expect(await low).toBe(0);
    ab.close();
  });

  it('gives the same allreduce bytes as unstriped links, while stripes reorder the frames', async () => {
    const n = 50_003;
    const inputs = (size: number) => Array.from({ length: size }, (_, r) => randomArray(mulberry32(100 + r), n, -1, 1));
    const rand = mulberry32(3);
    const reference = inputs(3);
    const plainRing = memoryRing(3).rings;
    await Promise.all(
      plainRing.map((ring, r) =>
        ringAllreduce(ring, reference[r], { id: { round: 1, step: 1, seq: 0 }, timeoutMs: 20_000 }),
      ),
    );
    const data = inputs(3);
    const rings = stripedRing(3, [() => rand() * 3, () => rand() * 8, 5]);
    await Promise.all(
      rings.map((ring, r) =>
        ringAllreduce(ring, data[r], { id: { round: 1, step: 1, seq: 0 }, timeoutMs: 20_000, chunkElements: 1000 }),
      ),
    );
    // An independent check of the sum (float64), then bit-identity with the unstriped run and across ranks.
    const exact = new Float64Array(n);
    for (const x of inputs(3)) for (let i = 0; i < n; i++) exact[i] += x[i];
    for (let i = 0; i < n; i += 997) expect(Math.abs(data[0][i] - exact[i])).toBeLessThan(1e-5);
    for (const d of data) expect(Buffer.from(d.buffer).equals(Buffer.from(reference[0].buffer))).toBe(true);
  });

  it('carries a hash-checked broadcast over stripes', async () => {
    const rand = mulberry32(9);
    const { ab, ba } = stripedPair('root', 'joiner', [
      { a: { latencyMs: () => rand() * 5 } },
      { a: { latencyMs: () => rand() * 5 } },
    ]);
    const state = randomArray(mulberry32(1), 100_000, -1, 1).buffer as ArrayBuffer;
    const opts = { id: { round: 2, step: 0, seq: 1 }, timeoutMs: 20_000, hash: hashBytes };
    const [, got] = await Promise.all([broadcast([ab], true, state, opts), broadcast([ba], false, null, opts)]);
    expect(hashBytes(new Uint8Array(got))).toBe(hashBytes(new Uint8Array(state)));
  });

  it('takes a stripe added mid-stream into use, every message still delivered once', async () => {
    const { ab, ba } = stripedPair('a', 'b', [{ a: { latencyMs: 15 } }]);
    const { got } = collect(ba);
    for (let i = 0; i < 50; i++) ab.send(numbered(i));
    const [x, y] = memoryLinkPair('a', 'b', { a: { latencyMs: 0 } });
    ab.addStripe(x);
    ba.addStripe(y);
    for (let i = 50; i < 100; i++) ab.send(numbered(i));
    await until(() => got.length === 100, 'all messages');
    expect([...got].sort((p, q) => p - q)).toEqual(Array.from({ length: 100 }, (_, i) => i));
    expect(x.bytesSent).toBeGreaterThan(0);
  });

  it('closes both ends, and fails a running collective, when one stripe closes', async () => {
    const size = 3;
    const rings = stripedRing(size, [1, 1, 1]);
    const hop = rings[0].right as StripedLink;
    const data = Array.from({ length: size }, (_, r) => randomArray(mulberry32(r), 200_000, -1, 1));
    const running = rings.map((ring, r) =>
      ringAllreduce(ring, data[r], { id: { round: 1, step: 1, seq: 0 }, timeoutMs: 20_000, chunkElements: 500 }),
    );
    // Close a stripe of rank 0 → rank 1 once frames flow on it (the collective is running, hundreds of
    // chunks still to go), not after a fixed wait that a loaded machine stretches past the collective's end.
    await new Promise<void>((resolve) => {
      const stop = (rings[1].left as StripedLink).links[2].onMessage(() => {
        stop();
        resolve();
      });
    });
    (hop.links[2] as MemoryLink).close();
    const outcomes = await Promise.allSettled(running);
    for (const o of outcomes) {
      expect(o.status).toBe('rejected');
      expect((o as PromiseRejectedResult).reason).toBeInstanceOf(CollectiveError);
    }
    expect(hop.isOpen).toBe(false);
    expect((rings[1].left as StripedLink).isOpen).toBe(false);
  });

  describe('hostile stripe messages close the link and deliver nothing past them', () => {
    /** A stripe message with sequence number `seq` and a 4-byte payload. */
    const withSeq = (seq: number) => {
      const m = new ArrayBuffer(STRIPE_HEADER_BYTES + 4);
      new DataView(m).setUint32(0, seq, true);
      return m;
    };
    // [what, what the attacker sends on a raw stripe, messages delivered before the fault]
    const cases: Array<[string, (raw: MemoryLink) => void, number]> = [
      ['a message shorter than the header', (raw) => raw.send(new ArrayBuffer(3)), 0],
      ['a sequence number far ahead', (raw) => raw.send(withSeq(MAX_AHEAD_MESSAGES + 5)), 0],
      [
        'a message sent twice',
        (raw) => {
          raw.send(withSeq(3));
          raw.send(withSeq(3));
          raw.send(withSeq(4));
        },
        1,
      ],
      [
        'a message delivered already, sent again',
        (raw) => {
          raw.send(withSeq(0));
          raw.send(withSeq(1));
          raw.send(withSeq(0));
          raw.send(withSeq(2));
        },
        2,
      ],
    ];
    for (const [what, inject, deliveredBefore] of cases) {
      it(`refuses ${what}`, async () => {
        const { ba, raw } = stripedPair('a', 'b', [{}, {}]);
        const { got, closed } = collect(ba);
        inject(raw[1][0]); // a's second stripe end, bypassing a's StripedLink
        expect(await closed).toMatch(/protocol error from a/);
        expect(got.length).toBe(deliveredBefore);
        expect(ba.isOpen).toBe(false);
        await until(() => !raw[0][0].isOpen, 'the remote stripes to close');
      });
    }
  });

  it('leaves no listeners on its stripes after closing', async () => {
    const { ab, raw } = stripedPair('a', 'b', [{}, {}, {}]);
    ab.close();
    await new Promise((r) => setTimeout(r, 5));
    for (const [x] of raw) expect(x.listenerCounts).toEqual({ message: 0, close: 0, bufferedAmountLow: 0 });
  });
});
