/** The WebSocket gate's pure parts: origins, per-address socket caps, join rate, bans. */
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { checkOrigin, normalizeOrigin, parseOriginList } from '../../../../coordinator/runtime/origin';
import { clientAddress, SocketGate } from '../../../../coordinator/runtime/socket-gate';

function request(headers: Record<string, string>, remoteAddress = '127.0.0.1', encrypted = false): IncomingMessage {
  return { headers, socket: { remoteAddress, encrypted } } as unknown as IncomingMessage;
}
const socket = () => new EventEmitter() as unknown as Duplex;

describe('origin allowlist', () => {
  it.each<[Record<string, string>, string[], boolean, string]>([
    [{ host: 'h:8080', origin: 'http://h:8080' }, [], true, 'its own origin'],
    [{ host: 'h:8080', origin: 'http://H:8080/' }, [], true, 'its own origin, written differently'],
    [{ host: 'h:8080' }, [], true, 'no Origin (not a browser)'],
    [{ host: 'h:8080', origin: 'https://evil.example' }, [], false, 'a foreign site'],
    [{ host: 'h:8080', origin: 'https://h:8080' }, [], false, 'the same host over another scheme'],
    [{ host: 'h:8080', origin: 'https://tabs.example.org' }, ['https://tabs.example.org'], true, 'an allowed origin'],
    [{ host: 'h:8080', origin: 'null' }, [], false, 'an opaque origin (sandboxed frame, file:)'],
  ])('%j with %j → %s (%s)', (headers, allowed, ok) => {
    expect(checkOrigin(request(headers), allowed).ok).toBe(ok);
  });

  it('takes https for its own origin on a TLS socket', () => {
    expect(checkOrigin(request({ host: 'h', origin: 'https://h' }, '1.2.3.4', true), []).ok).toBe(true);
    expect(checkOrigin(request({ host: 'h', origin: 'http://h' }, '1.2.3.4', true), []).ok).toBe(false);
  });

  it('parses --allow-origin lists and refuses what is not an origin', () => {
    expect(parseOriginList(['https://a.example, http://b.example:81/', 'https://c.example'])).toEqual([
      'https://a.example',
      'http://b.example:81',
      'https://c.example',
    ]);
    expect(() => parseOriginList(['ftp://x'])).toThrow(/not an origin/);
    expect(() => parseOriginList(['example.org'])).toThrow(/not an origin/);
    expect(normalizeOrigin('HTTPS://Example.org:443')).toBe('https://example.org');
  });
});

describe('SocketGate', () => {
  const options = (over: Partial<ConstructorParameters<typeof SocketGate>[0]> = {}) => ({
    allowedOrigins: [],
    maxSocketsPerAddress: 2,
    joinsPerMinute: 3,
    bannedUntil: () => null,
    ...over,
  });

  it('caps open sockets per address and frees a slot when one closes', () => {
    const gate = new SocketGate(options());
    const [s1, s2, s3] = [socket(), socket(), socket()];
    expect(gate.admit(request({ host: 'h' }, '::ffff:192.0.2.1'), s1)).toEqual({ ok: true, addr: '192.0.2.1' });
    expect(gate.admit(request({ host: 'h' }, '192.0.2.1'), s2).ok).toBe(true);
    expect(gate.admit(request({ host: 'h' }, '192.0.2.1'), s3)).toMatchObject({ ok: false, status: 429 });
    expect(gate.admit(request({ host: 'h' }, '192.0.2.2'), socket()).ok).toBe(true); // another address
    (s1 as unknown as EventEmitter).emit('close');
    expect(gate.openFrom('192.0.2.1')).toBe(1);
    expect(gate.admit(request({ host: 'h' }, '192.0.2.1'), s3).ok).toBe(true);
  });

  it('refuses banned addresses and foreign origins, counting each reason', () => {
    const refused: string[] = [];
    const gate = new SocketGate(
      options({
        bannedUntil: (a) => (a === '192.0.2.9' ? Date.now() + 5000 : null),
        onRefused: (r) => refused.push(r),
      }),
    );
    expect(gate.admit(request({ host: 'h' }, '192.0.2.9'), socket())).toMatchObject({ ok: false, status: 403 });
    expect(gate.admit(request({ host: 'h', origin: 'https://evil.example' }), socket())).toMatchObject({
      ok: false,
      status: 403,
    });
    expect(refused).toEqual(['banned', 'origin']);
  });

  it('limits joins per address per minute, refilling with time', () => {
    let now = 0;
    const gate = new SocketGate(options({ now: () => now }));
    expect([1, 2, 3, 4].map(() => gate.allowJoin('a'))).toEqual([true, true, true, false]);
    expect(gate.allowJoin('b')).toBe(true);
    now += 20_000; // a third of a minute: one more join
    expect([gate.allowJoin('a'), gate.allowJoin('a')]).toEqual([true, false]);
  });

  it('reads the TCP peer, never a header', () => {
    expect(clientAddress(request({ 'x-forwarded-for': '203.0.113.7' }, '198.51.100.4'))).toBe('198.51.100.4');
  });
});
