/**
 * The coordinator's defences against hostile visitors, assembled from the CLI's options: the machine's
 * abuse policy (penalties, ready deadline), reconnect secrets, and the socket gate (origin allowlist,
 * bans and per-address caps). See docs/threat-model.md.
 */
import { bannedAddresses, DEFAULT_TRUST_POLICY, type CoordinatorState, type TrustPolicy } from './core/machine';
import { SocketGate } from './socket-gate';
import { WorkerSecrets } from './worker-secrets';

export interface TrustOptions {
  /** Overrides of DEFAULT_TRUST_POLICY. */
  policy?: Partial<TrustPolicy>;
  /** Origins allowed on /ws and /peer besides the coordinator's own. */
  allowedOrigins?: string[];
  maxSocketsPerAddress?: number;
  joinsPerMinute?: number;
  /** Event-log rows kept per run. */
  maxEvents?: number;
}

export const DEFAULT_MAX_SOCKETS_PER_ADDRESS = 64;
export const DEFAULT_JOINS_PER_MINUTE = 60;
export const DEFAULT_MAX_EVENTS = 100_000;

export interface Trust {
  policy: TrustPolicy;
  secrets: WorkerSecrets;
  gate: SocketGate;
  maxEvents: number;
}

export function setUpTrust(
  options: TrustOptions | undefined,
  dataDir: string,
  state: () => CoordinatorState,
  onRefused: (reason: string) => void,
): Trust {
  const policy = { ...DEFAULT_TRUST_POLICY, ...options?.policy };
  const gate = new SocketGate({
    allowedOrigins: options?.allowedOrigins ?? [],
    maxSocketsPerAddress: options?.maxSocketsPerAddress ?? DEFAULT_MAX_SOCKETS_PER_ADDRESS,
    joinsPerMinute: options?.joinsPerMinute ?? DEFAULT_JOINS_PER_MINUTE,
    bannedUntil: (addr) => bannedAddresses(state(), Date.now()).get(addr) ?? null,
    onRefused,
  });
  return {
    policy,
    secrets: WorkerSecrets.forDataDir(dataDir),
    gate,
    maxEvents: options?.maxEvents ?? DEFAULT_MAX_EVENTS,
  };
}
