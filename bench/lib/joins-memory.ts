/**
 * bench:joins' link-model part: the state sync of a joining round alone, on memory links shaped like the
 * test bed's access links (bench/lib/topology-memory.ts: each rank's own uplink and downlink, two access
 * delays per message), in virtual time (virtual-clock.ts), so the figure is what the links and the
 * algorithm cost, without this machine's CPU or the workers' start-up that bury it on loopback.
 *
 * Side by side, from the same start, for `holders` ranks holding a state of `bytes` and `joiners` lacking it:
 * - `one root, store and forward`: the algorithm before issue 23's joins (until 5fddbed): rank 0 sends, every
 *   other rank receives the whole state from its left and then sends it to its right, holders too;
 * - `every holder, relayed, appended`: core/training/state-route.ts with the joiners after the holders in
 *   admission order (one chain);
 * - `every holder, relayed, spread`: the same with the joiners spread behind the holders (`spreadNonHolders`),
 *   as the coordinator orders a round whose chain would be deeper than MAX_PLANNED_RELAY_CHAIN.
 * Each is the virtual ms from the start to the last rank holding a verified copy.
 */
import { hashBytes } from '../../core/state/hash';
import { spreadNonHolders, stateRoute } from '../../core/training/state-route';
import { broadcastReceive, broadcastRelay, broadcastSend } from '../../web/net/broadcast';
import { type AccessProfile, profileNamed, shapedRing } from './topology-memory';
import { inVirtualTime } from './virtual-clock';

export type JoinAlgorithm =
  | 'one root, store and forward'
  | 'every holder, relayed, appended'
  | 'every holder, relayed, spread';
export const JOIN_ALGORITHMS: JoinAlgorithm[] = [
  'one root, store and forward',
  'every holder, relayed, appended',
  'every holder, relayed, spread',
];

export interface JoinSyncPoint {
  profile: string;
  bytes: number;
  holders: number;
  joiners: number;
  algorithm: JoinAlgorithm;
  ms: number;
}

/** One state sync; ranks 0..holders−1 of the admission order hold the state. Returns virtual ms. */
async function syncOnce(
  algorithm: JoinAlgorithm,
  holders: number,
  joiners: number,
  state: ArrayBuffer,
  profile: AccessProfile,
): Promise<number> {
  const world = holders + joiners;
  const admission = Array.from({ length: world }, (_, i) => i);
  const lacks = (member: number) => member >= holders;
  const order = algorithm === 'every holder, relayed, spread' ? spreadNonHolders(admission, lacks) : admission;
  const holderRanks = order.flatMap((member, rank) => (lacks(member) ? [] : [rank]));
  const rings = shapedRing(world, profile);
  const opts = { id: { round: 1, step: 0, seq: 0 }, timeoutMs: 3_600_000, hash: hashBytes };
  const run = () =>
    Promise.all(
      rings.map(async (ring, rank) => {
        if (algorithm === 'one root, store and forward') {
          // The old broadcastState: rank 0 is the root; the rest receive whole, then pass it on.
          if (rank === 0) return broadcastSend([ring.right!], state, opts);
          const bytes = await broadcastReceive(ring.left!, opts);
          if ((rank + 1) % world !== 0) await broadcastSend([ring.right!], bytes, opts);
          return;
        }
        const route = stateRoute(rank, world, holderRanks);
        if (route.receiveFromLeft && route.sendToRight) return broadcastRelay(ring.left!, ring.right!, opts);
        if (route.receiveFromLeft) return broadcastReceive(ring.left!, opts);
        if (route.sendToRight) return broadcastSend([ring.right!], state, opts);
      }),
    );
  return (await inVirtualTime(run)).ms;
}

/** Every algorithm for each profile, state size and joiner count (interleaved, one run each: virtual time is deterministic). */
export async function joinSyncPoints(opts: {
  profiles: string[];
  bytes: number[];
  holders: number;
  joiners: number[];
  log: (line: string) => void;
}): Promise<JoinSyncPoint[]> {
  const points: JoinSyncPoint[] = [];
  for (const profileName of opts.profiles) {
    const profile = profileNamed(profileName);
    for (const bytes of opts.bytes) {
      const state = new Uint8Array(bytes).map((_, i) => (i * 2654435761) >>> 24).buffer;
      for (const joiners of opts.joiners)
        for (const algorithm of JOIN_ALGORITHMS) {
          const ms = await syncOnce(algorithm, opts.holders, joiners, state, profile);
          points.push({ profile: profileName, bytes, holders: opts.holders, joiners, algorithm, ms });
          opts.log(
            `${profileName} ${(bytes / 1e6).toFixed(1)} MB, ${joiners} joiner(s): ${algorithm} ${ms.toFixed(0)} ms`,
          );
        }
    }
  }
  return points;
}
