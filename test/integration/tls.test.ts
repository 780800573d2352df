/**
 * HTTPS on the one port (`--tls-cert/--tls-key`): the web app, /api, /ws (wss) and /peer answer over
 * TLS with a certificate from a test CA made by openssl; plain HTTP gets no answer; bad cert/key
 * files end startup with one line naming the file. ICE settings reach a tab's welcome only.
 */
import { chmodSync, copyFileSync, existsSync, writeFileSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { get as httpsGet } from 'node:https';
import { join } from 'node:path';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTestCertificates, type TestCertificates } from '../../tools/netbed/test-ca';
import { runCoordinatorCli, SETPRIV, spawnCoordinator, type CoordinatorProcess } from '../support/coordinator-process';
import { makeTempDir, sharedFakeDataset } from '../support/fake-dataset';

function httpsText(url: string, ca: Buffer | string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsGet(url, { ca, timeout: 10_000 }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timeout')));
  });
}

function welcomeOver(url: string, ca: Buffer | string, workerId: string | null = null): Promise<Record<string, any>> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { ca, handshakeTimeout: 10_000 });
    const timer = setTimeout(() => reject(new Error('no welcome in 10 s')), 10_000);
    ws.on('open', () =>
      ws.send(
        JSON.stringify({
          v: 1,
          type: 'hello',
          runId: null,
          workerId,
          peerId: `p${Math.random().toString(36).slice(2, 10)}`,
          adapter: { vendor: 'x', architecture: 'y', description: '' },
          haveStep: null,
          haveHash: null,
        }),
      ),
    );
    ws.on('message', (data) => {
      const msg = JSON.parse(data.toString());
      if (msg.type === 'welcome') {
        clearTimeout(timer);
        ws.close();
        resolve(msg);
      }
    });
    ws.on('error', reject);
  });
}

describe('coordinator over HTTPS', () => {
  const dir = makeTempDir('tabswarm-tls-');
  /** A one-file web build, so `/` has a known answer whether or not `dist/` is built. */
  const webDir = makeTempDir('tabswarm-tls-web-');
  const WEB_PAGE = '<!doctype html><title>tls test page</title>\n';
  let certs: TestCertificates;
  let coordinator: CoordinatorProcess;
  let ca: Buffer;

  beforeAll(async () => {
    certs = makeTestCertificates(dir, { ips: ['127.0.0.1'], names: ['localhost'] });
    ca = (await import('node:fs')).readFileSync(certs.caCert);
    writeFileSync(join(webDir, 'index.html'), WEB_PAGE);
    coordinator = await spawnCoordinator({
      extraArgs: [
        '--dist',
        webDir,
        '--tls-cert',
        certs.cert,
        '--tls-key',
        certs.key,
        '--turn',
        'turn:203.0.113.2:3478?transport=udp',
        '--turn-secret',
        'S3CRET-turn',
        '--turn-ttl',
        '600',
      ],
    });
  });
  afterAll(async () => {
    await coordinator?.stop();
  });

  it('serves /api, the web app and /peer over TLS, wss on /ws, and nothing in plain text', async () => {
    expect(coordinator.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const health = await httpsText(`${coordinator.url}/api/health`, ca);
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body).origin).toBe(coordinator.url);
    expect((await httpsText(`${coordinator.url}/peer/peerjs/id`, ca)).status).toBe(200);
    const page = await httpsText(`${coordinator.url}/`, ca);
    expect(page.status).not.toBe(500);
    expect(page).toEqual({ status: 200, body: WEB_PAGE });
    // An untrusted client (no CA) is refused by its own TLS check: the certificate really is the test CA's.
    await expect(httpsText(`${coordinator.url}/api/health`, '')).rejects.toThrow();
    // Plain HTTP on the same port gets no HTTP answer.
    const plain = await new Promise<string>((resolve) => {
      const req = httpGet(`${coordinator.url.replace('https:', 'http:')}/api/health`, { timeout: 5000 }, (res) =>
        resolve(`status ${res.statusCode}`),
      );
      req.on('error', (e) => resolve(`error ${e.message}`));
      req.on('timeout', () => req.destroy(new Error('timeout')));
    });
    expect(plain).toMatch(/^(error|status 400)/);
  });

  it('hands each tab its own TURN REST credential in welcome, and none in /api/status or the output', async () => {
    const wss = `${coordinator.url.replace('https:', 'wss:')}/ws`;
    const before = Math.floor(Date.now() / 1000);
    const a = await welcomeOver(wss, ca);
    const b = await welcomeOver(wss, ca);
    expect(a.ice.iceTransportPolicy).toBe('all');
    const [server] = a.ice.iceServers;
    expect(server.urls).toEqual(['turn:203.0.113.2:3478?transport=udp']);
    const [expiry, user] = server.username.split(':');
    expect(user).toBe(a.workerId);
    expect(Number(expiry)).toBeGreaterThanOrEqual(before + 600);
    expect(Number(expiry)).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + 600);
    expect(b.ice.iceServers[0].credential).not.toBe(server.credential);
    const status = await httpsText(`${coordinator.url}/api/status`, ca);
    for (const secret of ['S3CRET-turn', server.credential, b.ice.iceServers[0].credential]) {
      expect(status.body).not.toContain(secret);
      expect(coordinator.output).not.toContain(secret);
    }
  });
});

describe('bad TLS files end startup with one line naming the file', () => {
  const dir = makeTempDir('tabswarm-tls-bad-');
  const other = makeTempDir('tabswarm-tls-other-');
  let good: TestCertificates;
  let stranger: TestCertificates;
  beforeAll(() => {
    good = makeTestCertificates(dir);
    stranger = makeTestCertificates(other);
  });
  const run = (cert: string, key: string, as: Parameters<typeof runCoordinatorCli>[1] = {}) =>
    runCoordinatorCli(
      [
        'coordinator',
        '--port',
        '0',
        '--data-dir',
        join(dir, 'data'),
        '--admin-token',
        't',
        '--dataset',
        sharedFakeDataset(),
        '--tls-cert',
        cert,
        '--tls-key',
        key,
      ],
      as,
    );
  function expectOneLine(result: { code: number | null; stderr: string; stdout: string }, pattern: RegExp) {
    expect(result.code).toBe(1);
    const lines = result.stderr.trim().split('\n');
    expect(lines, result.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(pattern);
    expect(result.stdout).not.toMatch(/listening on/);
  }

  it('missing, not PEM, unreadable, and not a pair', async () => {
    expectOneLine(await run(join(dir, 'nope.pem'), good.key), /--tls-cert .*nope\.pem: no such file/);
    const garbage = join(dir, 'garbage.pem');
    writeFileSync(garbage, 'hello, not a certificate\n');
    expectOneLine(await run(garbage, good.key), /--tls-cert .*garbage\.pem: not PEM/);
    expectOneLine(await run(good.cert, garbage), /--tls-key .*garbage\.pem: not PEM/);
    expectOneLine(await run(good.cert, stranger.key), /--tls-key .*server-key\.pem does not belong to the certificate/);
    const locked = join(dir, 'locked.pem');
    copyFileSync(good.key, locked);
    chmodSync(locked, 0);
    // Root reads any file: as root, run the coordinator as root without that override (it still reads the
    // checkout, wherever it lives, as its owner). The TLS files are read before the data dir and the dataset.
    const asRoot = process.getuid?.() === 0;
    if (asRoot && !existsSync(SETPRIV)) {
      if (process.env.CI)
        throw new Error(`${SETPRIV} (util-linux) is missing: the unreadable-key case needs it as root`);
      return;
    }
    expectOneLine(
      await run(good.cert, locked, { withoutReadOverride: asRoot }),
      /--tls-key .*locked\.pem: not readable/,
    );
  });
});
