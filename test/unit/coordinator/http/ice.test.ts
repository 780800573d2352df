import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION } from '../../../../core/protocol/control-fields';
import { heartbeatSchema } from '../../../../core/protocol/tab-messages';
import { welcomeSchema } from '../../../../core/protocol/coordinator-messages';
import {
  checkIceUrl,
  iceConfigFor,
  iceSettingsFrom,
  iceSummary,
  IceConfigError,
  turnRestCredential,
} from '../../../../coordinator/http/ice';

/** The reference: the HMAC computed by openssl, not by node:crypto. */
function opensslHmacSha1Base64(secret: string, message: string): string {
  const raw = execFileSync('openssl', ['dgst', '-sha1', '-hmac', secret, '-binary'], { input: message });
  return raw.toString('base64');
}

describe('TURN REST API credentials (coturn use-auth-secret)', () => {
  it('username is "<expiry>:<workerId>", password base64(HMAC-SHA1(secret, username)) as openssl computes it', () => {
    for (const [secret, worker, expiry] of [
      ['north', 'w-1', 1_700_000_000],
      ['a much longer shared secret with spaces', 'tab_42.x', 4_102_444_800],
    ] as const) {
      const c = turnRestCredential(secret, worker, expiry);
      expect(c.username).toBe(`${expiry}:${worker}`);
      expect(c.credential).toBe(opensslHmacSha1Base64(secret, c.username));
    }
  });

  it('each welcome mints a credential that expires ttl after now; a later welcome gets a fresh one', () => {
    const settings = iceSettingsFrom({ turn: ['turn:203.0.113.2:3478'], turnSecret: 's3cret', turnTtl: 600 });
    const first = iceConfigFor(settings, 'w-1', 1_000_000_000_000)!;
    expect(first.credentialExpiresAt).toBe((1_000_000_000 + 600) * 1000);
    expect(first.iceServers[0]).toMatchObject({ urls: ['turn:203.0.113.2:3478'], username: '1000000600:w-1' });
    const later = iceConfigFor(settings, 'w-1', 1_000_000_700_000)!;
    expect(later.iceServers[0].username).toBe('1000001300:w-1');
    expect(later.iceServers[0].credential).not.toBe(first.iceServers[0].credential);
    // What the machine sends must pass the protocol (the tab validates the same schema).
    expect(
      welcomeSchema
        .safeParse({
          v: PROTOCOL_VERSION,
          type: 'welcome',
          runId: 'r',
          workerId: 'w-1',
          job: undefined,
          ice: first,
        })
        .error?.issues.some((i) => i.path[0] === 'ice'),
    ).toBe(false);
  });
});

describe('ICE flags', () => {
  it('accepts STUN/TURN URLs of RFC 7064/7065 shape and refuses others in one line', () => {
    for (const ok of ['stun:203.0.113.2', 'stun:stun.example.org:3478', 'stuns:[2001:db8::1]:5349'])
      expect(checkIceUrl(ok, 'stun')).toBe(ok);
    for (const ok of [
      'turn:t.example.org:3478?transport=udp',
      'turns:t.example.org:5349?transport=tcp',
      'turn:1.2.3.4',
    ])
      expect(checkIceUrl(ok, 'turn')).toBe(ok);
    for (const bad of ['http://x', 'turn:', 'turn:x:99999', 'turn:x?transport=sctp', 'turn://x:3478', 'turn:x y'])
      expect(() => checkIceUrl(bad, 'turn')).toThrow(IceConfigError);
    expect(() => checkIceUrl('turn:x:3478', 'stun')).toThrow(/--stun "turn:x:3478" is not a STUN URL/);
  });

  it('checks the combination of flags', () => {
    const turn = ['turn:203.0.113.2:3478'];
    expect(() => iceSettingsFrom({ turn })).toThrow(/--turn needs credentials/);
    expect(() => iceSettingsFrom({ turn, turnSecret: 'a', turnUser: 'u', turnPassword: 'p' })).toThrow(/exclude/);
    expect(() => iceSettingsFrom({ turn, turnUser: 'u' })).toThrow(/go together/);
    expect(() => iceSettingsFrom({ turnSecret: 'a' })).toThrow(/no --turn URL/);
    expect(() => iceSettingsFrom({ turn, turnSecret: '' })).toThrow(/empty/);
    expect(() => iceSettingsFrom({ turn, turnSecret: 'a', turnTtl: 5 })).toThrow(/--turn-ttl/);
    expect(() => iceSettingsFrom({ turn, turnUser: 'u', turnPassword: 'p', turnTtl: 600 })).toThrow(/--turn-ttl only/);
    expect(() => iceSettingsFrom({ relayOnly: true, stun: ['stun:x'] })).toThrow(/--relay-only needs/);
    const relay = iceSettingsFrom({ turn, turnUser: 'u', turnPassword: 'p', relayOnly: true });
    expect(iceConfigFor(relay, 'w', 0)).toEqual({
      iceServers: [{ urls: turn, username: 'u', credential: 'p' }],
      iceTransportPolicy: 'relay',
      credentialExpiresAt: null,
    });
  });

  it('no flags: no ICE config at all (host candidates); STUN only: no credential', () => {
    expect(iceConfigFor(iceSettingsFrom({}), 'w', 0)).toBeNull();
    expect(iceConfigFor(iceSettingsFrom({ stun: ['stun:203.0.113.2:3478'] }), 'w', 0)).toEqual({
      iceServers: [{ urls: ['stun:203.0.113.2:3478'] }],
      iceTransportPolicy: 'all',
      credentialExpiresAt: null,
    });
  });

  it('the summary names servers and policy but never a secret or password', () => {
    const rest = iceSettingsFrom({ turn: ['turn:t:3478'], turnSecret: 'TOPSECRET', relayOnly: true });
    const stat = iceSettingsFrom({ turn: ['turn:t:3478'], turnUser: 'alice', turnPassword: 'HUNTER2' });
    expect(iceSummary(rest)).toMatch(/turn:t:3478.*ephemeral.*relay only/);
    expect(iceSummary(rest)).not.toContain('TOPSECRET');
    expect(iceSummary(stat)).not.toContain('HUNTER2');
  });
});

describe('heartbeat ICE fields', () => {
  const base = { v: PROTOCOL_VERSION, type: 'heartbeat', runId: 'r', workerId: 'w' };
  it('accepts candidate types and an ICE error; refuses unknown types and long texts', () => {
    expect(
      heartbeatSchema.safeParse({
        ...base,
        peerLinks: [{ peer: 'w2', local: 'relay', remote: 'srflx' }],
        iceError: null,
      }).success,
    ).toBe(true);
    expect(
      heartbeatSchema.safeParse({ ...base, peerLinks: [{ peer: 'w2', local: 'tunnel', remote: 'host' }] }).success,
    ).toBe(false);
    expect(heartbeatSchema.safeParse({ ...base, iceError: 'x'.repeat(301) }).success).toBe(false);
  });
});
