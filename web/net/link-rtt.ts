/**
 * WebRTC round-trip time and path of a tab's ring links, for the heartbeat's `peerRttMs` and
 * `peerLinks` (shown on the admin page). Read from `RTCPeerConnection.getStats()`: the candidate pair the transport selected (or, if
 * the browser does not name it, a nominated succeeded pair) carries `currentRoundTripTime` in seconds,
 * measured by ICE consent checks, so reading it costs no extra traffic.
 */
import type { Link } from './link';
import type { PeerLink } from '../../core/protocol/tab-messages';
import { type StatsLike, selectedPair, selectedPairTypes } from './ice-path';
import { DataConnectionLink } from './peer-link';
import { StripedLink } from './striped-link';

/** Largest RTT a heartbeat may carry (the protocol rejects more). */
export const MAX_PEER_RTT_MS = 60_000;

/** The selected candidate pair's current RTT in ms (rounded to 0.1 ms), or null when none is known yet. */
export function selectedPairRttMs(stats: StatsLike): number | null {
  const { pair } = selectedPair(
    stats,
    (p) => (p.nominated === true || p.selected === true) && typeof p.currentRoundTripTime === 'number',
  );
  return toRttMs(pair?.currentRoundTripTime);
}

function toRttMs(seconds: unknown): number | null {
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) return null;
  return Math.min(MAX_PEER_RTT_MS, Math.round(seconds * 10_000) / 10);
}

/** What a heartbeat reports about the ring links: the slowest link's RTT and each link's path. */
export interface LinkStats {
  /** The MAX RTT over the links (the slowest link paces a ring all-reduce), or null when none is known. */
  peerRttMs: number | null;
  /** The selected candidate types and RTT of each open WebRTC link (e.g. `relay` through TURN). */
  peerLinks: PeerLink[];
}

/** `LinkStats` of `peers`, from ONE `getStats()` per open WebRTC link (other links add nothing). */
export async function linkStats(peers: readonly { peer: string; link: Link }[]): Promise<LinkStats> {
  const reports = await Promise.all(
    peers.map(async ({ peer, link: outer }) => {
      // A striped link's first stripe speaks for it: the stripes share the path.
      const link = outer instanceof StripedLink ? outer.links[0] : outer;
      if (!(link instanceof DataConnectionLink) || !link.isOpen) return null;
      const pc = link.connection.peerConnection as RTCPeerConnection | undefined;
      if (!pc) return null;
      try {
        return { peer, stats: (await pc.getStats()) as unknown as StatsLike };
      } catch {
        return null;
      }
    }),
  );
  const rtts: number[] = [];
  const peerLinks: LinkStats['peerLinks'] = [];
  for (const report of reports) {
    if (!report) continue;
    const rtt = selectedPairRttMs(report.stats);
    if (rtt !== null) rtts.push(rtt);
    const types = selectedPairTypes(report.stats);
    if (types) peerLinks.push({ peer: report.peer, ...types, rttMs: rtt });
  }
  return { peerRttMs: rtts.length === 0 ? null : Math.max(...rtts), peerLinks };
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
        (value) => {
          this.last = value;
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
