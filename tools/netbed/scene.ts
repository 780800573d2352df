/**
 * A whole scene on the test bed: the public segment with an HTTPS coordinator (certificate from a
 * test CA) and coturn, and one headless Chromium per NATed home, trusting the test CA by its key.
 * Shared by the browser acceptance test, `tabswarm swarm --netbed` and the net bench.
 *
 * ```ts
 * const scene = await Scene.start({ homes, job, datasetDir, distDir });
 * const tab = await scene.openTab(0);            // a volunteer page in home 0, autostarted
 * const status = await scene.api('/api/status'); // through a Unix socket into the public segment
 * await scene.close();                           // browsers, coordinator, coturn, namespaces
 * ```
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { request } from 'node:https';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import type { Browser, Page } from 'playwright-core';
import { type StatusResponse, statusResponseSchema } from '../../core/protocol/views';
import { type IceConfig, iceConfigFor, iceSettingsFrom } from '../../coordinator/http/ice';
import { launchSwarmChromium } from '../swarm/chromium';
import { COORDINATOR_IP, Netbed, NetbedError, TURN_IP, type HomeSpec } from './netbed';
import { makeTestCertificates, type TestCertificates } from './test-ca';

const REPO_ROOT = resolve(import.meta.dirname, '../..');
export const COORDINATOR_PORT = 8443;
export const TURN_PORT = 3478;
/** The ICE servers the scene's coordinator hands out: coturn in the public segment, over UDP. */
const STUN_URL = `stun:${TURN_IP}:${TURN_PORT}`;
const TURN_URL = `turn:${TURN_IP}:${TURN_PORT}?transport=udp`;

export interface SceneOptions {
  homes: HomeSpec[];
  /** Job object (written to a job file); default the CLI's default job. */
  job?: Record<string, unknown>;
  datasetDir: string;
  distDir: string;
  /** Tabs use TURN relays only. */
  relayOnly?: boolean;
  /** The secret the coordinator mints credentials with (default coturn's): a different one gives 401s. */
  coordinatorTurnSecret?: string;
  log?: (line: string) => void;
}

export interface SceneTab {
  home: number;
  browser: Browser;
  page: Page;
}

function waitForLine(
  stream: NodeJS.ReadableStream,
  pattern: RegExp,
  what: string,
  timeoutMs: number,
): Promise<RegExpExecArray> {
  return new Promise((resolveLine, reject) => {
    let seen = '';
    const timer = setTimeout(
      () => reject(new NetbedError(`${what} did not start in ${timeoutMs / 1000} s: ${seen.slice(-400)}`)),
      timeoutMs,
    );
    const lines = createInterface({ input: stream });
    lines.on('line', (line) => {
      seen += `${line}\n`;
      const match = pattern.exec(line);
      if (match) {
        clearTimeout(timer);
        lines.removeAllListeners('line');
        lines.on('line', () => {});
        resolveLine(match);
      }
    });
  });
}

export class Scene {
  readonly tabs: SceneTab[] = [];
  readonly url: string;
  adminToken = randomBytes(12).toString('hex');
  private proxySocket = '';
  private ca: Buffer | null = null;
  private output = '';
  /** coturn's shared secret (credentials minted with it work). */
  private turnSecret = '';

  private constructor(
    readonly bed: Netbed,
    readonly certs: TestCertificates,
    private readonly opts: SceneOptions,
  ) {
    this.url = `https://${COORDINATOR_IP}:${COORDINATOR_PORT}`;
  }

  static async start(opts: SceneOptions): Promise<Scene> {
    const bed = await Netbed.create(opts.homes, { log: opts.log });
    try {
      const certs = makeTestCertificates(bed.dir, { ips: [COORDINATOR_IP], names: ['coordinator.netbed.test'] });
      const scene = new Scene(bed, certs, opts);
      const secret = randomBytes(16).toString('hex');
      scene.turnSecret = secret;
      await scene.startCoturn(secret);
      await scene.startCoordinator(opts.coordinatorTurnSecret ?? secret);
      return scene;
    } catch (error) {
      await bed.close();
      throw error;
    }
  }

  private async startCoturn(secret: string): Promise<void> {
    const dir = join(this.bed.dir, 'coturn');
    mkdirSync(dir);
    // Listens and relays on the test bed's TURN address only; no TLS (the tabs use turn: over UDP);
    // peers limited to the public segment.
    const turn = this.bed.spawn(this.bed.publicNs, 'turnserver', [
      '-n',
      '--no-cli',
      '--listening-ip',
      TURN_IP,
      '--relay-ip',
      TURN_IP,
      '--listening-port',
      String(TURN_PORT),
      '--use-auth-secret',
      '--static-auth-secret',
      secret,
      '--realm',
      'netbed.test',
      '--no-tls',
      '--no-dtls',
      '--no-multicast-peers',
      `--allowed-peer-ip=${TURN_IP.replace(/\.\d+$/, '.0')}-${TURN_IP.replace(/\.\d+$/, '.255')}`,
      '--userdb',
      join(dir, 'turndb'),
      '--pidfile',
      join(dir, 'turn.pid'),
      '--log-file',
      'stdout',
      '--simple-log',
    ]);
    turn.stderr!.on('data', (d: Buffer) => (this.output += d.toString()));
    await waitForLine(turn.stdout!, /Total General servers/, 'coturn (turnserver)', 15_000);
    turn.stdout!.resume();
  }

  private async startCoordinator(turnSecret: string): Promise<void> {
    const dir = this.bed.dir;
    const args = [
      '--import',
      'tsx',
      join(REPO_ROOT, 'coordinator/cli.ts'),
      'coordinator',
      '--host',
      COORDINATOR_IP,
      '--port',
      String(COORDINATOR_PORT),
      '--data-dir',
      join(dir, 'data'),
      '--dataset',
      this.opts.datasetDir,
      '--dist',
      this.opts.distDir,
      '--admin-token',
      this.adminToken,
      '--tls-cert',
      this.certs.cert,
      '--tls-key',
      this.certs.key,
      '--stun',
      STUN_URL,
      '--turn',
      TURN_URL,
      '--turn-secret',
      turnSecret,
    ];
    if (this.opts.relayOnly) args.push('--relay-only');
    if (this.opts.job) {
      const jobFile = join(dir, 'job.json');
      writeFileSync(jobFile, JSON.stringify(this.opts.job));
      args.push('--job', jobFile);
    }
    const child = this.bed.spawn(this.bed.publicNs, process.execPath, args, {
      cwd: REPO_ROOT,
      env: { ...process.env, FORCE_COLOR: '0' },
    });
    child.stderr!.on('data', (d: Buffer) => (this.output += d.toString()));
    const exited = new Promise<never>((_, reject) =>
      child.once('exit', (code) =>
        reject(new NetbedError(`coordinator exited (${code}) before listening: ${this.output.slice(-400)}`)),
      ),
    );
    await Promise.race([waitForLine(child.stdout!, /listening on https:/, 'the coordinator', 60_000), exited]);
    child.stdout!.on('data', (d: Buffer) => (this.output += d.toString()));
    this.ca = readFileSync(this.certs.caCert);
    this.proxySocket = await this.bed.unixProxy(this.bed.publicNs, COORDINATOR_IP, COORDINATOR_PORT);
  }

  /** What the coordinator and coturn printed on stderr (and the coordinator on stdout). */
  get logs(): string {
    return this.output;
  }

  /**
   * Polls /api/status every `pollMs` until `check` holds and returns that status; after `timeoutMs`
   * throws naming `what`, with the last status and the end of the logs.
   */
  async statusUntil(
    check: (status: StatusResponse) => boolean,
    what: string,
    timeoutMs: number,
    pollMs = 250,
  ): Promise<StatusResponse> {
    const end = performance.now() + timeoutMs;
    let last: StatusResponse | null = null;
    while (performance.now() < end) {
      // Checked against the wire schema: a test bed run is also a check of what the coordinator sends.
      last = statusResponseSchema.parse(await this.api<unknown>('/api/status'));
      if (check(last)) return last;
      await new Promise((r) => setTimeout(r, pollMs));
    }
    throw new NetbedError(`never ${what}; last status: ${JSON.stringify(last)}\n${this.output.slice(-2000)}`);
  }

  /**
   * The newest `count` lines of the coordinator's event log without the per-step ones (step, commit,
   * heartbeat): rounds, failures, time-outs, charges — what a bench prints to show what a run waited for.
   */
  async eventLines(count: number): Promise<string[]> {
    const { events } = await this.api<{ events: { at: number; level: string; event: string; data: unknown }[] }>(
      '/api/admin/events?limit=1000',
    );
    return events
      .filter((e) => !['step', 'commit', 'heartbeat'].includes(e.event))
      .slice(-count)
      .map(
        (e) =>
          `${new Date(e.at).toISOString().slice(11, 23)} ${e.level} ${e.event} ${JSON.stringify(e.data).slice(0, 240)}`,
      );
  }

  /** GET (or POST with `body`) a coordinator API path, over HTTPS verified against the test CA. */
  api<T = unknown>(path: string, body?: unknown): Promise<T> {
    if (!this.ca) throw new NetbedError('the coordinator has not started');
    return new Promise<T>((resolveBody, reject) => {
      const req = request(
        {
          socketPath: this.proxySocket,
          host: COORDINATOR_IP,
          path,
          method: body === undefined ? 'GET' : 'POST',
          ca: this.ca!,
          timeout: 10_000,
          headers: {
            authorization: `Bearer ${this.adminToken}`,
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
        },
        (res) => {
          let text = '';
          res.on('data', (d: Buffer) => (text += d.toString()));
          res.on('end', () =>
            res.statusCode === 200
              ? resolveBody(JSON.parse(text) as T)
              : reject(new Error(`${path}: ${res.statusCode} ${text}`)),
          );
        },
      );
      req.on('error', reject);
      req.on('timeout', () => req.destroy(new Error(`${path}: no answer in 10 s`)));
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  }

  /** Launches Chromium inside home `home` and opens the volunteer page there (autostart, elastic). */
  openTab(home: number, query: Record<string, string> = {}): Promise<SceneTab> {
    const params = new URLSearchParams({ autostart: '1', mode: 'elastic', ...query });
    return this.openPage(home, `/?${params}`);
  }

  /** Launches Chromium inside home `home` and opens `path` of the coordinator's site (e.g. a harness page of the served build). */
  async openPage(home: number, path: string): Promise<SceneTab> {
    const ns = this.bed.homes[home]?.ns;
    if (!ns) throw new NetbedError(`no home ${home}`);
    const browser = await launchSwarmChromium({
      wrap: (executable) => this.bed.wrapper(ns, executable),
      // Trust the test CA's and the server's key, and nothing else that is wrong.
      args: [`--ignore-certificate-errors-spki-list=${this.certs.spkiHashes.join(',')}`],
    });
    const page = await (await browser.newContext()).newPage();
    await page.goto(`${this.url}${path}`);
    const tab = { home, browser, page };
    this.tabs.push(tab);
    return tab;
  }

  /**
   * The ICE configuration the coordinator would put in the welcome of worker `id` (its STUN and TURN
   * servers, a fresh coturn credential, relay-only if the scene is), for pages that join the signaling
   * server without the volunteer app (bench:net's allreduce harness).
   */
  iceConfig(id: string): Pick<IceConfig, 'iceServers' | 'iceTransportPolicy'> {
    const settings = iceSettingsFrom({
      stun: [STUN_URL],
      turn: [TURN_URL],
      turnSecret: this.turnSecret,
      relayOnly: this.opts.relayOnly,
    });
    const config = iceConfigFor(settings, id, Date.now());
    if (!config) throw new NetbedError('no ICE configuration');
    return { iceServers: config.iceServers, iceTransportPolicy: config.iceTransportPolicy };
  }

  async close(): Promise<void> {
    await Promise.all(this.tabs.map((t) => t.browser.close().catch(() => {})));
    await this.bed.close();
  }
}
