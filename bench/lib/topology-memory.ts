/**
 * bench:topology's simulated links: N ranks in one Node process on in-memory links shaped like the test
 * bed's access links (each rank has its own uplink and downlink at the profile's rate, shared by all its
 * links; a message crosses both access links' delay, as between two homes), running the plain ring
 * allreduce or the grouped one, from a common start, in virtual time (virtual-clock.ts): the figure is
 * the link model's time for the algorithm (its hops, its bytes through each access link), with the CPU
 * of a hundred ranks sharing one thread left out. Real tabs (the loopback and test-bed parts) measure
 * the rest.
 */
import { balancedSizes, planTopology } from '../../core/training/topology';
import { groupAllreduce } from '../../web/net/group-allreduce';
import { memoryRing, SharedRate } from '../../web/net/memory-link';
import { MemoryMesh } from '../../web/net/memory-mesh';
import { ringAllreduce, ringAllreduceBusBytes } from '../../web/net/ring-allreduce';
import { mulberry32, randomArray } from '../../test/support/rng';
import type { SyncPoint } from './topology-figures';
import { inVirtualTime } from './virtual-clock';
import { median } from './topology-figures';

/** A home's access link, as the test bed shapes it: one-way delay each way, the rate each way. */
export interface AccessProfile {
  delayMs: number;
  rateMbit: number;
}

export const MEMORY_PROFILES: Record<string, AccessProfile> = {
  /** Loopback: no shaping worth the name (the figure is CPU). */
  loopback: { delayMs: 0.05, rateMbit: 10_000 },
  /** The test bed's broadband (bench/net.ts): 20 ms and 50 Mbit/s per access link. */
  broadband: { delayMs: 20, rateMbit: 50 },
  /** The test bed's poor profile's delay and rate (no loss: memory links are reliable). */
  poor: { delayMs: 80, rateMbit: 10 },
  /** Broadband's rate with a LAN's delay: the bandwidth term alone (run it with a large vector). */
  rate: { delayMs: 0.25, rateMbit: 50 },
};

function accessOf(world: number, profile: AccessProfile): { up: SharedRate[]; down: SharedRate[] } {
  const bytesPerMs = (profile.rateMbit * 1e6) / 8 / 1000;
  return {
    up: Array.from({ length: world }, () => new SharedRate(bytesPerMs)),
    down: Array.from({ length: world }, () => new SharedRate(bytesPerMs)),
  };
}

/** The profile called `name`; throws naming the known ones. */
export function profileNamed(name: string): AccessProfile {
  const profile = MEMORY_PROFILES[name];
  if (!profile) throw new Error(`unknown profile ${name} (${Object.keys(MEMORY_PROFILES).join(', ')})`);
  return profile;
}

/** A ring of `world` memory links, each rank behind its own access link shaped by `profile`. */
export function shapedRing(world: number, profile: AccessProfile): ReturnType<typeof memoryRing>['rings'] {
  const { up, down } = accessOf(world, profile);
  return memoryRing(world, {
    // A message crosses the sender's access link and the receiver's: twice the delay.
    latencyMs: 2 * profile.delayMs,
    linkOptions: (from) => {
      const to = (from + 1) % world;
      return {
        a: { access: { uplink: up[from], downlink: down[to] } },
        b: { access: { uplink: up[to], downlink: down[from] } },
      };
    },
  }).rings;
}

/** One allreduce of `n` floats over `world` ranks; returns ms from start to the last rank's finish. */
export async function runOnce(
  topology: 'ring' | 'groups',
  world: number,
  n: number,
  profile: AccessProfile,
  groups: number[],
  seed: number,
  mayExclude = false,
): Promise<number> {
  const rand = mulberry32(seed);
  const data = Array.from({ length: world }, () => randomArray(rand, n));
  const { up, down } = accessOf(world, profile);
  // A message crosses the sender's access link and the receiver's: twice the delay.
  const latencyMs = 2 * profile.delayMs;
  const id = { round: 1, step: 1, seq: 0 };
  const timeoutMs = 600_000;
  if (topology === 'ring') {
    const rings = shapedRing(world, profile);
    const run = () => Promise.all(rings.map((ring, r) => ringAllreduce(ring, data[r], { id, timeoutMs })));
    return (await inVirtualTime(run)).ms;
  }
  const layout = { sizes: groups };
  const mesh = new MemoryMesh(world, {
    latencyMs,
    pairOptions: (a, b) => ({
      a: { access: { uplink: up[a], downlink: down[b] } },
      b: { access: { uplink: up[b], downlink: down[a] } },
    }),
  });
  mesh.connectPlanned(layout, n);
  const run = () =>
    Promise.all(data.map((d, r) => groupAllreduce(mesh.groupLinks(r, layout), d, { id, timeoutMs, mayExclude })));
  return (await inVirtualTime(run)).ms;
}

/** Ring and planned groups at each world size, `repeat` times each (interleaved), medians. */
export async function memoryPoints(opts: {
  profiles: string[];
  worlds: number[];
  n: number;
  repeat: number;
  log: (line: string) => void;
}): Promise<SyncPoint[]> {
  const points: SyncPoint[] = [];
  for (const profileName of opts.profiles) {
    const profile = profileNamed(profileName);
    for (const world of opts.worlds) {
      // Groups of ⌊√N⌋ as the planner makes them on equal links, also where it would keep the ring (said in the log).
      const planned = balancedSizes(world, Math.max(1, Math.floor(Math.sqrt(world))));
      const plannerKeepsRing = planTopology(world, () => 2 * 2 * profile.delayMs).groups.length === 1;
      const times: Record<'ring' | 'groups', number[]> = { ring: [], groups: [] };
      for (let i = 0; i < opts.repeat; i++)
        for (const topology of ['ring', 'groups'] as const) {
          const groups = topology === 'ring' ? [world] : planned;
          times[topology].push(await runOnce(topology, world, opts.n, profile, groups, world * 100 + i));
        }
      for (const topology of ['ring', 'groups'] as const) {
        const ms = median(times[topology]);
        const busMBps = ringAllreduceBusBytes(opts.n, world) / 1e6 / (ms / 1000);
        const groups = topology === 'ring' ? [world] : planned;
        points.push({ profile: profileName, topology, world, groups, ms, busMBps });
        opts.log(
          `${profileName.padEnd(9)} N=${String(world).padStart(3)} ${topology.padEnd(6)} groups ${groups.length} ` +
            `${ms.toFixed(0).padStart(7)} ms  bus ${busMBps.toFixed(2)} MB/s  (${times[topology].map((t) => t.toFixed(0)).join(', ')})` +
            (topology === 'groups' && plannerKeepsRing ? '  [the planner keeps the ring here]' : ''),
        );
      }
    }
  }
  return points;
}
