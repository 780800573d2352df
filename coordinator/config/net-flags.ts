/**
 * The coordinator's network flags (HTTPS, reverse proxy, STUN/TURN), kept out of cli.ts: they add
 * themselves to a commander command and turn into the `CoordinatorConfig` fields `tls`, `ice`,
 * `publicUrl`, `trustProxy`. Every mistake is one line naming the flag or the file (StartupError).
 */
import type { Command } from 'commander';
import { IceConfigError, iceSettingsFrom, iceSummary, type IceSettings } from '../http/ice';
import { StartupError } from './startup-config';
import { checkPublicUrl, loadTls, TlsConfigError, type TlsMaterial } from '../http/tls';

export interface NetFlags {
  tlsCert?: string;
  tlsKey?: string;
  publicUrl?: string;
  trustProxy?: boolean;
  stun?: string[];
  turn?: string[];
  turnSecret?: string;
  turnUser?: string;
  turnPassword?: string;
  turnTtl?: string;
  relayOnly?: boolean;
}

export interface NetConfig {
  tls?: TlsMaterial;
  ice?: IceSettings;
  publicUrl?: string;
  trustProxy: boolean;
  /** For the startup line: ICE servers and policy, no credentials. */
  summary: string;
}

const collect = (value: string, previous: string[] = []) => [...previous, value];

export function addNetOptions(command: Command): Command {
  return command
    .option('--tls-cert <file>', 'PEM certificate chain: serve HTTPS/WSS on the port (with --tls-key)')
    .option('--tls-key <file>', 'PEM private key of --tls-cert')
    .option('--public-url <url>', 'the URL volunteers open, when a reverse proxy terminates TLS in front')
    .option('--trust-proxy', 'honour X-Forwarded-Proto/Host (only behind a proxy you run)')
    .option('--stun <url>', 'STUN server for the tabs, e.g. stun:turn.example.org:3478 (repeatable)', collect)
    .option('--turn <url>', 'TURN server, turn:/turns: with ?transport=udp|tcp (repeatable)', collect)
    .option(
      '--turn-secret <secret>',
      "coturn's static-auth-secret: ephemeral per-tab credentials (or $TABSWARM_TURN_SECRET)",
    )
    .option('--turn-user <name>', 'static TURN username (with --turn-password)')
    .option('--turn-password <password>', 'static TURN password (or $TABSWARM_TURN_PASSWORD)')
    .option('--turn-ttl <seconds>', 'lifetime of an ephemeral TURN credential (default 86400)')
    .option('--relay-only', 'tabs use TURN relays only (iceTransportPolicy "relay"), for diagnosis and tests');
}

export function netConfigFrom(flags: NetFlags, env: NodeJS.ProcessEnv = process.env): NetConfig {
  try {
    if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined))
      throw new TlsConfigError('--tls-cert and --tls-key go together');
    const tls = flags.tlsCert !== undefined ? loadTls(flags.tlsCert, flags.tlsKey!) : undefined;
    const ttl = flags.turnTtl === undefined ? undefined : /^\d{1,9}$/.test(flags.turnTtl) ? Number(flags.turnTtl) : -1;
    const ice = iceSettingsFrom({
      stun: flags.stun,
      turn: flags.turn,
      turnSecret: flags.turnSecret ?? (flags.turn?.length ? env.TABSWARM_TURN_SECRET || undefined : undefined),
      turnUser: flags.turnUser,
      turnPassword: flags.turnPassword ?? (flags.turnUser !== undefined ? env.TABSWARM_TURN_PASSWORD : undefined),
      turnTtl: ttl,
      relayOnly: flags.relayOnly,
    });
    return {
      tls,
      ice,
      publicUrl: flags.publicUrl !== undefined ? checkPublicUrl(flags.publicUrl) : undefined,
      trustProxy: flags.trustProxy ?? false,
      summary: iceSummary(ice),
    };
  } catch (error) {
    if (error instanceof TlsConfigError || error instanceof IceConfigError) throw new StartupError(error.message);
    throw error;
  }
}
