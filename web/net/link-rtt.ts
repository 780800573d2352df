/**
 * WebRTC round-trip time of a tab's ring links, for the heartbeat's `peerRttMs` (shown on the admin
 * page). Read from `RTCPeerConnection.getStats()`: the candidate pair the transport selected (or, if
 * the browser does not name it, a nominated succeeded pair) carries `currentRoundTripTime` in seconds,
 * measured by ICE consent checks, so reading it costs no extra traffic.
 */
import type { Link } from './link';
import type { CandidateType } from '../../coordinator/core/protocol';
import { selectedPairTypes } from './ice-path';
import { DataConnectionLink } from './peer-link';

/** The subset of `RTCStatsReport` read here (a Map in unit tests). */
export interface StatsLike {
  forEach(callback: (value: Record<string, unknown>, key: string) => void): void;
}

/** Largest RTT a heartbeat may carry (the protocol rejects more). */
export const MAX_PEER_RTT_MS = 60_000;

/** The selected candidate pair's current RTT in ms (rounded to 0.1 ms), or null when none is known yet. */
export function selectedPairRttMs(stats: StatsLike): number | null {
  const byId = new Map<string, Record<string, unknown>>();
  const selectedIds = new Set<string>();
  stats.forEach((value, key) => {
    byId.set(key, value);
    if (value.type === 'transport' && typeof value.selectedCandidatePairId === 'string')
      selectedIds.add(value.selectedCandidatePairId);
  });
  let pair: Record<string, unknown> | undefined;
  for (const id of selectedIds) pair ??= byId.get(id);
  if (!pair) {
    for (const value of byId.values()) {
      if (
        value.type === 'candidate-pair' &&
        value.state === 'succeeded' &&
        (value.nominated === true || value.selected === true) &&
        typeof value.currentRoundTripTime === 'number'
      ) {
        pair = value;
        break;
      }
    }
  }
  return toRttMs(pair?.currentRoundTripTime);
}

function toRttMs(seconds: unknown): number | null {
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) return null;
  return Math.min(MAX_PEER_RTT_MS, Math.round(seconds * 10_000) / 10);
}

/** One link's RTT in ms, or null (not a WebRTC link, closed, or no stats yet). */
export async function linkRttMs(link: Link): Promise<number | null> {
  if (!(link instanceof DataConnectionLink) || !link.isOpen) return null;
  const pc = link.connection.peerConnection as RTCPeerConnection | undefined;
  if (!pc) return null;
  try {
    return selectedPairRttMs((await pc.getStats()) as unknown as StatsLike);
  } catch {
    return null;
  }
}

/** The selected candidate types of each open WebRTC link in `peers` (for the heartbeat's `peerLinks`). */
export async function linkPaths(
  peers: readonly { peer: string; link: Link }[],
): Promise<{ peer: string; local: CandidateType; remote: CandidateType }[]> {
  const paths = await Promise.all(
    peers.map(async ({ peer, link }) => {
      if (!(link instanceof DataConnectionLink) || !link.isOpen) return null;
      const pc = link.connection.peerConnection as RTCPeerConnection | undefined;
      if (!pc) return null;
      try {
        const types = selectedPairTypes((await pc.getStats()) as unknown as StatsLike);
        return types ? { peer, ...types } : null;
      } catch {
        return null;
      }
    }),
  );
  return paths.filter((p) => p !== null);
}

/** The MAX RTT over `links` (the slowest link paces a ring all-reduce), or null when none is known. */
export async function maxLinkRttMs(links: readonly Link[]): Promise<number | null> {
  const rtts = (await Promise.all(links.map(linkRttMs))).filter((r): r is number => r !== null);
  return rtts.length === 0 ? null : Math.max(...rtts);
}

/**
 * Hands out the last measured value synchronously (heartbeats are sent from a timer and must not wait)
 * and starts at most one new measurement per `take()`, none while one is still running. The first
 * heartbeat after a ring forms therefore carries null or the previous ring's value; the next one is fresh.
 */
export class LatestSample<T> {
  private last: T | null = null;
  private running = false;

  constructor(private readonly measure: () => Promise<T | null>) {}

  take(): T | null {
    if (!this.running) {
      this.running = true;
      this.measure().then(
        (rtt) => {
          this.last = rtt;
          this.running = false;
        },
        () => {
          this.last = null;
          this.running = false;
        },
      );
    }
    return this.last;
  }
}

/** The heartbeat's RTT sampler (see `LatestSample`). */
export class RoundTripSampler extends LatestSample<number> {}
