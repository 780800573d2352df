/**
 * The coordinator's side of the topology (core/training/topology.ts plans it): the link RTTs each
 * worker's heartbeats reported, remembered per worker across rounds (a tab only measures the links it
 * has, and those change with the topology), and the order and groups of a round about to open.
 */
import type { PeerLink } from '../../core/protocol/tab-messages';
import { planTopology, type Topology } from '../../core/training/topology';
import type { CoordinatorState } from './state';
import { workerOf } from './worker-table';

/** Links a worker's RTT memory keeps (the most recently reported ones). */
export const MAX_REMEMBERED_LINKS = 64;

/** `known` (peer id → RTT ms) with the RTTs `links` carry, newest last, at most `MAX_REMEMBERED_LINKS`. */
export function rememberRtts(
  known: Readonly<Record<string, number>> | undefined,
  links: readonly PeerLink[],
): Record<string, number> {
  const next: Record<string, number> = { ...known };
  for (const link of links) {
    if (link.rttMs == null) continue;
    delete next[link.peer];
    next[link.peer] = link.rttMs;
  }
  const keys = Object.keys(next);
  for (const key of keys.slice(0, Math.max(0, keys.length - MAX_REMEMBERED_LINKS))) delete next[key];
  return next;
}

/**
 * The topology of a round of `members` (worker ids, in the order the rendezvous admitted them): the
 * order their ranks follow and the groups. Without any measured RTT the order is the given one. Groups
 * only for jobs with `topology: 'auto'` or `'groups'` (core/training/job.ts); jobs that verify keep the plain ring
 * whatever they say: their hop checks follow the ring's segments (verification.ts).
 */
export function roundTopology(s: CoordinatorState, members: readonly string[]): Topology {
  const peers = members.map((id) => workerOf(s.workers, id)?.peerId ?? '');
  const known = members.map((id) => workerOf(s.workers, id)?.linkRtts ?? {});
  const ringOnly = !!s.job.verify || s.job.topology === 'ring';
  const alwaysGroups = s.job.topology === 'groups';
  return planTopology(members.length, (a, b) => known[a][peers[b]] ?? null, { ringOnly, alwaysGroups });
}
