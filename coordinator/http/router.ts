/**
 * The one router of every `/api/*` route: a table of (methods, path pattern) → handler. The public
 * routes (api-routes.ts, checkpoint-routes.ts) and the admin routes (admin/admin-routes.ts, with their
 * invite routes) register into it; the server (server.ts) asks it once per request and answers a 404
 * when no pattern matched.
 *
 * Patterns are split on `/` like the request path: a literal segment matches itself (so a trailing
 * slash is a different path), `:name` matches any one segment (raw: not decoded, possibly empty), and a
 * final `*` matches the rest, one segment or more (so `/api/x/*` is everything under `/api/x/`, not
 * `/api/x` itself). The first pattern that matches owns the path, in
 * the order routes were registered; registering a pattern again adds methods to it. A method the
 * owning pattern does not take is a 405 with an `Allow` header, unless it was registered with `any`.
 *
 * A guard wraps every request whose path starts with its prefix, before the route and its method are
 * looked at (the admin token: an unauthorised caller learns nothing about which routes exist).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpError } from './http-util';

/** What a handler learns about its match: the URL, the `:name` segments, and what a final `*` matched. */
export interface RouteMatch {
  url: URL;
  params: Readonly<Record<string, string>>;
  rest: readonly string[];
}

export type RouteHandler = (req: IncomingMessage, res: ServerResponse, match: RouteMatch) => void | Promise<void>;

/** Runs around a request under its prefix; `next()` routes it and resolves false when no pattern matched. */
export type RouteGuard = (
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  next: () => Promise<boolean>,
) => Promise<boolean>;

/** Any method (the handler checks, or takes all). */
const ANY = '*';

interface Route {
  pattern: string;
  segments: readonly string[];
  /** Method → handler, in registration order (the order the 405's `Allow` lists them). */
  methods: Map<string, RouteHandler>;
}

export class Router {
  private readonly routes: Route[] = [];
  private readonly guards: { prefix: string; guard: RouteGuard }[] = [];

  /** Serves `pattern` for `methods` (e.g. `'GET'` or `['GET', 'HEAD']`). */
  on(methods: string | readonly string[], pattern: string, handler: RouteHandler): this {
    const route = this.routeOf(pattern);
    for (const method of typeof methods === 'string' ? [methods] : methods) route.methods.set(method, handler);
    return this;
  }

  /** Serves `pattern` for every method. */
  any(pattern: string, handler: RouteHandler): this {
    return this.on(ANY, pattern, handler);
  }

  /** Wraps every request whose path starts with `prefix` (the first guard whose prefix matches). */
  guard(prefix: string, guard: RouteGuard): this {
    this.guards.push({ prefix, guard });
    return this;
  }

  /** Serves the request; false when no pattern matched (the caller answers 404). Errors are thrown as HttpError. */
  handle(req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean> {
    const next = () => this.dispatch(req, res, url);
    const guarded = this.guards.find((g) => url.pathname.startsWith(g.prefix));
    return guarded ? guarded.guard(req, res, url, next) : next();
  }

  private async dispatch(req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean> {
    const parts = url.pathname.split('/');
    for (const route of this.routes) {
      const match = matchSegments(route.segments, parts);
      if (!match) continue;
      const handler = route.methods.get(req.method ?? 'GET') ?? route.methods.get(ANY);
      if (!handler) {
        const allowed = [...route.methods.keys()];
        res.setHeader('allow', allowed.join(', '));
        throw new HttpError(405, 'method_not_allowed', `use ${allowed.join(' or ')}`);
      }
      await handler(req, res, { url, ...match });
      return true;
    }
    return false;
  }

  private routeOf(pattern: string): Route {
    const known = this.routes.find((r) => r.pattern === pattern);
    if (known) return known;
    const segments = pattern.split('/');
    if (segments.slice(0, -1).includes('*')) throw new Error(`route ${pattern}: * only as the last segment`);
    const route: Route = { pattern, segments, methods: new Map() };
    this.routes.push(route);
    return route;
  }
}

function matchSegments(segments: readonly string[], parts: readonly string[]): Omit<RouteMatch, 'url'> | null {
  const params: Record<string, string> = {};
  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i];
    if (i >= parts.length) return null;
    if (segment === '*' && i === segments.length - 1) return { params, rest: parts.slice(i) };
    if (segment.startsWith(':')) params[segment.slice(1)] = parts[i];
    else if (segment !== parts[i]) return null;
  }
  return parts.length === segments.length ? { params, rest: [] } : null;
}
