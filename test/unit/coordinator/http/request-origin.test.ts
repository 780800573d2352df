import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { checkPublicUrl, requestOrigin } from '../../../../coordinator/http/tls';

const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;

describe('the origin a browser used, behind a reverse proxy or not', () => {
  const proxied = req({
    host: '127.0.0.1:8080',
    'x-forwarded-proto': 'https',
    'x-forwarded-host': 'train.example.org',
  });
  it('ignores X-Forwarded-* unless --trust-proxy', () => {
    expect(requestOrigin(proxied, { tls: false })).toBe('http://127.0.0.1:8080');
    expect(requestOrigin(proxied, { tls: false, trustProxy: true })).toBe('https://train.example.org');
    expect(requestOrigin(req({ host: 'a:1', 'x-forwarded-proto': 'gopher' }), { tls: true, trustProxy: true })).toBe(
      'https://a:1',
    );
  });
  it('--public-url wins; it must be a bare origin', () => {
    expect(requestOrigin(proxied, { tls: false, publicUrl: 'https://x.example.org' })).toBe('https://x.example.org');
    expect(checkPublicUrl('https://x.example.org:8443/')).toBe('https://x.example.org:8443');
    expect(() => checkPublicUrl('https://x.example.org/app')).toThrow(/no path/);
    expect(() => checkPublicUrl('ftp://x')).toThrow(/https/);
    expect(() => checkPublicUrl('x')).toThrow(/not a URL/);
  });
});
