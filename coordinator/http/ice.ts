/**
 * ICE configuration the coordinator hands each tab in its `welcome`: STUN and TURN servers, TURN
 * credentials, and the transport policy. Pure: plain flags in, a validated `IceSettings` out; the
 * per-tab credential is a function of the settings, the worker id and the clock.
 *
 * TURN credentials come in two kinds:
 * - static (`--turn-user`, `--turn-password`): the same for every tab;
 * - ephemeral (`--turn-secret`), coturn's "TURN REST API" (`use-auth-secret` + `static-auth-secret`):
 *   username `<expiry unix seconds>:<workerId>`, password base64(HMAC-SHA1(secret, username)).
 *   coturn recomputes the HMAC from its copy of the secret and refuses a username whose time is past,
 *   so the coordinator never has to tell coturn about a tab. Each welcome mints a new one, so a tab
 *   that reconnects after its credential expired gets a fresh one.
 *
 * Credentials are secrets: they travel only in the welcome of the tab they belong to; `iceSummary`
 * (for logs and the startup line) leaves them out.
 */
import { createHmac } from 'node:crypto';
import type { IceConfigMessage } from '../../core/protocol/coordinator-messages';

export type IceTransportPolicy = 'all' | 'relay';

export interface IceFlags {
  stun?: readonly string[];
  turn?: readonly string[];
  turnSecret?: string;
  turnUser?: string;
  turnPassword?: string;
  /** Lifetime of an ephemeral credential, seconds. */
  turnTtl?: number;
  relayOnly?: boolean;
}

export type TurnAuth =
  | { kind: 'none' }
  | { kind: 'static'; username: string; credential: string }
  | { kind: 'rest'; secret: string; ttlSeconds: number };

export interface IceSettings {
  stun: string[];
  turn: string[];
  auth: TurnAuth;
  policy: IceTransportPolicy;
}

/** What a tab gets in its `welcome`: `RTCConfiguration` fields, plus when its TURN credential stops working. */
export type IceConfig = IceConfigMessage;

/** Default lifetime of an ephemeral TURN credential: a day (a tab gets a new one on every reconnect). */
export const DEFAULT_TURN_TTL_SECONDS = 86_400;

export class IceConfigError extends Error {}

const HOST = String.raw`(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)`;
const PORT = String.raw`(?::(\d{1,5}))?`;
const STUN_URL = new RegExp(`^stuns?:${HOST}${PORT}$`);
const TURN_URL = new RegExp(String.raw`^turns?:${HOST}${PORT}(?:\?transport=(udp|tcp))?$`);

/** Checks one STUN or TURN URL (RFC 7064 / 7065 syntax); returns it unchanged or throws one line. */
export function checkIceUrl(url: string, kind: 'stun' | 'turn'): string {
  const pattern = kind === 'stun' ? STUN_URL : TURN_URL;
  const match = pattern.exec(url);
  const example = kind === 'stun' ? 'stun:stun.example.org:3478' : 'turn:turn.example.org:3478?transport=udp';
  if (!match) {
    throw new IceConfigError(
      `--${kind} ${JSON.stringify(url.slice(0, 80))} is not a ${kind.toUpperCase()} URL (e.g. ${example})`,
    );
  }
  if (match[1] !== undefined && (Number(match[1]) < 1 || Number(match[1]) > 65535))
    throw new IceConfigError(`--${kind} ${url}: the port must be in 1..65535`);
  return url;
}

/** Validates the flags as a whole; every mistake is one line naming the flag. */
export function iceSettingsFrom(flags: IceFlags): IceSettings {
  const stun = (flags.stun ?? []).map((u) => checkIceUrl(u, 'stun'));
  const turn = (flags.turn ?? []).map((u) => checkIceUrl(u, 'turn'));
  const hasStatic = flags.turnUser !== undefined || flags.turnPassword !== undefined;
  if (flags.turnSecret !== undefined && hasStatic)
    throw new IceConfigError('--turn-secret and --turn-user/--turn-password exclude each other: pick one');
  if (hasStatic && (flags.turnUser === undefined || flags.turnPassword === undefined))
    throw new IceConfigError('--turn-user and --turn-password go together');
  if (flags.turnSecret !== undefined && flags.turnSecret.length === 0)
    throw new IceConfigError('--turn-secret is empty');
  if ((flags.turnSecret !== undefined || hasStatic) && turn.length === 0)
    throw new IceConfigError('TURN credentials given but no --turn URL');
  if (turn.length > 0 && flags.turnSecret === undefined && !hasStatic)
    throw new IceConfigError(
      '--turn needs credentials: --turn-secret (coturn use-auth-secret) or --turn-user/--turn-password',
    );
  if (flags.turnTtl !== undefined && flags.turnSecret === undefined)
    throw new IceConfigError('--turn-ttl only applies to --turn-secret credentials');
  const ttl = flags.turnTtl ?? DEFAULT_TURN_TTL_SECONDS;
  if (!Number.isInteger(ttl) || ttl < 60 || ttl > 30 * 86_400)
    throw new IceConfigError('--turn-ttl is a whole number of seconds from 60 to 2592000 (30 days)');
  if (flags.relayOnly && turn.length === 0) throw new IceConfigError('--relay-only needs at least one --turn server');
  const auth: TurnAuth =
    flags.turnSecret !== undefined
      ? { kind: 'rest', secret: flags.turnSecret, ttlSeconds: ttl }
      : hasStatic
        ? { kind: 'static', username: flags.turnUser!, credential: flags.turnPassword! }
        : { kind: 'none' };
  return { stun, turn, auth, policy: flags.relayOnly ? 'relay' : 'all' };
}

/** coturn's TURN REST API credential for `userId`, valid until `expiresAtSeconds` (unix seconds). */
export function turnRestCredential(
  secret: string,
  userId: string,
  expiresAtSeconds: number,
): { username: string; credential: string } {
  const username = `${expiresAtSeconds}:${userId}`;
  return { username, credential: createHmac('sha1', secret).update(username).digest('base64') };
}

/** The ICE configuration for one tab's welcome, at `nowMs`; null when nothing is configured (host candidates only). */
export function iceConfigFor(settings: IceSettings, workerId: string, nowMs: number): IceConfig | null {
  if (settings.stun.length === 0 && settings.turn.length === 0 && settings.policy === 'all') return null;
  const iceServers: IceConfig['iceServers'] = [];
  if (settings.stun.length > 0) iceServers.push({ urls: [...settings.stun] });
  let credentialExpiresAt: number | null = null;
  if (settings.turn.length > 0) {
    const auth = settings.auth;
    if (auth.kind === 'rest') {
      const expires = Math.floor(nowMs / 1000) + auth.ttlSeconds;
      iceServers.push({ urls: [...settings.turn], ...turnRestCredential(auth.secret, workerId, expires) });
      credentialExpiresAt = expires * 1000;
    } else if (auth.kind === 'static') {
      iceServers.push({ urls: [...settings.turn], username: auth.username, credential: auth.credential });
    }
  }
  return { iceServers, iceTransportPolicy: settings.policy, credentialExpiresAt };
}

/** One line for the startup message: servers and policy, never a credential. */
export function iceSummary(settings: IceSettings): string {
  if (settings.stun.length === 0 && settings.turn.length === 0) return 'ICE: host candidates only (no --stun/--turn)';
  const parts = [];
  if (settings.stun.length > 0) parts.push(`STUN ${settings.stun.join(' ')}`);
  if (settings.turn.length > 0) {
    const how =
      settings.auth.kind === 'rest'
        ? `ephemeral credentials, ttl ${settings.auth.ttlSeconds} s`
        : settings.auth.kind === 'static'
          ? 'static credentials'
          : 'no credentials';
    parts.push(`TURN ${settings.turn.join(' ')} (${how})`);
  }
  if (settings.policy === 'relay') parts.push('relay only');
  return `ICE: ${parts.join('; ')}`;
}
