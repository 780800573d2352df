/**
 * A tab's ICE configuration over its life: the `RTCConfiguration` object every peer connection is
 * made from (PeerMesh reads it per connection), updated from each `welcome` (a reconnect brings a
 * fresh TURN credential), and the current ICE problem found by probing the TURN servers once per
 * new configuration (`probeIce`), for the page and the heartbeat.
 */
import type { IceConfigMessage } from '../../core/protocol/coordinator-messages';
import { probeIce } from './ice-path';

export class IceState {
  /** Mutated in place: connections made after an update use the new servers and credential. */
  readonly rtcConfig: RTCConfiguration = { iceServers: [], iceTransportPolicy: 'all' };
  private problem: string | null = null;
  private generation = 0;
  private appliedKey = '';

  constructor(
    private readonly onError: (message: string | null) => void,
    private readonly log: (level: 'info' | 'warn', text: string) => void,
  ) {}

  /** The current ICE problem (e.g. "TURN authentication failed …"), or null. */
  get error(): string | null {
    return this.problem;
  }

  /** Take the ICE configuration of a welcome (absent: host candidates only) and probe it. */
  apply(ice: IceConfigMessage | undefined): void {
    const key = JSON.stringify(ice ?? null);
    if (key === this.appliedKey) return;
    this.appliedKey = key;
    this.rtcConfig.iceServers = ice ? ice.iceServers.map((s) => ({ ...s, urls: [...s.urls] })) : [];
    this.rtcConfig.iceTransportPolicy = ice?.iceTransportPolicy ?? 'all';
    const generation = ++this.generation;
    if (!ice) {
      this.set(null);
      return;
    }
    void probeIce(ice).then(
      (result) => {
        if (generation !== this.generation) return;
        if (result.error) this.log('warn', result.error);
        else this.log('info', `ICE ready (${result.types.join(', ') || 'no candidates needed'})`);
        this.set(result.error);
      },
      (error: Error) => generation === this.generation && this.set(`ICE probe failed: ${error.message}`),
    );
  }

  private set(problem: string | null): void {
    if (problem === this.problem) return;
    this.problem = problem;
    this.onError(problem);
  }
}
