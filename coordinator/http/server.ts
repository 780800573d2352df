/**
 * One node:http server on one port:
 *   /                 the volunteer page, /admin/ the admin page, /assets/… (Vite build in dist/)
 *   /ws               the control WebSocket (ControlChannel → the machine)
 *   /peer/…           PeerJS signaling (REST + its WebSocket at /peer/peerjs)
 *   /api/…            the one API router (router.ts): public routes (api-routes.ts, checkpoint-routes.ts)
 *                     and /api/admin/… behind its token guard (admin/admin-routes.ts)
 *   /metrics          Prometheus text
 * The server is thin: every decision is the machine's; this file dispatches requests and upgrades and
 * turns thrown errors into JSON answers.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import { z } from 'zod';
import type { AdminRoutes } from '../admin/admin-routes';
import type { ControlChannel } from '../runtime/control-channel';
import type { SocketGate } from '../runtime/socket-gate';
import { type ApiRouteDeps, noApiRoute, registerApiRoutes } from './api-routes';
import { HttpError, sendError, sendText } from './http-util';
import type { PeerSignaling } from './peer-signaling';
import { Router } from './router';
import type { StaticFiles } from './static-files';
import type { TlsMaterial } from './tls';

export interface ServerDeps extends ApiRouteDeps {
  control: ControlChannel;
  staticFiles: StaticFiles;
  /** The admin routes (admin-routes.ts): they register into the API router with their token guard. */
  admin: Pick<AdminRoutes, 'register'>;
  /** Origin allowlist, bans and per-address caps for `/ws` and `/peer` upgrades (socket-gate.ts). */
  gate?: SocketGate;
  /** PEM cert and key: serve HTTPS (and WSS) instead of HTTP on the one port (tls.ts). */
  tls?: TlsMaterial;
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

export class CoordinatorServer {
  readonly http: Server;
  peer: PeerSignaling | null = null;
  private readonly api = new Router();

  constructor(private readonly deps: ServerDeps) {
    registerApiRoutes(this.api, deps);
    deps.admin.register(this.api);
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
      if (!(await this.api.handle(req, res, url))) throw noApiRoute(url);
      return;
    }
    metrics.httpRequests.inc(1, { route: 'static' });
    if (this.deps.staticFiles.serve(req, res, path)) return;
    sendText(res, 404, 'not found\n');
  }
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
