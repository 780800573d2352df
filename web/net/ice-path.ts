/**
 * Which way a tab's peer connections go, from the browser's own ICE view:
 * - `selectedPairTypes`: the candidate types (host, srflx, prflx, relay) of the pair ICE selected for
 *   a link, read from `getStats()` (`relay` on either side means the link goes through TURN);
 * - `probeIce`: gathers candidates once with the coordinator's ICE configuration, without any peer,
 *   and turns `icecandidateerror` into a sentence. A TURN server answers a wrong or expired credential
 *   with error 401, which the browser reports within a second or two; without this probe a relay-only
 *   tab would only see its ring connects time out.
 */
import type { CandidateType } from '../../core/protocol/tab-messages';
import type { IceConfigMessage } from '../../core/protocol/coordinator-messages';

const TYPES: readonly string[] = ['host', 'srflx', 'prflx', 'relay'];

/** The subset of `RTCStatsReport` read here and in link-rtt.ts (a Map in unit tests). */
export interface StatsLike {
  forEach(callback: (value: Record<string, unknown>, key: string) => void): void;
}

/**
 * The candidate pair ICE selected for a link (the transport's `selectedCandidatePairId`), else the
 * first succeeded pair `fallback` accepts (for browsers that do not name it); with the report by id.
 */
export function selectedPair(
  stats: StatsLike,
  fallback: (pair: Record<string, unknown>) => boolean,
): { pair: Record<string, unknown> | undefined; byId: Map<string, Record<string, unknown>> } {
  const byId = new Map<string, Record<string, unknown>>();
  const selectedIds: string[] = [];
  stats.forEach((value, key) => {
    byId.set(key, value);
    if (value.type === 'transport' && typeof value.selectedCandidatePairId === 'string')
      selectedIds.push(value.selectedCandidatePairId);
  });
  let pair: Record<string, unknown> | undefined;
  for (const id of selectedIds) pair ??= byId.get(id);
  if (!pair) {
    for (const value of byId.values()) {
      if (value.type === 'candidate-pair' && value.state === 'succeeded' && fallback(value)) {
        pair = value;
        break;
      }
    }
  }
  return { pair, byId };
}

/** Local and remote candidate types of the selected (or nominated, succeeded) pair; null when none yet. */
export function selectedPairTypes(stats: StatsLike): { local: CandidateType; remote: CandidateType } | null {
  const { pair, byId } = selectedPair(stats, (p) => p.nominated === true);
  if (!pair) return null;
  const local = byId.get(String(pair.localCandidateId))?.candidateType;
  const remote = byId.get(String(pair.remoteCandidateId))?.candidateType;
  if (typeof local !== 'string' || typeof remote !== 'string' || !TYPES.includes(local) || !TYPES.includes(remote))
    return null;
  return { local: local as CandidateType, remote: remote as CandidateType };
}

/** The sentence for one `icecandidateerror` (RFC 8489/8656 error codes; 701 is the browser's "unreachable"). */
export function iceErrorText(errorCode: number, url: string, errorText = ''): string {
  const where = url ? ` at ${url}` : '';
  if (errorCode === 401) return `TURN authentication failed (401 Unauthorized${where}): wrong or expired credentials`;
  if (errorCode === 403) return `TURN server refused the request (403 Forbidden${where})`;
  if (errorCode === 486) return `TURN allocation quota reached (486${where})`;
  if (errorCode === 701) return `TURN/STUN server unreachable${where}`;
  return `ICE server error ${errorCode}${where}${errorText ? `: ${errorText}` : ''}`;
}

export interface IceProbeResult {
  /** Candidate types gathered. */
  types: CandidateType[];
  /** Why ICE cannot work as configured, or null. */
  error: string | null;
}

/**
 * Gathers candidates with `config` (a throw-away RTCPeerConnection with one data channel) until
 * gathering completes or `timeoutMs` passes. An authentication error wins over other errors; a
 * relay-only configuration that gathered no relay candidate is an error too.
 */
export async function probeIce(config: IceConfigMessage, timeoutMs = 8000): Promise<IceProbeResult> {
  const hasTurn = config.iceServers.some((s) => s.urls.some((u) => u.startsWith('turn')));
  if (!hasTurn && config.iceTransportPolicy === 'all') return { types: [], error: null };
  const pc = new RTCPeerConnection({
    iceServers: config.iceServers.map((s) => ({ ...s })),
    iceTransportPolicy: config.iceTransportPolicy,
  });
  const types = new Set<CandidateType>();
  const errors: string[] = [];
  let authError: string | null = null;
  try {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      pc.addEventListener('icecandidate', (e) => {
        const type = e.candidate?.type;
        if (type && TYPES.includes(type)) types.add(type as CandidateType);
        if (!e.candidate) {
          clearTimeout(timer);
          resolve();
        }
      });
      pc.addEventListener('icecandidateerror', (e) => {
        const err = e as RTCPeerConnectionIceErrorEvent;
        const text = iceErrorText(err.errorCode, err.url, err.errorText);
        if (err.errorCode === 401) {
          authError ??= text;
          clearTimeout(timer);
          resolve();
        } else errors.push(text);
      });
      pc.createDataChannel('probe');
      void pc
        .createOffer()
        .then((offer) => pc.setLocalDescription(offer))
        .catch((error: Error) => {
          errors.push(`ICE setup failed: ${error.message}`);
          resolve();
        });
    });
  } finally {
    pc.close();
  }
  const list = [...types];
  if (authError) return { types: list, error: authError };
  if (hasTurn && !types.has('relay')) {
    const why = errors[0] ?? `no answer within ${timeoutMs} ms`;
    return { types: list, error: `no TURN relay candidate: ${why}` };
  }
  return { types: list, error: null };
}
