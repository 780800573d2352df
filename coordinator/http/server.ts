/**
 * One node:http server on one port:
 *   /                 the volunteer page, /admin/ the admin page, /assets/… (Vite build in dist/)
 *   /ws               the control WebSocket (ControlChannel → the machine)
 *   /peer/…           PeerJS signaling (REST + its WebSocket at /peer/peerjs)
 *   /api/dataset/…    the dataset (dataset.ts)
 *   /api/status, /api/audit, /api/job, /api/commits, /api/evaluations, /api/checkpoints/…,
 *   /api/admin/… (bearer token)
 *   /metrics          Prometheus text
 * The server is thin: every decision is the machine's; this file turns HTTP into events and reads
 * state for the read-only routes.
 */
import { createReadStream } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import { z } from 'zod';
import { jobPublic } from '../../core/training/job';
import { idSchema } from '../../core/protocol/control-fields';
import { positionAfter } from '../../core/training/sampler';
import { type DecodedSnapshot, decodeSnapshot, SnapshotError } from '../../core/state/snapshot';
import { nodeSha256 } from '../../node/sha256';
import { publicCheckpoint } from '../admin/admin-feed-projection';
import type { AdminRoutes } from '../admin/admin-routes';
import { auditRun, commitsPage, evaluationViews, MAX_COMMITS_PAGE, statusOf } from '../admin/audit';
import type { ControlChannel } from '../runtime/control-channel';
import { grantRefusal, type MachineExecutor } from '../runtime/executor';
import { HttpError, readBody, sendError, sendJson, sendText } from './http-util';
import type { PeerSignaling } from './peer-signaling';
import type { SocketGate } from '../runtime/socket-gate';
import type { CoordinatorMetrics } from '../admin/server-metrics';
import type { StaticFiles } from './static-files';
import { requestOrigin, type TlsMaterial } from './tls';
import type { CheckpointRow, Store } from '../runtime/store';
import type { VerificationService } from '../trust/verification-service';

export interface ServerDeps {
  runId: string;
  store: Store;
  executor: MachineExecutor;
  metrics: CoordinatorMetrics;
  control: ControlChannel;
  staticFiles: StaticFiles;
  datasetRoute: (req: IncomingMessage, res: ServerResponse) => boolean;
  /** The one router of /api/admin/* (admin-routes.ts), with its token guard. */
  admin: Pick<AdminRoutes, 'handle'>;
  /** Largest accepted checkpoint upload, in bytes. */
  maxCheckpointBytes: number;
  /** Uploads for recomputed spot checks (present when the job verifies). */
  verification?: Pick<VerificationService, 'handleUpload'>;
  /** Origin allowlist, bans and per-address caps for `/ws` and `/peer` upgrades (socket-gate.ts). */
  gate?: SocketGate;
  now?: () => number;
  /** PEM cert and key: serve HTTPS (and WSS) instead of HTTP on the one port (tls.ts). */
  tls?: TlsMaterial;
  /** See `requestOrigin` (tls.ts): the origin `/api/health` reports. */
  publicUrl?: string;
  trustProxy?: boolean;
}

/** `route` labels of `tabswarm_http_requests_total`: a fixed set, whatever paths clients ask for. */
const API_ROUTE_LABELS = new Set([
  'status',
  'audit',
  'job',
  'commits',
  'evaluations',
  'dataset',
  'checkpoints',
  'verify',
  'admin',
  'health',
]);

export function apiRouteLabel(path: string): string {
  const part = path.split('/')[2] ?? '';
  return API_ROUTE_LABELS.has(part) ? part : 'other';
}

const stepParam = z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

/** A non-negative integer query parameter written as plain digits (so "", "1e3", "0x10", "2.0" are refused). */
function integerQuery(url: URL, name: string, fallback: number, min: number, max: number): number {
  const raw = url.searchParams.get(name);
  if (raw === null) return fallback;
  const value = /^\d{1,15}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!(value >= min && value <= max)) {
    throw new HttpError(
      400,
      'bad_request',
      `${name} must be an integer from ${min} to ${max}, not "${raw.slice(0, 40)}"`,
    );
  }
  return value;
}

export class CoordinatorServer {
  readonly http: Server;
  peer: PeerSignaling | null = null;
  private readonly now: () => number;

  constructor(private readonly deps: ServerDeps) {
    this.now = deps.now ?? Date.now;
    const onRequest = (req: IncomingMessage, res: ServerResponse) => {
      this.handleRequest(req, res).catch((error: unknown) => this.fail(res, error));
    };
    this.http = deps.tls
      ? createHttpsServer({ cert: deps.tls.cert, key: deps.tls.key }, onRequest)
      : createServer(onRequest);
    this.http.on('upgrade', (req, socket, head) => this.handleUpgrade(req, socket, head));
    this.http.on('clientError', (_error, socket) => {
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
      else socket.destroy();
    });
  }

  private handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const pathname = safePathname(req.url);
    if (this.deps.gate && pathname !== null && (pathname === '/ws' || pathname.startsWith('/peer'))) {
      const verdict = this.deps.gate.admit(req, socket);
      if (!verdict.ok) {
        const text = verdict.status === 429 ? 'Too Many Requests' : 'Forbidden';
        socket.end(
          `HTTP/1.1 ${verdict.status} ${text}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(verdict.message)}\r\n\r\n${verdict.message}`,
        );
        return;
      }
    }
    if (pathname === '/ws') {
      this.deps.control.handleUpgrade(req, socket, head);
      return;
    }
    if (pathname && this.peer?.handleUpgrade(req, socket, head, pathname)) return;
    socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
  }

  private fail(res: ServerResponse, error: unknown): void {
    if (error instanceof HttpError) {
      sendError(res, error.status, error.code, error.message);
      // A refused body may still be streaming in; do not keep reading it.
      if (error.status === 413) res.on('finish', () => res.socket?.destroy());
      return;
    }
    if (error instanceof z.ZodError) {
      sendError(
        res,
        400,
        'bad_request',
        error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; '),
      );
      return;
    }
    console.error(`tabswarm: error serving a request: ${(error as Error).stack ?? error}`);
    sendError(res, 500, 'internal', 'internal error');
  }

  private async handleRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = parseUrl(req.url);
    if (!url) throw new HttpError(400, 'bad_url', 'malformed request URL');
    const path = url.pathname;
    const { metrics } = this.deps;

    if (path === '/peer' || path.startsWith('/peer/')) {
      metrics.httpRequests.inc(1, { route: 'peer' });
      if (!this.peer) throw new HttpError(503, 'unavailable', 'signaling is not running');
      this.peer.handleRequest(req, res);
      return;
    }
    if (path === '/metrics') {
      metrics.httpRequests.inc(1, { route: 'metrics' });
      sendText(res, 200, metrics.render(), 'text/plain; version=0.0.4; charset=utf-8');
      return;
    }
    if (path.startsWith('/api/')) {
      metrics.httpRequests.inc(1, { route: apiRouteLabel(path) });
      if (this.deps.datasetRoute(req, res)) return;
      await this.handleApi(req, res, url);
      return;
    }
    metrics.httpRequests.inc(1, { route: 'static' });
    if (this.deps.staticFiles.serve(req, res, path)) return;
    sendText(res, 404, 'not found\n');
  }

  private async handleApi(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const { executor, store, runId } = this.deps;
    const parts = url.pathname.split('/').slice(2); // after '/api/'
    const method = req.method ?? 'GET';
    const route = parts[0];

    if (route === 'status' && parts.length === 1) {
      requireMethod(method, 'GET');
      sendJson(res, 200, statusOf(executor.state, this.now()));
      return;
    }
    if (route === 'audit' && parts.length === 1) {
      requireMethod(method, 'GET');
      const all = store.commits(runId, { includeRolledBack: true });
      sendJson(
        res,
        200,
        auditRun(
          executor.state,
          all.filter((r) => !r.rolledBack),
          all.filter((r) => r.rolledBack).length,
        ),
      );
      return;
    }
    if (route === 'job' && parts.length === 1) {
      requireMethod(method, 'GET');
      sendJson(res, 200, { runId, job: jobPublic(executor.state.job, executor.state.datasetSize) });
      return;
    }
    if (route === 'commits' && parts.length === 1) {
      // Live commits (rolled-back rows excluded), ascending; page on with `from = next`.
      requireMethod(method, 'GET');
      const from = integerQuery(url, 'from', 0, 0, Number.MAX_SAFE_INTEGER);
      const limit = integerQuery(url, 'limit', MAX_COMMITS_PAGE, 1, MAX_COMMITS_PAGE);
      sendJson(res, 200, commitsPage(runId, store.commitsFrom(runId, from, limit), limit));
      return;
    }
    if (route === 'evaluations' && parts.length === 1) {
      // Accepted test-set evaluations (event-log rows named `evaluation`), oldest first; page on with `after = last id`.
      requireMethod(method, 'GET');
      const after = integerQuery(url, 'after', 0, 0, Number.MAX_SAFE_INTEGER);
      const limit = integerQuery(url, 'limit', MAX_COMMITS_PAGE, 1, MAX_COMMITS_PAGE);
      sendJson(res, 200, {
        runId,
        evaluations: evaluationViews(store.eventsNamed(runId, 'evaluation', { afterId: after, limit })),
      });
      return;
    }
    if (route === 'health' && parts.length === 1) {
      const { tls, publicUrl, trustProxy } = this.deps;
      sendJson(res, 200, { ok: true, runId, origin: requestOrigin(req, { tls: !!tls, publicUrl, trustProxy }) });
      return;
    }
    if (route === 'checkpoints') {
      await this.handleCheckpoints(req, res, url, parts.slice(1));
      return;
    }
    if (route === 'verify' && parts.length === 3) {
      if (!this.deps.verification) throw new HttpError(404, 'not_found', 'this job does not verify contributions');
      let runPart: string;
      try {
        runPart = idSchema.parse(decodeURIComponent(parts[1]));
      } catch {
        throw new HttpError(400, 'bad_run', 'malformed run id');
      }
      await this.deps.verification.handleUpload(req, res, url, runPart, parts[2]);
      return;
    }
    if (route === 'admin' && parts.length > 1) {
      await this.deps.admin.handle(req, res, url);
      return;
    }
    throw new HttpError(404, 'not_found', `no API route ${url.pathname}`);
  }

  // ------------------------------------------------------------------ checkpoints

  /**
   * PUT  /api/checkpoints/{runId}/{step}?token=…[&workerId=…]  (also /api/checkpoints/{step}?… for the current run)
   * GET  /api/checkpoints                       list of the current run's checkpoints
   * GET  /api/checkpoints/latest | /{step} | /{runId}/latest | /{runId}/{step}
   */
  private async handleCheckpoints(req: IncomingMessage, res: ServerResponse, url: URL, parts: string[]): Promise<void> {
    const method = req.method ?? 'GET';
    if (parts.length === 0 || (parts.length === 1 && parts[0] === '')) {
      requireMethod(method, 'GET');
      sendJson(res, 200, {
        runId: this.deps.runId,
        checkpoints: this.deps.store.checkpoints(this.deps.runId).map(publicCheckpoint),
      });
      return;
    }
    if (parts.length > 2)
      throw new HttpError(404, 'not_found', 'checkpoint URLs are /api/checkpoints/[runId/]{step|latest}');
    const [runPart, stepPart] = parts.length === 2 ? parts : [this.deps.runId, parts[0]];
    let runId: string;
    try {
      runId = idSchema.parse(decodeURIComponent(runPart));
    } catch {
      throw new HttpError(400, 'bad_run', 'malformed run id');
    }
    if (method === 'PUT') {
      await this.uploadCheckpoint(req, res, url, runId, stepPart);
      return;
    }
    requireMethod(method, 'GET', 'HEAD', 'PUT');
    let row: CheckpointRow | null;
    if (stepPart === 'latest') row = this.deps.store.latestCheckpoint(runId);
    else {
      const step = stepParam.safeParse(stepPart);
      if (!step.success || !/^\d+$/.test(stepPart))
        throw new HttpError(
          400,
          'bad_step',
          `step must be a non-negative integer or "latest", not "${stepPart.slice(0, 40)}"`,
        );
      row = this.deps.store.checkpoint(runId, step.data);
    }
    if (!row) throw new HttpError(404, 'no_checkpoint', `no checkpoint ${stepPart} in run ${runId}`);
    const etag = `"sha256-${row.sha256}"`;
    const headers = {
      'content-type': 'application/octet-stream',
      'cache-control': 'no-cache',
      etag,
      'x-checkpoint-sha256': row.sha256,
      'x-checkpoint-step': String(row.step),
      'x-checkpoint-epoch': String(row.epoch),
      'x-checkpoint-cursor': String(row.cursor),
      'access-control-expose-headers':
        'x-checkpoint-sha256, x-checkpoint-step, x-checkpoint-epoch, x-checkpoint-cursor, etag',
    };
    if (req.headers['if-none-match'] === etag) {
      res.writeHead(304, headers).end();
      return;
    }
    res.writeHead(200, { ...headers, 'content-length': row.bytes });
    if (method === 'HEAD') {
      res.end();
      return;
    }
    const stream = createReadStream(row.path);
    stream.on('error', () => res.destroy());
    stream.pipe(res);
  }

  private async uploadCheckpoint(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    runId: string,
    stepPart: string,
  ): Promise<void> {
    const { executor, store, metrics } = this.deps;
    const reject = (status: number, code: string, message: string): never => {
      metrics.checkpointUploads.inc(1, { result: code });
      throw new HttpError(status, code, message);
    };
    if (runId !== this.deps.runId) reject(409, 'wrong_run', `run ${runId} is not the current run`);
    if (!/^\d+$/.test(stepPart)) reject(400, 'bad_step', 'step must be a non-negative integer');
    const step = Number(stepPart);
    const grant = executor.checkpointGrant(step);
    const refusal = grantRefusal(grant, url, `checkpoint of step ${step}`);
    if (refusal) reject(refusal.status, refusal.code, refusal.message);
    const body = await readBody(req, this.deps.maxCheckpointBytes).catch((error: unknown) => {
      if (error instanceof HttpError) metrics.checkpointUploads.inc(1, { result: error.code });
      throw error;
    });
    let snapshot: DecodedSnapshot;
    try {
      // A plain Uint8Array view: Buffer#slice returns a view, not a copy, which decodeSnapshot does not expect.
      snapshot = decodeSnapshot(new Uint8Array(body.buffer, body.byteOffset, body.byteLength), { sha256: nodeSha256 });
    } catch (error) {
      if (error instanceof SnapshotError) reject(422, 'bad_snapshot', error.message);
      throw error;
    }
    const state = executor.state;
    const expected = positionAfter(step, jobPublic(state.job, state.datasetSize));
    if (snapshot!.step !== step)
      reject(422, 'wrong_step', `snapshot is of step ${snapshot!.step}, the URL says ${step}`);
    if (snapshot!.epoch !== expected.epoch || snapshot!.cursor !== expected.cursor) {
      reject(
        422,
        'wrong_position',
        `snapshot says epoch ${snapshot!.epoch} cursor ${snapshot!.cursor}; step ${step} ends at epoch ${expected.epoch} cursor ${expected.cursor}`,
      );
    }
    const localMode = state.job.sync.mode === 'local';
    if (
      snapshot!.spec.name !== state.job.model.name ||
      snapshot!.optimizer.kind !== state.job.optimizer.kind ||
      !!snapshot!.outer !== localMode
    ) {
      reject(
        422,
        'wrong_model',
        `snapshot of ${snapshot!.spec.name}/${snapshot!.optimizer.kind}${snapshot!.outer ? ' with an outer momentum' : ''}, the job trains ${state.job.model.name}/${state.job.optimizer.kind}${localMode ? ' in local sync mode (outer momentum expected)' : ''}`,
      );
    }
    // The coordinator hashes the uploaded state itself (the header's hash is the sender's claim) and
    // stores it only if that equals the hash every rank reported for the committed step (parameters,
    // and in local mode the outer momentum: core/hash.ts `stateHash`, a tree of SHA-256, so other bytes cannot match it).
    if (grant!.hash === null) reject(409, 'no_hash', `step ${step} has no committed hash to verify against`);
    // decodeSnapshot hashed the bytes itself (core/hash.ts `stateHash`); the header's hashes are only checked against them.
    const computed = snapshot!.stateHash;
    if (computed !== grant!.hash) {
      reject(422, 'hash_mismatch', `snapshot parameters hash to ${computed}, step ${step} committed ${grant!.hash}`);
    }
    // The machine may have moved on (rolled back past this step) while the body streamed in.
    if (executor.checkpointGrant(step) !== grant)
      reject(409, 'not_requested', `the checkpoint of step ${step} is no longer wanted`);
    const row = store.putCheckpoint(runId, { step, epoch: snapshot!.epoch, cursor: snapshot!.cursor }, body);
    executor.settleGrant(step);
    executor.dispatch({ kind: 'checkpoint_stored', step, epoch: row.epoch, cursor: row.cursor, sha256: row.sha256 });
    metrics.checkpointUploads.inc(1, { result: 'stored' });
    // The machine keeps the few checkpoints it may restore from; older files only take disk space.
    const kept = executor.state.checkpoints.map((c) => c.step);
    if (kept.includes(step)) store.pruneCheckpoints(runId, kept);
    sendJson(res, 201, publicCheckpoint(row));
  }
}

function requireMethod(method: string | undefined, ...allowed: string[]): void {
  if (!allowed.includes(method ?? 'GET')) throw new HttpError(405, 'method_not_allowed', `use ${allowed.join(' or ')}`);
}

function parseUrl(raw: string | undefined): URL | null {
  try {
    return new URL(raw ?? '/', 'http://localhost');
  } catch {
    return null;
  }
}

function safePathname(raw: string | undefined): string | null {
  return parseUrl(raw)?.pathname ?? null;
}
