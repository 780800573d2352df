/**
 * Composes a running coordinator: store → state (new run or restored) → executor → control channel,
 * HTTP server, PeerJS signaling → listen. The CLI calls this; so can a test that wants one in-process.
 */
import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { VerificationService, type Recompute } from './trust/verification-service';
import { VerifierClient } from './trust/verifier-client';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { effectiveDatasetSize, type JobSpec } from '../core/training/job';
import { initialState, restoreState, type CoordinatorState, type DurableState } from './machine/machine';
import { parameterLayout } from '../core/training/model-spec';
import { adminRoutes } from './admin/admin-routes';
import { ControlChannel } from './runtime/control-channel';
import { iceConfigFor, type IceSettings } from './http/ice';
import type { TlsMaterial } from './http/tls';
import { MachineExecutor } from './runtime/executor';
import { mountPeerSignaling } from './http/peer-signaling';
import { CoordinatorServer } from './http/server';
import { CoordinatorMetrics } from './admin/server-metrics';
import { staticFiles } from './http/static-files';
import { SqliteStore } from './runtime/store';
import { inviteRoutes } from './admin/invite-routes';
import type { ServedDataset } from './datasets/served-dataset';
import { setUpTrust, type Trust, type TrustOptions } from './trust/trust';

export interface CoordinatorConfig {
  host: string;
  /** 0 picks a free port (read it back from `url`). */
  port: number;
  dataDir: string;
  job: JobSpec;
  /** The job's dataset, loaded (served-dataset.ts). */
  dataset: ServedDataset;
  adminToken: string;
  /** The Vite build to serve. */
  distDir: string;
  /** Called when the store fails (default: print one line and exit 1). */
  onFatal?: (error: Error) => void;
  /** Where warn/error machine logs go (default: stderr). */
  log?: (line: string) => void;
  /** Where start-up information goes (default: stdout). */
  info?: (line: string) => void;
  /** Abuse policy, origin allowlist, per-address caps, event-log retention (trust.ts). */
  trust?: TrustOptions;
  /** STUN/TURN servers and credentials handed to each tab in its welcome (ice.ts). Default: none. */
  ice?: IceSettings;
  /** PEM certificate chain and key (tls.ts): serve everything over HTTPS/WSS on the one port. */
  tls?: TlsMaterial;
  /** The URL volunteers open when a reverse proxy fronts this server (printed, and in /api/health). */
  publicUrl?: string;
  /** Honour X-Forwarded-Proto/Host from a reverse proxy (only behind one you run). */
  trustProxy?: boolean;
  /**
   * The verifier that recomputes checked commits; default: the verifier process (verifier-client.ts) on
   * the dataset's `verifierData`, started whenever the job verifies (newcomers are checked even where the
   * job's own rate is 0: adaptive-trust.ts).
   */
  recompute?: { run: Recompute; close: () => void };
}

export interface RunningCoordinator {
  /** `http://host:port`, or `https://…` with `tls` (no trailing slash). */
  url: string;
  port: number;
  info: { runId: string; resumed: boolean; step: number; datasetSize: number; supersededRunId: string | null };
  executor: MachineExecutor;
  store: SqliteStore;
  /** Stops listening, closes sockets, flushes and closes the store. */
  close(): Promise<void>;
}

/**
 * A run is resumed only with the same job over the same data: the key covers the validated job and
 * the training set's content hash (a different dataset would make the stored record meaningless).
 */
function jobKeyOf(job: JobSpec, dataset: ServedDataset): string {
  return createHash('sha256')
    .update(JSON.stringify({ job, ...dataset.contentKey }))
    .digest('hex');
}

/** Bytes of a snapshot with params and two moment buffers, plus room for the JSON header. */
function checkpointLimit(job: JobSpec): number {
  return parameterLayout(job.model).totalElements * 4 * 3 + 1024 * 1024;
}

/**
 * At most `burst` lines per `windowMs`, then one line saying how many were dropped: a client
 * sending garbage must not be able to fill the operator's terminal (the event log keeps them all).
 */
function rateLimitedLog(write: (line: string) => void, burst = 20, windowMs = 10_000): (line: string) => void {
  let windowStart = 0;
  let lines = 0;
  let dropped = 0;
  return (line) => {
    const now = Date.now();
    if (now - windowStart > windowMs) {
      if (dropped > 0)
        write(
          `tabswarm: ${dropped} more log lines in the last ${windowMs / 1000} s not shown (see the event log: GET /api/admin/events)`,
        );
      windowStart = now;
      lines = 0;
      dropped = 0;
    }
    if (lines < burst) {
      lines += 1;
      write(line);
    } else dropped += 1;
  };
}

/** Opens the run in the store: a new run's initial state, or the durable state of the run it resumes. */
function openState(store: SqliteStore, config: CoordinatorConfig, policy: Trust['policy']) {
  const fullSize = config.dataset.trainCount;
  const datasetSize = effectiveDatasetSize(config.job, fullSize);
  const opened = store.openRun(config.job, jobKeyOf(config.job, config.dataset), datasetSize);
  try {
    const restored: CoordinatorState = opened.durable
      ? restoreState(opened.durable as DurableState, policy)
      : initialState(config.job, fullSize, opened.runId, policy);
    // Which steps are recomputed is drawn from this secret (machine/verification.ts): not predictable by tabs.
    const state: CoordinatorState = { ...restored, verifySalt: randomBytes(16).toString('hex') };
    return { opened, state, datasetSize };
  } catch (error) {
    throw Object.assign(
      new Error(
        `cannot resume run ${opened.runId} from ${config.dataDir}: ${(error as Error).message} (start with a fresh --data-dir)`,
      ),
      { code: 'ERESUME' },
    );
  }
}

function defaultOnFatal(error: Error): void {
  process.stderr.write(
    `tabswarm: fatal: ${error.message}; exiting (a restart resumes from the last committed transaction)\n`,
  );
  process.exit(1);
}

/** Listens on `port` (0: any free one) and `host`; rejects with the listen error (EADDRINUSE, …). */
function listen(http: Server, port: number, host: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onError = (error: Error) => {
      http.off('listening', onListening);
      reject(error);
    };
    const onListening = () => {
      http.off('error', onError);
      resolve();
    };
    http.once('error', onError);
    http.once('listening', onListening);
    http.listen(port, host);
  });
}

/** `http://host:port` for a listening address; a wildcard address becomes the machine's own name for itself. */
function urlOf(address: AddressInfo, tls: boolean): string {
  const wildcard = address.address === '0.0.0.0' || address.address === '::';
  const hostForUrl = wildcard ? 'localhost' : address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `${tls ? 'https' : 'http'}://${hostForUrl}:${address.port}`;
}

/** The handle `startCoordinator` returns: its address, what it opened, and one idempotent `close`. */
function running(
  http: Server,
  opened: Omit<RunningCoordinator['info'], 'step'>,
  parts: { executor: MachineExecutor; store: SqliteStore; tls: boolean; stop: () => void; release: () => void },
): RunningCoordinator {
  const address = http.address() as AddressInfo;
  let closed: Promise<void> | null = null;
  return {
    url: urlOf(address, parts.tls),
    port: address.port,
    info: { ...opened, step: parts.executor.state.lastCommit.step },
    executor: parts.executor,
    store: parts.store,
    close() {
      closed ??= new Promise<void>((resolve) => {
        parts.stop();
        http.close(() => resolve());
        http.closeAllConnections();
      }).finally(() => {
        parts.release();
        parts.store.close();
      });
      return closed;
    },
  };
}

export async function startCoordinator(config: CoordinatorConfig): Promise<RunningCoordinator> {
  const log = rateLimitedLog(config.log ?? ((line: string) => process.stderr.write(`${line}\n`)));
  const store = new SqliteStore(config.dataDir);
  let verifier: { service: VerificationService; close: () => void } | null = null;
  try {
    const machine = startMachine(config, store, log);
    const { executor, trust, opened } = machine;
    const admin = adminRouter(config, opened.runId, store, executor, machine.metrics, trust);
    verifier = config.job.verify ? await startVerifier(config, executor, log) : null;
    const server = httpServer(config, store, machine, admin, verifier?.service);
    const release = () => {
      trust.close();
      verifier?.close();
    };
    await listen(server.http, config.port, config.host).catch((error: unknown) => {
      server.peer?.close();
      admin.close();
      release();
      throw error;
    });
    server.http.on('error', (error) => log(`tabswarm error: http server: ${error.message}`));
    executor.start();
    executor.dispatch({ kind: 'tick' });
    const stop = () => {
      admin.close();
      executor.stop();
      machine.control.closeAll();
      server.peer?.close();
    };
    return running(
      server.http,
      {
        runId: opened.runId,
        resumed: opened.resumed,
        datasetSize: machine.datasetSize,
        supersededRunId: opened.supersededRunId,
      },
      { executor, store, tls: config.tls !== undefined, release, stop },
    );
  } catch (error) {
    verifier?.close();
    store.close();
    throw error;
  }
}

/** The sockets the metrics count, known once the control channel and the server exist. */
interface Links {
  control: ControlChannel | null;
  server: CoordinatorServer | null;
  metrics: CoordinatorMetrics | null;
}

/**
 * The machine and what feeds it: the trust policy, the run's state opened in the store, the metrics,
 * the executor of the machine's actions, and the control channel whose events it takes.
 */
function startMachine(config: CoordinatorConfig, store: SqliteStore, log: (line: string) => void) {
  const links: Links = { control: null, server: null, metrics: null };
  const trust = setUpTrust(
    withOwnOrigins(config),
    config.dataDir,
    () => executor.state,
    (reason) => links.metrics?.messageErrors.inc(1, { code: reason }),
  );
  const { opened, state, datasetSize } = openState(store, config, trust.policy);
  const metrics = new CoordinatorMetrics(
    () => executor.state,
    () => ({ sockets: links.control?.size ?? 0, peers: links.server?.peer?.clientCount ?? 0 }),
  );
  links.metrics = metrics;
  const executor: MachineExecutor = newExecutor(config, state, {
    store,
    runId: opened.runId,
    metrics,
    trust,
    log,
    control: () => control,
  });
  const control = new ControlChannel({ dispatch: (event) => executor.dispatch(event), metrics, screen: trust.screen });
  links.control = control;
  return { trust, opened, datasetSize, metrics, executor, control, links };
}

/** The HTTP server on the machine (the one API router, static files, /ws) with PeerJS signalling mounted. */
function httpServer(
  config: CoordinatorConfig,
  store: SqliteStore,
  machine: ReturnType<typeof startMachine>,
  admin: ReturnType<typeof adminRouter>,
  verification: VerificationService | undefined,
): CoordinatorServer {
  const server = new CoordinatorServer({
    runId: machine.opened.runId,
    store,
    executor: machine.executor,
    metrics: machine.metrics,
    control: machine.control,
    staticFiles: staticFiles(config.distDir),
    datasetRoute: (req, res) => config.dataset.route(req, res),
    admin,
    maxCheckpointBytes: checkpointLimit(config.job),
    verification,
    gate: machine.trust.gate,
    tls: config.tls,
    publicUrl: config.publicUrl,
    trustProxy: config.trustProxy,
  });
  server.peer = mountPeerSignaling(server.http);
  machine.links.server = server;
  return server;
}

/** The recomputing verifier and the upload service in front of it (machine/verification.ts). */
async function startVerifier(
  config: CoordinatorConfig,
  executor: MachineExecutor,
  log: (line: string) => void,
): Promise<{ service: VerificationService; close: () => void }> {
  const recompute = config.recompute ?? (await verifierProcess(config));
  const service = new VerificationService({
    executor,
    recompute: recompute.run,
    dir: join(config.dataDir, 'verify'),
    maxBytes: checkpointLimit(config.job),
    onLog: (level, message) => log(`tabswarm ${level}: ${message}`),
  });
  return { service, close: () => recompute.close() };
}

/** The verifier child process on the job's IDX dataset, as `recompute`. */
async function verifierProcess(config: CoordinatorConfig): Promise<{ run: Recompute; close: () => void }> {
  const client = await VerifierClient.start({ job: config.job, dataset: config.dataset.verifierData });
  // Information, not a problem: stdout (stderr is for warnings and the one line of a failed start).
  (config.info ?? ((line: string) => process.stdout.write(`${line}\n`)))(
    `tabswarm: verifier ready on ${client.adapter} (a full step in ${Math.round(client.stepMs)} ms)`,
  );
  return {
    run: async (req) => {
      const r = await client.recompute(req);
      const plain = (k: { values: Float64Array; mass: Float64Array }) => ({
        values: Array.from(k.values),
        mass: Array.from(k.mass),
      });
      return {
        own: r.own.map(plain),
        params: plain(r.params),
        ...(r.outer ? { outer: plain(r.outer) } : {}),
        ...(r.moments ? { moments: r.moments.map(plain) } : {}),
        startOk: r.startOk,
        ms: r.ms,
      };
    },
    close: () => void client.close(),
  };
}

/**
 * The trust options with what the server itself knows: the `--public-url` that volunteers open behind
 * a proxy is an allowed `Origin` on /ws and /peer without being listed again.
 */
function withOwnOrigins(config: CoordinatorConfig): TrustOptions {
  const publicOrigin = config.publicUrl ? [new URL(config.publicUrl).origin] : [];
  return {
    ...config.trust,
    allowedOrigins: [...(config.trust?.allowedOrigins ?? []), ...publicOrigin],
  };
}

/** The one admin router, with the invite routes of the server's admission. */
function adminRouter(
  config: CoordinatorConfig,
  runId: string,
  store: SqliteStore,
  executor: MachineExecutor,
  metrics: CoordinatorMetrics,
  trust: Trust,
) {
  return adminRoutes({
    runId,
    adminToken: config.adminToken,
    store,
    state: () => executor.state,
    dispatch: (action) => executor.dispatch({ kind: 'admin', action }),
    subscribe: (listener) => executor.subscribe(listener),
    onRequest: (route, result) => metrics.adminRequests.inc(1, { action: route, result }),
    invites: inviteRoutes({ invites: trust.invites, join: trust.admission.mode, state: () => executor.state }),
  });
}

/** The executor of the machine's actions, with the server's additions to a `welcome` (ICE, reconnect secret). */
function newExecutor(
  config: CoordinatorConfig,
  state: CoordinatorState,
  parts: {
    store: SqliteStore;
    runId: string;
    metrics: CoordinatorMetrics;
    trust: Trust;
    log: (line: string) => void;
    control: () => ControlChannel;
  },
): MachineExecutor {
  const { trust, log } = parts;
  return new MachineExecutor(state, {
    store: parts.store,
    runId: parts.runId,
    metrics: parts.metrics,
    sockets: {
      send: (conn, text) => parts.control().send(conn, text),
      close: (conn, code, reason) => parts.control().close(conn, code, reason),
    },
    onLog: (level, event, data) => log(`tabswarm ${level}: ${event} ${JSON.stringify(data).slice(0, 500)}`),
    onFatal: config.onFatal ?? defaultOnFatal,
    onWelcome: (msg) => {
      const ice = config.ice ? iceConfigFor(config.ice, msg.workerId, Date.now()) : null;
      return { ...msg, ...(ice ? { ice } : {}), secret: trust.secrets.issue(msg.runId, msg.workerId) };
    },
    maxEvents: trust.maxEvents,
  });
}
