/**
 * The coordinator's defences against hostile visitors, assembled from the CLI's options: the machine's
 * abuse policy (penalties, ready deadline), reconnect secrets, and the socket gate (origin allowlist,
 * bans and per-address caps). See docs/threat-model.md.
 */
import { DEFAULT_TRUST_POLICY, type CoordinatorState, type TrustPolicy } from '../machine/machine';
import { joinRefusedUntil } from '../machine/penalties';
import { Admission, type JoinMode } from '../runtime/admission';
import type { ScreenResult } from '../runtime/control-channel';
import type { ClientMessage } from '../../core/protocol/tab-messages';
import { CloseCode } from '../../core/protocol/coordinator-messages';
import { InviteStore } from '../admin/invites';
import { SocketGate } from '../runtime/socket-gate';
import { WorkerSecrets } from '../runtime/worker-secrets';

export interface TrustOptions {
  /** Overrides of DEFAULT_TRUST_POLICY. */
  policy?: Partial<TrustPolicy>;
  /** Origins allowed on /ws and /peer besides the coordinator's own. */
  allowedOrigins?: string[];
  maxSocketsPerAddress?: number;
  joinsPerMinute?: number;
  /** Event-log rows kept per run. */
  maxEvents?: number;
  /** `open` (default): anyone may join; `invite`: only tabs opened from an invite link. */
  join?: JoinMode;
}

export const DEFAULT_MAX_SOCKETS_PER_ADDRESS = 64;
export const DEFAULT_JOINS_PER_MINUTE = 60;
export const DEFAULT_MAX_EVENTS = 100_000;

export interface Trust {
  policy: TrustPolicy;
  secrets: WorkerSecrets;
  gate: SocketGate;
  maxEvents: number;
  invites: InviteStore;
  admission: Admission;
  /** The control channel's look at each message (join rate, reconnect secret, invite). */
  screen: (addr: string, msg: ClientMessage) => ScreenResult;
  close(): void;
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
    bannedUntil: (addr) => joinRefusedUntil(state(), Date.now(), { addr }),
    onRefused,
  });
  const secrets = WorkerSecrets.forDataDir(dataDir);
  const invites = new InviteStore(dataDir);
  const admission = new Admission(options?.join ?? 'open', invites);
  const screen = (addr: string, msg: ClientMessage): ScreenResult => {
    if (msg.type !== 'hello') return { ok: true, msg };
    if (!gate.allowJoin(addr)) {
      const message = 'too many joins from this address; try again in a minute';
      return { ok: false, code: 'banned', closeCode: CloseCode.banned, message };
    }
    const vetted = secrets.vet(msg);
    if (vetted.type !== 'hello') return { ok: true, msg: vetted };
    const admitted = admission.screen(vetted, state());
    if (!admitted.ok) return { ok: false, code: 'no_invite', closeCode: CloseCode.noInvite, message: admitted.message };
    return admitted;
  };
  return {
    policy,
    secrets,
    gate,
    maxEvents: options?.maxEvents ?? DEFAULT_MAX_EVENTS,
    invites,
    admission,
    screen,
    close: () => invites.close(),
  };
}
