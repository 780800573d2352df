/**
 * A throw-away certificate authority for the test bed (and tests): `openssl` makes a CA and one
 * server certificate for the given IP addresses and DNS names, in a folder the caller removes.
 *
 * Browsers are made to trust it by the public key, not by turning checks off: Chromium's
 * `--ignore-certificate-errors-spki-list=<base64 sha256 of the SubjectPublicKeyInfo>` accepts a chain
 * whose certificates carry one of the listed keys and still refuses every other bad certificate.
 * Node clients pass the CA file as `ca`.
 */
import { execFileSync } from 'node:child_process';
import { createHash, X509Certificate } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface TestCertificates {
  caCert: string;
  cert: string;
  key: string;
  /** base64(sha256(SPKI DER)) of the server key and of the CA key, for Chromium's SPKI list. */
  spkiHashes: string[];
}

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** The base64 sha256 of a PEM certificate's public key (SubjectPublicKeyInfo, DER). */
export function spkiHash(certPem: string | Buffer): string {
  const spki = new X509Certificate(certPem).publicKey.export({ type: 'spki', format: 'der' });
  return createHash('sha256').update(spki).digest('base64');
}

/** Makes `ca.pem`, `server.pem`, `server-key.pem` in `dir` for `ips` and `names` (valid 2 days). */
export function makeTestCertificates(dir: string, opts: { ips?: string[]; names?: string[] } = {}): TestCertificates {
  const ips = opts.ips ?? ['127.0.0.1'];
  const names = opts.names ?? ['localhost'];
  const san = [...ips.map((ip) => `IP:${ip}`), ...names.map((n) => `DNS:${n}`)].join(',');
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(
    [
      'req',
      '-x509',
      ...ec,
      '-keyout',
      'ca-key.pem',
      '-out',
      'ca.pem',
      '-days',
      '2',
      '-subj',
      '/CN=tabswarm test CA',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  openssl(['req', ...ec, '-keyout', 'server-key.pem', '-out', 'server.csr', '-subj', `/CN=${names[0] ?? ips[0]}`], dir);
  writeFileSync(
    join(dir, 'server.ext'),
    `subjectAltName=${san}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n`,
  );
  openssl(
    [
      'x509',
      '-req',
      '-in',
      'server.csr',
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca-key.pem',
      '-CAcreateserial',
      '-out',
      'server.pem',
      '-days',
      '2',
      '-extfile',
      'server.ext',
    ],
    dir,
  );
  const caCert = join(dir, 'ca.pem');
  const cert = join(dir, 'server.pem');
  return {
    caCert,
    cert,
    key: join(dir, 'server-key.pem'),
    spkiHashes: [spkiHash(readFileSync(cert)), spkiHash(readFileSync(caCert))],
  };
}
