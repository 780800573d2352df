/**
 * The `/api/admin/*` routes, registered into the one API router (http/router.ts) behind one guard
 * (the admin token), which runs before any route or method is looked at:
 *
 *   GET  /api/admin/feed                         live feed (Server-Sent Events, see admin-feed.ts)
 *   GET  /api/admin/model.safetensors[?step=N]   the latest (or step N's) checkpoint's parameters as safetensors
 *   GET  /api/admin/checkpoints                  the checkpoint history, with download URLs
 *   GET  /api/admin/events[?after=ID&limit=N]    event-log rows
 *   POST /api/admin/{pause,resume,checkpoint,kick,workers}   machine admin actions (JSON body for kick, workers)
 *   GET/POST /api/admin/invites, DELETE /api/admin/invites/{id}   invite links (invite-routes.ts)
 *
 * The token comes as `Authorization: Bearer <token>`; GET routes also take `?token=<token>`, because an
 * EventSource and a download link cannot set headers (a token in a URL can end up in a proxy's access
 * log, so the page sends the header wherever it can; actions never take it from the URL).
 * Errors are thrown as `HttpError` (or `ZodError` for a bad body) for the server to answer.
 */
import type { IncomingMessage } from 'node:http';
import { z } from 'zod';
import { AdminFeed, type AdminFeedOptions, feedCheckpoint, type SubscribeActions } from './admin-feed';
import { statusSummary } from '../machine/status-view';
import type { CheckpointListResponse } from '../../core/protocol/admin-feed';
import { adminRefusal } from '../machine/admin';
import { type AdminAction, adminActionSchema, type CoordinatorState } from '../machine/machine';
import type { InviteRoutes } from './invite-routes';
import type { RouteGuard, RouteHandler, Router } from '../http/router';
import { bearerToken, HttpError, readJsonBody, sameSecret, sendJson } from '../http/http-util';
import { checkpointToSafetensors, SafetensorsError, type SafetensorsExport } from '../datasets/safetensors';
import type { CheckpointRow, Store } from '../runtime/store';
import { workerOf } from '../machine/worker-table';

export interface AdminRoutesDeps {
  runId: string;
  adminToken: string;
  store: Pick<Store, 'commits' | 'events' | 'checkpoints' | 'checkpoint' | 'latestCheckpoint' | 'readCheckpoint'>;
  /** The machine's current state (e.g. `() => executor.state`). */
  state: () => CoordinatorState;
  /** Feeds an admin action to the machine (e.g. `(action) => executor.dispatch({ kind: 'admin', action })`). */
  dispatch: (action: AdminAction) => void;
  /** Every transition's actions, after execution (see admin-feed.ts). */
  subscribe: SubscribeActions;
  now?: () => number;
  /** Feed tuning (tests use shorter intervals). */
  feed?: Pick<
    AdminFeedOptions,
    'statusIntervalMs' | 'statusThrottleMs' | 'recentEvents' | 'maxCommits' | 'maxBufferedBytes'
  >;
  /** Counts requests by route and result (e.g. the server's admin_requests counter); routes from a fixed set. */
  onRequest?: (route: string, result: string) => void;
  /** The invite routes, when the server has admission (invite-routes.ts). */
  invites?: InviteRoutes;
}

export interface AdminRoutes {
  /** Registers every `/api/admin/*` route and the token guard into the API router (the server calls it once). */
  register(router: Router): void;
  readonly feed: AdminFeed;
  /** Ends the feed's streams and timers (call before closing the HTTP server). */
  close(): void;
}

/** The action routes (`POST /api/admin/<name>`): each body mapped to the machine's admin action. */
const ACTIONS = new Map<string, (body: unknown) => AdminAction>(
  Object.entries({
    pause: () => ({ type: 'pause' }),
    resume: () => ({ type: 'resume' }),
    checkpoint: () => ({ type: 'checkpoint_now' }),
    kick: (body) =>
      adminActionSchema.parse({ type: 'kick', workerId: z.object({ workerId: z.string() }).parse(body).workerId }),
    workers: (body) => {
      const { min, max } = z.object({ min: z.unknown(), max: z.unknown() }).parse(body);
      return adminActionSchema.parse({ type: 'set_workers', min, max });
    },
  }),
);
const READS = new Set(['feed', 'model.safetensors', 'checkpoints', 'events']);
/** `action` labels of the admin request counter: a fixed set, whatever paths clients ask for. */
const ROUTE_LABELS = new Set([...READS, ...ACTIONS.keys(), 'invites']);

export function adminRouteLabel(route: string): string {
  const first = route.split('/')[0];
  return ROUTE_LABELS.has(first) ? first : 'other';
}

/** The one guard: the bearer header, or (GET routes only) the `token` query parameter. */
export function authorized(req: IncomingMessage, url: URL, route: string, token: string): boolean {
  const given = bearerToken(req) ?? (READS.has(route) ? url.searchParams.get('token') : null);
  return sameSecret(given, token);
}

const PREFIX = '/api/admin/';

export function adminRoutes(deps: AdminRoutesDeps): AdminRoutes {
  const feed = new AdminFeed({
    runId: deps.runId,
    store: deps.store,
    state: deps.state,
    subscribe: deps.subscribe,
    now: deps.now,
    ...deps.feed,
  });
  return {
    feed,
    close: () => feed.close(),
    register(router) {
      router.guard(PREFIX, adminGuard(deps));
      router
        .on('GET', `${PREFIX}feed`, (req, res) => feed.attach(req, res))
        .on(['GET', 'HEAD'], `${PREFIX}model.safetensors`, safetensorsExporter(deps))
        .on(['GET', 'HEAD'], `${PREFIX}checkpoints`, (_req, res) => {
          const body: CheckpointListResponse = {
            runId: deps.runId,
            checkpoints: deps.store.checkpoints(deps.runId).map((row) => feedCheckpoint(deps.runId, row)),
          };
          sendJson(res, 200, body);
        })
        .on(['GET', 'HEAD'], `${PREFIX}events`, (_req, res, { url }) =>
          sendJson(res, 200, { events: eventsPage(deps, url) }),
        );
      for (const [name, toAction] of ACTIONS) router.on('POST', `${PREFIX}${name}`, actionRoute(deps, toAction));
      registerInvites(router, deps.invites);
      router.any(`${PREFIX}*`, (_req, _res, { rest }) => {
        throw new HttpError(
          404,
          'not_found',
          `no admin route "${rest.join('/').slice(0, 40)}" (feed, model.safetensors, checkpoints, events; POST pause, resume, kick, workers, checkpoint)`,
        );
      });
    },
  };
}

/** The one guard: no token, no route (401 before any 404 or 405); every answer counted by route and result. */
function adminGuard(deps: AdminRoutesDeps): RouteGuard {
  const count = deps.onRequest ?? (() => {});
  return async (req, res, url, next) => {
    const route = url.pathname.slice(PREFIX.length);
    if (!authorized(req, url, route, deps.adminToken)) {
      count(adminRouteLabel(route), 'unauthorized');
      res.setHeader('www-authenticate', 'Bearer realm="tabswarm admin"');
      throw new HttpError(
        401,
        'unauthorized',
        'admin calls need "Authorization: Bearer <admin token>" (or ?token= for the feed and downloads)',
      );
    }
    try {
      const served = await next();
      count(adminRouteLabel(route), 'ok');
      return served;
    } catch (error) {
      const code = error instanceof HttpError ? error.code : error instanceof z.ZodError ? 'bad_request' : 'internal';
      count(adminRouteLabel(route), code);
      throw error;
    }
  };
}

/** `POST /api/admin/<action>`: the body mapped to the machine's admin action, checked, dispatched. */
function actionRoute(deps: AdminRoutesDeps, toAction: (body: unknown) => AdminAction): RouteHandler {
  const now = deps.now ?? Date.now;
  return async (req, res) => {
    const action = checkedAction(toAction(await readJsonBody(req)), deps.state());
    deps.dispatch(action);
    sendJson(res, 200, { ok: true, action, status: statusSummary(deps.state(), now()) });
  };
}

/** The invite routes of the server's admission, or a 404 that says this coordinator has none. */
function registerInvites(router: Router, invites: InviteRoutes | undefined): void {
  if (invites) {
    invites.register(router);
    return;
  }
  const none: RouteHandler = () => {
    throw new HttpError(404, 'not_found', 'this coordinator has no invites');
  };
  router.any(`${PREFIX}invites`, none).any(`${PREFIX}invites/*`, none);
}

/**
 * Refuses actions the machine would only log as ignored (min > max, kicking a worker nobody knows,
 * resuming a job that is not paused or failed …): say why instead of an `ok` that changes nothing.
 */
function checkedAction(action: AdminAction, state: CoordinatorState): AdminAction {
  if (action.type === 'set_workers' && action.min > action.max)
    throw new HttpError(400, 'bad_request', 'min must be <= max');
  if (action.type === 'kick' && !workerOf(state.workers, action.workerId))
    throw new HttpError(404, 'unknown_worker', `no worker ${action.workerId}`);
  const refusal = adminRefusal(state, action);
  if (refusal !== null) {
    const invalid = action.type === 'set_workers';
    throw new HttpError(invalid ? 400 : 409, invalid ? 'bad_request' : 'refused', refusal);
  }
  return action;
}

function eventsPage(deps: AdminRoutesDeps, url: URL) {
  const after = Number(url.searchParams.get('after') ?? 0);
  const limit = Math.min(1000, Math.max(1, Number(url.searchParams.get('limit') ?? 200) || 200));
  return deps.store.events(deps.runId, { afterId: Number.isFinite(after) ? after : 0, limit });
}

/** `GET /api/admin/model.safetensors`: a stored checkpoint converted, the last conversion cached. */
function safetensorsExporter(deps: AdminRoutesDeps): RouteHandler {
  // Converting a checkpoint costs a read and a copy; the same file is often downloaded twice.
  let cached: { sha256: string; result: SafetensorsExport } | null = null;
  const convert = (row: CheckpointRow): SafetensorsExport => {
    if (cached?.sha256 === row.sha256) return cached.result;
    try {
      const result = checkpointToSafetensors(deps.store.readCheckpoint(row), {
        'tabswarm.run': deps.runId,
        'tabswarm.checkpoint_sha256': row.sha256,
      });
      cached = { sha256: row.sha256, result };
      return result;
    } catch (error) {
      if (error instanceof SafetensorsError)
        throw new HttpError(
          500,
          'bad_checkpoint',
          `stored checkpoint of step ${row.step} is unusable: ${error.message}`,
        );
      throw error;
    }
  };
  return (req, res, { url }) => {
    const row = checkpointOf(deps, url.searchParams.get('step'));
    const result = convert(row);
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
  };
}

function checkpointOf(deps: AdminRoutesDeps, stepText: string | null): CheckpointRow {
  if (stepText === null || stepText === 'latest') {
    const row = deps.store.latestCheckpoint(deps.runId);
    if (!row)
      throw new HttpError(
        404,
        'no_checkpoint',
        'no checkpoint yet: the model is exported from a stored checkpoint (use "checkpoint now" once a step is committed)',
      );
    return row;
  }
  if (!/^\d{1,15}$/.test(stepText))
    throw new HttpError(
      400,
      'bad_step',
      `step must be a non-negative integer or "latest", not "${stepText.slice(0, 40)}"`,
    );
  const row = deps.store.checkpoint(deps.runId, Number(stepText));
  if (!row) throw new HttpError(404, 'no_checkpoint', `no checkpoint of step ${stepText}`);
  return row;
}
