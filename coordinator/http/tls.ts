/**
 * HTTPS for the one port: reads and checks a PEM certificate chain and private key before anything
 * listens, so a wrong file ends startup with one line naming the file and the problem instead of a
 * TLS handshake failure in every volunteer's browser.
 *
 * Also the reverse-proxy view of a request (`requestOrigin`): behind Caddy or nginx terminating TLS,
 * the browser's origin is in `X-Forwarded-Proto`/`X-Forwarded-Host`, which anyone can also send, so
 * they are read only when the operator says a proxy is in front (`--trust-proxy`).
 */
import { createPrivateKey, X509Certificate, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';

export interface TlsMaterial {
  cert: Buffer;
  key: Buffer;
}

export class TlsConfigError extends Error {}

function readPem(path: string, what: string, label: RegExp): Buffer {
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'not readable (permission denied)' : code;
    throw new TlsConfigError(`${what} ${path}: ${why}`);
  }
  if (!label.test(bytes.toString('latin1')))
    throw new TlsConfigError(`${what} ${path}: not PEM (expected a "-----BEGIN …-----" block)`);
  return bytes;
}

/**
 * Reads `certPath` and `keyPath` (PEM) and checks that the key is the certificate's. The chain may
 * hold intermediates after the leaf; the leaf (first block) must match the key.
 */
export function loadTls(certPath: string, keyPath: string, now: Date = new Date()): TlsMaterial {
  const cert = readPem(certPath, '--tls-cert', /-----BEGIN CERTIFICATE-----/);
  const key = readPem(keyPath, '--tls-key', /-----BEGIN [A-Z ]*PRIVATE KEY-----/);
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(cert);
  } catch (error) {
    throw new TlsConfigError(`--tls-cert ${certPath}: not a readable certificate (${(error as Error).message})`);
  }
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(key);
  } catch (error) {
    const message = (error as Error).message;
    const hint = /passphrase|encrypted/i.test(message) ? 'the key is encrypted; give an unencrypted key' : message;
    throw new TlsConfigError(`--tls-key ${keyPath}: not a readable private key (${hint})`);
  }
  if (!leaf.checkPrivateKey(privateKey))
    throw new TlsConfigError(`--tls-key ${keyPath} does not belong to the certificate in ${certPath} (not a pair)`);
  if (new Date(leaf.validTo).getTime() < now.getTime())
    throw new TlsConfigError(`--tls-cert ${certPath}: the certificate expired on ${leaf.validTo}`);
  return { cert, key };
}

/**
 * The origin a browser used for `req`: `publicUrl` if configured; else, with `trustProxy`, the
 * first X-Forwarded-Proto/X-Forwarded-Host values; else this server's own scheme and Host header.
 */
export function requestOrigin(
  req: IncomingMessage,
  opts: { tls: boolean; publicUrl?: string; trustProxy?: boolean },
): string {
  if (opts.publicUrl) return new URL(opts.publicUrl).origin;
  const first = (value: string | string[] | undefined) =>
    (Array.isArray(value) ? value[0] : value)?.split(',')[0]?.trim() || undefined;
  let proto = opts.tls ? 'https' : 'http';
  let host = first(req.headers.host) ?? 'localhost';
  if (opts.trustProxy) {
    const fwdProto = first(req.headers['x-forwarded-proto']);
    if (fwdProto === 'http' || fwdProto === 'https') proto = fwdProto;
    host = first(req.headers['x-forwarded-host']) ?? host;
  }
  try {
    return new URL(`${proto}://${host}`).origin;
  } catch {
    return `${proto}://localhost`;
  }
}

/** Checks `--public-url`: an absolute http(s) URL without path, query or credentials. */
export function checkPublicUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TlsConfigError(
      `--public-url ${JSON.stringify(value.slice(0, 80))} is not a URL (e.g. https://train.example.org)`,
    );
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:')
    throw new TlsConfigError(`--public-url ${value}: must start with https:// (or http:// for localhost)`);
  if (url.username || url.password || url.search || url.hash || (url.pathname !== '/' && url.pathname !== ''))
    throw new TlsConfigError(`--public-url ${value}: give only scheme, host and port (no path, query or user)`);
  return url.origin;
}
