/**
 * The grouped allreduce (web/net/group-allreduce.ts) over fault-injecting memory links: sums bit for
 * bit against a float32 reference that adds in the collective's order (referenceSum), late ranks,
 * dropped and corrupted frames, and crashes that cost only the crashed rank's group (found by a closed link,
 * by silence, or reported by the coordinator while the crashed rank's links stay open).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { groupBases, type GroupLayout } from '../../../../core/training/group-geometry';
import { CollectiveError } from '../../../../web/net/collective-error';
import { routerFor } from '../../../../web/net/frame-router';
import { decodeFrame, FRAME_HEADER_BYTES, FrameKind } from '../../../../web/net/framing';
import {
  type GroupAllreduceOptions,
  type GroupAllreduceResult,
  groupAllreduce,
} from '../../../../web/net/group-allreduce';
import { MemoryMesh } from '../../../../web/net/memory-mesh';
import { LostRanksFeed } from '../../../../web/elastic/round-session';
import { ringAllreduceBusBytes } from '../../../../web/net/ring-allreduce';
import { mulberry32, randomArray } from '../../../support/rng';

const id = (step: number, seq = 0) => ({ round: 1, step, seq });

function inputs(size: number, n: number, seed: number): Float32Array[] {
  const rand = mulberry32(seed);
  return Array.from({ length: size }, () => randomArray(rand, n, -1, 1));
}

function worldOf(layout: GroupLayout): number {
  return groupBases(layout)[layout.sizes.length];
}

/**
 * The sum in the grouped allreduce's own order, computed here independently: each group's chain from the
 * member after the element's owner (member p owns segment p of its group, floor(s·n/k) boundaries),
 * members in `excluded` skipped, then the groups' partials in group order. Float32 (Math.fround) at every
 * addition, as the ranks do.
 */
function referenceSum(
  layout: GroupLayout,
  xs: Float32Array[],
  excluded: ReadonlySet<number> = new Set(),
): Float32Array {
  const n = xs[0].length;
  const bases = groupBases(layout);
  const out = new Float32Array(n);
  for (let e = 0; e < n; e++) {
    let total: number | null = null;
    layout.sizes.forEach((k, g) => {
      let s = Math.min(k - 1, Math.floor((e * k) / n));
      while (s > 0 && Math.floor((s * n) / k) > e) s--;
      while (s < k - 1 && Math.floor(((s + 1) * n) / k) <= e) s++;
      let partial: number | null = null;
      for (let d = 1; d <= k; d++) {
        const rank = bases[g] + ((s + d) % k);
        if (excluded.has(rank)) continue;
        partial = partial === null ? xs[rank][e] : Math.fround(partial + xs[rank][e]);
      }
      if (partial !== null) total = total === null ? partial : Math.fround(total + partial);
    });
    out[e] = total ?? 0;
  }
  return out;
}

function expectBitIdentical(results: Float32Array[], ranks: number[], label: string): void {
  const first = new Uint32Array(results[ranks[0]].buffer);
  for (const r of ranks.slice(1)) {
    const other = new Uint32Array(results[r].buffer);
    for (let i = 0; i < first.length; i++)
      if (first[i] !== other[i])
        expect.fail(
          `${label}: rank ${r} differs from rank ${ranks[0]} at [${i}]: ${results[r][i]} vs ${results[ranks[0]][i]}`,
        );
  }
}

function expectEqualBits(got: Float32Array, want: Float32Array, label: string): void {
  const a = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const b = new Uint32Array(want.buffer, want.byteOffset, want.length);
  for (let i = 0; i < a.length; i++)
    if (a[i] !== b[i]) expect.fail(`${label}: [${i}] is ${got[i]}, the reference order gives ${want[i]}`);
}

/** Every rank's call on a fresh mesh with the planned links made; resolves to each rank's outcome. */
async function runAll(
  layout: GroupLayout,
  data: Float32Array[],
  opts: Omit<GroupAllreduceOptions, 'id' | 'timeoutMs'> & { timeoutMs?: number },
  mesh = new MemoryMesh(worldOf(layout)),
  during?: (crash: (rank: number) => boolean) => void,
): Promise<{ mesh: MemoryMesh; outcomes: (GroupAllreduceResult | CollectiveError)[] }> {
  mesh.connectPlanned(layout, data[0].length);
  const stops = data.map(() => new AbortController());
  const settled = data.map(() => false);
  const calls = data.map((d, r) =>
    groupAllreduce(mesh.groupLinks(r, layout), d, {
      id: id(1),
      timeoutMs: 10_000,
      ...opts,
      signal: stops[r].signal,
    })
      .catch((err: unknown) => {
        if (!(err instanceof CollectiveError)) throw err;
        return err;
      })
      .finally(() => {
        settled[r] = true;
      }),
  );
  // A crash: the rank's links die under it and its own call stops (a crashed tab runs nothing more).
  // A rank whose call already ended is not crashed (false): the crash came after the collective.
  during?.((rank) => {
    if (settled[rank]) return false;
    mesh.kill(rank);
    stops[rank].abort('crashed');
    return true;
  });
  return { mesh, outcomes: await Promise.all(calls) };
}

describe('groupAllreduce over in-memory links', () => {
  const layouts: [string, GroupLayout][] = [
    ['one ring of 4', { sizes: [4] }],
    ['2 groups of 2', { sizes: [2, 2] }],
    ['3 groups of 3', { sizes: [3, 3, 3] }],
    ['groups of 4, 3, 3', { sizes: [4, 3, 3] }],
    ['groups of 1 and 2', { sizes: [1, 2] }],
    ['8 groups of 8', { sizes: Array(8).fill(8) }],
  ];
  const lengths = [1, 7, 1000, 20_011];

  it.each(layouts.flatMap(([name, layout]) => lengths.map((n) => [name, n, layout] as const)))(
    '%s sums %i floats in the stated order, bit-identically on every rank',
    async (_name, n, layout) => {
      const world = worldOf(layout);
      const data = inputs(world, n, world * 31 + n);
      const want = referenceSum(layout, data);
      const { mesh, outcomes } = await runAll(layout, data, { chunkElements: 97 });
      for (const outcome of outcomes) expect(outcome).toEqual({ excluded: [] });
      for (let r = 0; r < world; r++) expectEqualBits(data[r], want, `rank ${r}`);
      // Nothing left behind: each link's router keeps one message and one close listener, nothing per call.
      for (const pair of mesh.allPairs) for (const end of pair) expect(end.listenerCounts.bufferedAmountLow).toBe(0);
    },
  );

  it.each(['fp16', 'int8'] as const)(
    'with %s on the wire ends bit-identical on every rank, close to the exact sum',
    async (compression) => {
      const layout = { sizes: [4, 4, 3] };
      const world = 11;
      const n = 10_000;
      const data = inputs(world, n, 77);
      const exact = new Float64Array(n);
      for (const x of data) for (let i = 0; i < n; i++) exact[i] += x[i];
      const { outcomes } = await runAll(layout, data, { compression, chunkElements: 512 });
      for (const outcome of outcomes) expect(outcome).toEqual({ excluded: [] });
      expectBitIdentical(
        data,
        Array.from({ length: world }, (_, r) => r),
        compression,
      );
      // int8: about (hops + 2)·M/254 per element, M ≤ 11 here; fp16 far tighter.
      const bound = compression === 'int8' ? 0.6 : 0.02;
      for (let i = 0; i < n; i++) expect(Math.abs(data[0][i] - exact[i])).toBeLessThan(bound);
    },
  );

  it('sends each rank about the ring’s bytes, not more', async () => {
    const layout = { sizes: Array(4).fill(4) };
    const n = 64_000;
    const data = inputs(16, n, 5);
    const { mesh } = await runAll(layout, data, {});
    const perRank = new Float64Array(16);
    for (const [a, b] of mesh.allPairs) {
      perRank[Number(b.peer.slice(4))] += a.bytesSent;
      perRank[Number(a.peer.slice(4))] += b.bytesSent;
    }
    const ring = ringAllreduceBusBytes(n, 16);
    // Payload plus headers and prefixes: within 2 % of the ring's payload for every rank.
    for (const bytes of perRank) expect(bytes / ring).toBeLessThan(1.02);
    expect(Math.max(...perRank) / ring).toBeGreaterThan(0.95);
  });

  it('refuses a NaN in a rank’s input on every rank, sending no values', async () => {
    const layout = { sizes: [3, 3] };
    const data = inputs(6, 500, 9);
    data[4][17] = Number.NaN;
    const { outcomes } = await runAll(layout, data, { timeoutMs: 2000 });
    for (const outcome of outcomes) {
      expect(outcome).toBeInstanceOf(CollectiveError);
      expect((outcome as CollectiveError).kind).not.toBe('timeout');
    }
  });
});

describe('groupAllreduce with late ranks', () => {
  it('a rank that calls after its mates sealed takes their early frames in order and everyone finishes', async () => {
    const layout = { sizes: [3, 3, 3] };
    const data = inputs(9, 2000, 31);
    const want = referenceSum(layout, data);
    const mesh = new MemoryMesh(9);
    mesh.connectPlanned(layout, 2000);
    const call = (r: number) =>
      groupAllreduce(mesh.groupLinks(r, layout), data[r], { id: id(1), timeoutMs: 10_000, mayExclude: true });
    // Ranks 1, 4 and 7 start late: their left neighbours' reduce and seal frames wait in their routers.
    const early = [0, 2, 3, 5, 6, 8].map(call);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const late = [1, 4, 7].map(call);
    for (const outcome of await Promise.all([...early, ...late])) expect(outcome).toEqual({ excluded: [] });
    for (let r = 0; r < 9; r++) expectEqualBits(data[r], want, `rank ${r}`);
  });

  it('a rank that calls after its group retried joins the retry from its early frames and everyone finishes', async () => {
    const layout = { sizes: [3, 3] };
    const data = inputs(6, 3000, 32);
    const want = referenceSum(layout, data);
    // Rank 0's first frame to rank 1 is corrupted: group 0 starts its reduce again (nobody excluded)
    // before rank 2 has called. Rank 2's early frames from rank 1 then hold attempt 0's reduce, the
    // retry, and attempt 1's reduce: routing its first link replays a retry, which routes that same
    // link under attempt 1 while its attempt-0 route is still being opened.
    const mesh = new MemoryMesh(6, {
      pairOptions: (a, b) =>
        a === 0 && b === 1
          ? {
              a: {
                tamper: (bytes, index) => {
                  if (index === 0) bytes[bytes.length - 1] ^= 1;
                  return undefined;
                },
              },
            }
          : {},
    });
    mesh.connectPlanned(layout, 3000);
    const call = (r: number) =>
      groupAllreduce(mesh.groupLinks(r, layout), data[r], {
        id: id(1),
        timeoutMs: 10_000,
        chunkElements: 200,
        mayExclude: true,
        silenceMs: 5_000,
      }).catch((err: unknown) => err);
    // Rank 2's router takes the frames first (it holds them for the call); this listener only sees them.
    const fromLeft = mesh.groupLinks(2, layout).link(1)!;
    routerFor(fromLeft);
    const retried = new Promise<void>((resolve) => {
      const stop = fromLeft.onMessage((message) => {
        if (decodeFrame(message).kind !== FrameKind.GroupRetry) return;
        stop();
        resolve();
      });
    });
    const early = [0, 1, 3, 4, 5].map(call);
    await retried;
    const outcomes = await Promise.all([...early, call(2)]);
    for (const outcome of outcomes) expect(outcome).toEqual({ excluded: [] });
    for (let r = 0; r < 6; r++) expectEqualBits(data[r], want, `rank ${r}`);
  });
});

describe('groupAllreduce with faults', () => {
  it('retries a group whose frame was corrupted, and every rank still ends with the same sum', async () => {
    const layout = { sizes: [3, 3, 3] };
    const data = inputs(9, 3000, 11);
    const want = referenceSum(layout, data);
    let flipped = 0;
    const mesh = new MemoryMesh(9, {
      // Rank 3 → rank 4 (group 1's ring): flip a value byte of its second message.
      pairOptions: (a, b) =>
        a === 3 && b === 4
          ? {
              a: {
                tamper: (bytes, index) => {
                  if (index !== 1) return undefined;
                  bytes[FRAME_HEADER_BYTES + 20] ^= 0x40;
                  flipped++;
                  return undefined;
                },
              },
            }
          : {},
    });
    const { outcomes } = await runAll(layout, data, { chunkElements: 200, mayExclude: true }, mesh);
    expect(flipped).toBe(1);
    for (const outcome of outcomes) expect(outcome).toEqual({ excluded: [] });
    for (let r = 0; r < 9; r++) expectEqualBits(data[r], want, `rank ${r}`);
  });

  it('leaves out a member that crashes inside its group’s reduce; the other groups finish with the same sum', async () => {
    const layout = { sizes: [3, 3, 3] };
    const n = 30_000;
    const data = inputs(9, n, 12);
    const want = referenceSum(layout, data, new Set([4]));
    // Slow links so the crash lands inside the reduce.
    const mesh = new MemoryMesh(9, { latencyMs: 2, bytesPerMs: 4000 });
    const { outcomes } = await runAll(layout, data, { chunkElements: 500, mayExclude: true }, mesh, (crash) =>
      setTimeout(() => crash(4), 15),
    );
    const survivors = [0, 1, 2, 3, 5, 6, 7, 8];
    for (const r of survivors) expect(outcomes[r]).toEqual({ excluded: [4] });
    expect(outcomes[4]).toBeInstanceOf(CollectiveError);
    for (const r of survivors) expectEqualBits(data[r], want, `rank ${r}`);
  });

  it('fails every rank when a member is lost and leaving it out is not allowed (every-step sync)', async () => {
    const layout = { sizes: [3, 3] };
    const data = inputs(6, 30_000, 13);
    const mesh = new MemoryMesh(6, { latencyMs: 2, bytesPerMs: 4000 });
    const { outcomes } = await runAll(layout, data, { chunkElements: 500, timeoutMs: 5000 }, mesh, (crash) =>
      setTimeout(() => crash(1), 10),
    );
    for (const outcome of outcomes) {
      expect(outcome).toBeInstanceOf(CollectiveError);
      expect((outcome as CollectiveError).kind).not.toBe('timeout');
    }
  });

  /**
   * Ranks 2–7 of four groups of two call with a 60-s deadline and silence limit (beyond this test's limit),
   * after `before` did what it does to the mesh, and the coordinator reports `reported` lost: every one must
   * fail with `peer_closed`, within 5 s.
   */
  async function expectGroupZeroLost(seed: number, reported: number[], before?: (mesh: MemoryMesh) => void) {
    const layout = { sizes: [2, 2, 2, 2] };
    const data = inputs(8, 4000, seed);
    const feeds = data.map(() => new LostRanksFeed());
    const mesh = new MemoryMesh(8);
    mesh.connectPlanned(layout, 4000);
    before?.(mesh);
    const started = Date.now();
    const calls = [2, 3, 4, 5, 6, 7].map((r) =>
      groupAllreduce(mesh.groupLinks(r, layout), data[r], {
        id: id(1),
        timeoutMs: 60_000,
        silenceMs: 60_000,
        chunkElements: 300,
        mayExclude: true,
        lost: feeds[r],
      }).catch((err: unknown) => err),
    );
    for (const feed of feeds) feed.add(reported);
    for (const outcome of await Promise.all(calls)) {
      expect(outcome).toBeInstanceOf(CollectiveError);
      expect((outcome as CollectiveError).kind).toBe('peer_closed');
    }
    expect(Date.now() - started).toBeLessThan(5_000);
  }

  it('fails every survivor at once, not at the deadline, when the coordinator reports a whole group lost', async () => {
    // Ranks 0 and 1 (all of group 0) never call, their links open (stopped dead before the sync): nothing
    // but the report can end the others' call before its deadline.
    await expectGroupZeroLost(43, [0, 1]);
  }, 10_000);

  it('fails every survivor at once when the coordinator reports one member of a group lost and its only mate is unreachable', async () => {
    // Group 0 is ranks 0 and 1. Rank 0 stopped dead before the sync with its links open (the coordinator
    // reports it); rank 1 crashed (its links closed, and nobody can dial it). A survivor that never had a
    // link to rank 1 learns of it only when it dials it as rank 0's heir: that failed dial means rank 1 is
    // out too, so group 0 has nobody left and the call fails, not at the deadline.
    await expectGroupZeroLost(47, [0], (mesh) => mesh.kill(1));
  }, 10_000);
});

/** Bytes each rank handed to its links in one run (the mesh's pairs count both ends). */
function bytesByRank(mesh: MemoryMesh, world: number): number[] {
  const out = Array(world).fill(0);
  for (const [a, b] of mesh.allPairs) {
    out[Number(b.peer.slice(4))] += a.bytesSent;
    out[Number(a.peer.slice(4))] += b.bytesSent;
  }
  return out;
}

describe('groupAllreduce: a failure costs only its group', () => {
  it('the other groups send what they send without a failure; only the failed group does its reduce again', async () => {
    const layout = { sizes: [4, 4, 4] };
    const n = 40_000;
    const slow = { latencyMs: 2, bytesPerMs: 8000 };
    const clean = await runAll(
      layout,
      inputs(12, n, 21),
      { chunkElements: 500, mayExclude: true },
      new MemoryMesh(12, slow),
    );
    const cleanBytes = bytesByRank(clean.mesh, 12);
    const crashed = await runAll(
      layout,
      inputs(12, n, 21),
      { chunkElements: 500, mayExclude: true },
      new MemoryMesh(12, slow),
      (crash) => setTimeout(() => crash(6), 12),
    );
    for (let r = 0; r < 12; r++) if (r !== 6) expect(crashed.outcomes[r]).toEqual({ excluded: [6] });
    const bytes = bytesByRank(crashed.mesh, 12);
    // Groups 0 and 2 (ranks 0–3, 8–11): their own traffic, plus at most the partials they send the heir again.
    for (const r of [0, 1, 2, 3, 8, 9, 10, 11]) expect(bytes[r] / cleanBytes[r]).toBeLessThan(1.15);
    // Group 1's survivors did their reduce again.
    const redone = [4, 5, 7].map((r) => bytes[r] / cleanBytes[r]);
    expect(Math.max(...redone)).toBeGreaterThan(1.15);
  });

  it('leaves out a member that hangs (sends nothing at all) after the silence limit', async () => {
    const layout = { sizes: [3, 3] };
    const data = inputs(6, 2000, 22);
    const want = referenceSum(layout, data, new Set([2]));
    const mesh = new MemoryMesh(6);
    mesh.connectPlanned(layout, 2000);
    // Rank 2 never calls: its links stay open, it just never speaks (a hung tab).
    const calls = [0, 1, 3, 4, 5].map((r) =>
      groupAllreduce(mesh.groupLinks(r, layout), data[r], {
        id: id(1),
        timeoutMs: 10_000,
        mayExclude: true,
        silenceMs: 150,
      }),
    );
    for (const outcome of await Promise.all(calls)) expect(outcome).toEqual({ excluded: [2] });
    for (const r of [0, 1, 3, 4, 5]) expectEqualBits(data[r], want, `rank ${r}`);
  });

  it('a partner across groups that never heard of a silent member’s exclusion learns it from the tags and reaches its heir, where only the lower rank of a pair dials', async () => {
    const layout = { sizes: [3, 3] };
    const data = inputs(6, 2000, 27);
    const want = referenceSum(layout, data, new Set([3]));
    // Rank 3 never calls and its links stay open (a tab that crashed silently). Its group leaves it out,
    // and its segment goes to its heir, rank 5, whose partner across groups is rank 0. As with PeerMesh,
    // only the lower rank of a pair dials: rank 5 waits for rank 0 to call, and rank 0 has no closed link
    // to tell it rank 3 is out. Only the excluded sets the final sums carry (its mates' gather) can.
    const mesh = new MemoryMesh(6, { lowerDials: true });
    mesh.connectPlanned(layout, 2000);
    const calls = [0, 1, 2, 4, 5].map((r) =>
      groupAllreduce(mesh.groupLinks(r, layout), data[r], {
        id: id(1),
        timeoutMs: 5_000,
        mayExclude: true,
        silenceMs: 150,
      }).catch((err: unknown) => err),
    );
    for (const outcome of await Promise.all(calls)) expect(outcome).toEqual({ excluded: [3] });
    for (const r of [0, 1, 2, 4, 5]) expectEqualBits(data[r], want, `rank ${r}`);
  });

  it.each([0, 4, 8])(
    'starts the group again without rank %i, silent from its seal on with its links open (a crashed tab), and every survivor ends with the same sum',
    async (victim) => {
      const layout = { sizes: [3, 3, 3] };
      const data = inputs(9, 6000, 41 + victim);
      const want = referenceSum(layout, data, new Set([victim]));
      const stop = new AbortController();
      let mute = false;
      // From its seal on, nothing the victim sends arrives and its call stops (it crashed); its links stay
      // open, so only silence tells. Its right neighbour's own reduce is complete by then: it waits for
      // the victim's seal, not for values.
      const tamper = (message: Uint8Array): 'drop' | undefined => {
        const bytes = message.buffer.slice(message.byteOffset, message.byteOffset + message.byteLength) as ArrayBuffer;
        if (!mute && decodeFrame(bytes).kind === FrameKind.GroupSeal) {
          mute = true;
          queueMicrotask(() => stop.abort('crashed'));
        }
        return mute ? 'drop' : undefined;
      };
      const mesh = new MemoryMesh(9, {
        pairOptions: (a, b) => (a === victim ? { a: { tamper } } : b === victim ? { b: { tamper } } : {}),
      });
      mesh.connectPlanned(layout, 6000);
      const calls = data.map((d, r) =>
        groupAllreduce(mesh.groupLinks(r, layout), d, {
          id: id(1),
          timeoutMs: 10_000,
          silenceMs: 100,
          chunkElements: 500,
          mayExclude: true,
          ...(r === victim ? { signal: stop.signal } : {}),
        }).catch((err: unknown) => err),
      );
      const outcomes = await Promise.all(calls);
      expect(mute, 'the victim sealed').toBe(true);
      const survivors = [0, 1, 2, 3, 4, 5, 6, 7, 8].filter((r) => r !== victim);
      for (const r of survivors) expect(outcomes[r], `rank ${r}`).toEqual({ excluded: [victim] });
      expect(outcomes[victim]).toBeInstanceOf(CollectiveError);
      for (const r of survivors) expectEqualBits(data[r], want, `rank ${r}`);
    },
    15_000,
  );

  it.each([
    [4, 3, 20],
    [3, 1, 40],
    [8, 6, 100],
    [0, 0, 180],
  ])(
    'leaves out at once rank %i, silent after %i reduce frames while its links stay open (a crashed tab), when the coordinator reports it %i ms later, with no silence limit to fall back on',
    async (victim, framesBefore, reportAfterMs) => {
      const layout = { sizes: [3, 3, 3] };
      const n = 30_000;
      const data = inputs(9, n, 31 + victim);
      const want = referenceSum(layout, data, new Set([victim]));
      const mesh = new MemoryMesh(9, {
        pairOptions: (a, b) => (a === victim ? { a: { tamper } } : b === victim ? { b: { tamper } } : {}),
      });
      mesh.connectPlanned(layout, n);
      const feeds = data.map(() => new LostRanksFeed());
      const stop = new AbortController();
      const survivors = [0, 1, 2, 3, 4, 5, 6, 7, 8].filter((r) => r !== victim);
      // The victim stops dead after its first `framesBefore` reduce frames: nothing more it sends arrives,
      // its call stops, its links stay open (no close, no abort frame). Its group cannot seal without it.
      // Then the coordinator, which saw its socket close, tells the survivors (one hears it twice).
      let sent = 0;
      let mute = false;
      function tamper(message: Uint8Array): 'drop' | undefined {
        const bytes = message.buffer.slice(message.byteOffset, message.byteOffset + message.byteLength) as ArrayBuffer;
        if (!mute && decodeFrame(bytes).kind === FrameKind.GroupReduce && sent++ === framesBefore) {
          mute = true;
          queueMicrotask(() => stop.abort('crashed'));
          setTimeout(() => {
            for (const r of survivors) feeds[r].add([victim]);
            feeds[survivors[0]].add([victim]);
          }, reportAfterMs);
        }
        return mute ? 'drop' : undefined;
      }
      const calls = data.map((d, r) =>
        groupAllreduce(mesh.groupLinks(r, layout), d, {
          id: id(1),
          // Far longer than the test's own limit: only the report can end this call in time.
          timeoutMs: 60_000,
          silenceMs: 60_000,
          chunkElements: 500,
          mayExclude: true,
          lost: feeds[r],
          ...(r === victim ? { signal: stop.signal } : {}),
        }).catch((err: unknown) => err),
      );
      const outcomes = await Promise.all(calls);
      expect(mute, 'the victim went silent').toBe(true);
      for (const r of survivors) expect(outcomes[r], `rank ${r}`).toEqual({ excluded: [victim] });
      expect(outcomes[victim]).toBeInstanceOf(CollectiveError);
      for (const r of survivors) expectEqualBits(data[r], want, `rank ${r}`);
    },
    20_000,
  );

  it('starts a group’s reduce again when a frame of it is lost, and every rank still ends with the full sum', async () => {
    const layout = { sizes: [3, 3] };
    const data = inputs(6, 3000, 23);
    const want = referenceSum(layout, data);
    const mesh = new MemoryMesh(6, {
      pairOptions: (a, b) =>
        a === 0 && b === 1 ? { a: { tamper: (_bytes, index) => (index === 2 ? 'drop' : undefined) } } : {},
    });
    const { outcomes } = await runAll(layout, data, { chunkElements: 200, mayExclude: true, silenceMs: 150 }, mesh);
    for (const outcome of outcomes) expect(outcome).toEqual({ excluded: [] });
    for (let r = 0; r < 6; r++) expectEqualBits(data[r], want, `rank ${r}`);
  });

  it('fails every rank, none with a different sum, when a frame across groups is corrupted', async () => {
    const layout = { sizes: [3, 3] };
    const data = inputs(6, 3000, 24);
    // Rank 0 → rank 3 carries only the exchange across groups (partials, results).
    const mesh = new MemoryMesh(6, {
      pairOptions: (a, b) =>
        a === 0 && b === 3
          ? {
              a: {
                tamper: (bytes, index) => {
                  if (index === 0) bytes[bytes.length - 1] ^= 1;
                  return undefined;
                },
              },
            }
          : {},
    });
    const { outcomes } = await runAll(layout, data, { chunkElements: 200, mayExclude: true, timeoutMs: 5000 }, mesh);
    for (const outcome of outcomes) {
      expect(outcome).toBeInstanceOf(CollectiveError);
      expect((outcome as CollectiveError).kind).toBe('protocol');
    }
  });

  // Seeds whose crash came after a group sealed fail every rank and check no sum: count the seeds that
  // did check one, so a collective that failed every rank at every crash could not pass these tests.
  // Seeds 42 and 62 crash both members of a group of 2 (every survivor waited for the deadline before the
  // call failed on a group lost whole).
  const seeds = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 42, 62];
  const crashSeeds = { run: 0, summed: 0 };
  afterAll(() => {
    if (crashSeeds.run === seeds.length)
      expect(crashSeeds.summed, 'seeds where some rank finished with a sum').toBeGreaterThan(0);
  });

  it.each(seeds)(
    'with crashes at random moments (seed %i), every rank that finishes holds the same bytes, summed without exactly the ranks it names',
    async (seed) => {
      const rand = mulberry32(seed * 7919);
      const layouts = [{ sizes: [3, 3, 3] }, { sizes: [4, 4, 3] }, { sizes: [2, 2, 2, 2] }, { sizes: [5, 4] }];
      const layout = layouts[seed % layouts.length];
      const world = worldOf(layout);
      const n = 5000 + Math.floor(rand() * 20_000);
      const data = inputs(world, n, seed);
      const copies = data.map((d) => d.slice());
      const victims = [Math.floor(rand() * world)];
      if (rand() < 0.4) victims.push((victims[0] + 1 + Math.floor(rand() * (world - 1))) % world);
      const crashed = new Set<number>();
      const mesh = new MemoryMesh(world, { latencyMs: () => 1 + rand() * 2, bytesPerMs: 1500 });
      const { outcomes } = await runAll(
        layout,
        data,
        { chunkElements: 300 + Math.floor(rand() * 500), mayExclude: true, timeoutMs: 6000, silenceMs: 1000 },
        mesh,
        (crash) => {
          for (const v of victims) setTimeout(() => crash(v) && crashed.add(v), rand() * 40);
        },
      );
      const finished = outcomes.flatMap((o, r) => (o instanceof CollectiveError ? [] : [r]));
      for (const v of crashed) expect(finished).not.toContain(v);
      crashSeeds.run += 1;
      if (finished.length === 0) {
        // A loss after a group sealed: every rank failed for the loss, none for bad bytes and none with
        // a sum. The crashed ranks stopped on their own abort; the others saw a closed peer, or a mate
        // whose group retried after it had sealed. None names an honest rank with a `protocol` error: a
        // tab reports that as bad data from that rank (web/elastic/plan.ts `failureReport`).
        const crashedNames = new Set([...crashed].map((r) => MemoryMesh.rankName(r)));
        for (const [r, o] of outcomes.entries()) {
          const { kind, message, peer } = o as CollectiveError;
          if (crashed.has(r)) expect(kind, `rank ${r}: ${message}`).toBe('aborted');
          else
            expect(kind === 'peer_closed' || /retried after it sealed/.test(message), `rank ${r}: ${message}`).toBe(
              true,
            );
          if (!crashed.has(r) && kind === 'protocol')
            expect(peer === null || crashedNames.has(peer), `rank ${r} blames ${peer}: ${message}`).toBe(true);
        }
        return;
      }
      crashSeeds.summed += 1;
      const excluded = (outcomes[finished[0]] as GroupAllreduceResult).excluded;
      for (const r of finished) expect((outcomes[r] as GroupAllreduceResult).excluded).toEqual(excluded);
      for (const r of excluded) expect(crashed).toContain(r);
      const want = referenceSum(layout, copies, new Set(excluded));
      for (const r of finished) expectEqualBits(data[r], want, `rank ${r}`);
    },
  );
});
