/**
 * Admin routes for the admin page, mounted by the server before its own `/api/admin/*` handler:
 *
 *   GET  /api/admin/feed                         live feed (Server-Sent Events, see admin-feed.ts)
 *   GET  /api/admin/model.safetensors[?step=N]   the latest (or step N's) checkpoint's parameters as safetensors
 *   GET  /api/admin/checkpoints                  the checkpoint history, with download URLs
 *
 * All behind the admin token: `Authorization: Bearer <token>`, or `?token=<token>` because an
 * EventSource and a download link cannot set headers. (A token in a URL can end up in a proxy's access
 * log; the page sends it in the header wherever it can.) Any other path is left to the caller
 * (the handler returns false), so the server's POST actions (pause, resume, kick, workers, checkpoint)
 * and everything else keep working unchanged.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AdminFeed, feedCheckpoint, type AdminFeedOptions, type SubscribeActions } from './admin-feed';
import type { CoordinatorState } from './core/machine';
import { bearerToken, HttpError, sameSecret, sendError, sendJson } from './http-util';
import { checkpointToSafetensors, SafetensorsError, type SafetensorsExport } from './safetensors';
import type { CheckpointRow, Store } from './store';
import type { CheckpointListResponse } from './core/admin-feed-protocol';

export interface AdminRoutesDeps {
  runId: string;
  adminToken: string;
  store: Pick<Store, 'commits' | 'events' | 'checkpoints' | 'checkpoint' | 'latestCheckpoint' | 'readCheckpoint'>;
  /** The machine's current state (e.g. `() => executor.state`). */
  state: () => CoordinatorState;
  /** Every transition's actions, after execution (see admin-feed.ts); without it the feed tails the store. */
  subscribe?: SubscribeActions;
  now?: () => number;
  /** Feed tuning (tests use shorter intervals). */
  feed?: Pick<
    AdminFeedOptions,
    'statusIntervalMs' | 'statusThrottleMs' | 'pollMs' | 'recentEvents' | 'maxCommits' | 'maxBufferedBytes'
  >;
  /** Counts requests by route and result (e.g. the server's admin_requests counter). */
  onRequest?: (route: string, result: string) => void;
}

/** A request handler: true when it handled (or is handling) the request, false when the path is not its own. */
export interface AdminRoutes {
  (req: IncomingMessage, res: ServerResponse): boolean;
  readonly feed: AdminFeed;
  /** Ends the feed's streams and timers (call before closing the HTTP server). */
  close(): void;
}

const ROUTES = new Set(['feed', 'model.safetensors', 'checkpoints']);

/** The admin token of a request: the bearer header, else the `token` query parameter. */
export function adminTokenOf(req: IncomingMessage, url: URL): string | null {
  return bearerToken(req) ?? url.searchParams.get('token');
}

export function adminRoutes(deps: AdminRoutesDeps): AdminRoutes {
  const feed = new AdminFeed({
    runId: deps.runId,
    store: deps.store,
    state: deps.state,
    subscribe: deps.subscribe,
    now: deps.now,
    ...deps.feed,
  });
  // Converting a checkpoint costs a read and a copy; the same file is often downloaded twice.
  let cached: { sha256: string; result: SafetensorsExport } | null = null;
  const count = deps.onRequest ?? (() => {});

  const handler = ((req: IncomingMessage, res: ServerResponse): boolean => {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://localhost');
    } catch {
      return false;
    }
    const match = /^\/api\/admin\/([^/]+)$/.exec(url.pathname);
    if (!match || !ROUTES.has(match[1])) return false;
    const route = match[1];
    try {
      if (!sameSecret(adminTokenOf(req, url), deps.adminToken)) {
        count(route, 'unauthorized');
        res.setHeader('www-authenticate', 'Bearer realm="tabswarm admin"');
        throw new HttpError(
          401,
          'unauthorized',
          'admin calls need "Authorization: Bearer <admin token>" (or ?token= for the feed and downloads)',
        );
      }
      const method = req.method ?? 'GET';
      if (method !== 'GET' && !(method === 'HEAD' && route !== 'feed')) {
        res.setHeader('allow', route === 'feed' ? 'GET' : 'GET, HEAD');
        throw new HttpError(405, 'method_not_allowed', `use GET for /api/admin/${route}`);
      }
      if (route === 'feed') {
        feed.attach(req, res);
      } else if (route === 'checkpoints') {
        const body: CheckpointListResponse = {
          runId: deps.runId,
          checkpoints: deps.store.checkpoints(deps.runId).map((row) => feedCheckpoint(deps.runId, row)),
        };
        sendJson(res, 200, body);
      } else {
        sendModel(req, res, url);
      }
      count(route, 'ok');
    } catch (error) {
      if (error instanceof HttpError) {
        if (error.status !== 401) count(route, error.code);
        sendError(res, error.status, error.code, error.message);
      } else {
        count(route, 'internal');
        console.error(`tabswarm: admin route ${route}: ${(error as Error).stack ?? error}`);
        sendError(res, 500, 'internal', 'internal error');
      }
    }
    return true;
  }) as AdminRoutes;

  function sendModel(req: IncomingMessage, res: ServerResponse, url: URL): void {
    const stepText = url.searchParams.get('step');
    let row: CheckpointRow | null;
    if (stepText === null || stepText === 'latest') {
      row = deps.store.latestCheckpoint(deps.runId);
      if (!row)
        throw new HttpError(
          404,
          'no_checkpoint',
          'no checkpoint yet: the model is exported from a stored checkpoint (use "checkpoint now" once a step is committed)',
        );
    } else {
      if (!/^\d{1,15}$/.test(stepText))
        throw new HttpError(
          400,
          'bad_step',
          `step must be a non-negative integer or "latest", not "${stepText.slice(0, 40)}"`,
        );
      row = deps.store.checkpoint(deps.runId, Number(stepText));
      if (!row) throw new HttpError(404, 'no_checkpoint', `no checkpoint of step ${stepText}`);
    }
    let result: SafetensorsExport;
    if (cached && cached.sha256 === row.sha256) {
      result = cached.result;
    } else {
      try {
        result = checkpointToSafetensors(deps.store.readCheckpoint(row), {
          'tabswarm.run': deps.runId,
          'tabswarm.checkpoint_sha256': row.sha256,
        });
      } catch (error) {
        if (error instanceof SafetensorsError)
          throw new HttpError(
            500,
            'bad_checkpoint',
            `stored checkpoint of step ${row.step} is unusable: ${error.message}`,
          );
        throw error;
      }
      cached = { sha256: row.sha256, result };
    }
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': result.bytes.length,
      'content-disposition': `attachment; filename="${result.filename}"`,
      'cache-control': 'no-store',
      'x-checkpoint-step': String(row.step),
      'x-checkpoint-sha256': row.sha256,
    });
    if (req.method === 'HEAD') res.end();
    else res.end(result.bytes);
  }

  Object.defineProperty(handler, 'feed', { value: feed });
  handler.close = () => feed.close();
  return handler;
}
