/**
 * The one API router (coordinator/http/router.ts): patterns, first match owns the path, 405 with Allow,
 * `any`, and a guard that runs before routes and methods are looked at.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { HttpError } from '../../../../coordinator/http/http-util';
import { type RouteMatch, Router } from '../../../../coordinator/http/router';

function request(method: string, path: string) {
  const headers: Record<string, string> = {};
  const req = { method } as IncomingMessage;
  const res = { setHeader: (k: string, v: string) => (headers[k] = v) } as unknown as ServerResponse;
  return { req, res, url: new URL(path, 'http://localhost'), headers };
}

function recorder() {
  const seen: { name: string; match: RouteMatch }[] = [];
  const as = (name: string) => (_req: IncomingMessage, _res: ServerResponse, match: RouteMatch) => {
    seen.push({ name, match });
  };
  return { seen, as };
}

describe('Router', () => {
  it('matches literal segments, :params (raw, possibly empty) and a final * (the rest, one segment or more)', async () => {
    const { seen, as } = recorder();
    const router = new Router()
      .on('GET', '/api/things', as('list'))
      .on('GET', '/api/things/:id', as('one'))
      .on('GET', '/api/things/:id/parts/*', as('parts'));
    for (const path of [
      '/api/things',
      '/api/things/a%20b',
      '/api/things/',
      '/api/things/x/parts/',
      '/api/things/x/parts/1/2',
    ]) {
      const r = request('GET', path);
      expect(await router.handle(r.req, r.res, r.url), path).toBe(true);
    }
    expect(seen.map((s) => [s.name, s.match.params, s.match.rest])).toEqual([
      ['list', {}, []],
      ['one', { id: 'a%20b' }, []],
      ['one', { id: '' }, []],
      ['parts', { id: 'x' }, ['']],
      ['parts', { id: 'x' }, ['1', '2']],
    ]);
    for (const path of ['/api/things/x/', '/api/things/x/parts', '/api/other', '/api/things/x/y', '/api/thing']) {
      const r = request('GET', path);
      expect(await router.handle(r.req, r.res, r.url), path).toBe(false);
    }
  });

  it('lets the first matching pattern own the path: its methods or a 405 with Allow', async () => {
    const { seen, as } = recorder();
    const router = new Router()
      .on('GET', '/api/c/', as('list'))
      .on(['GET', 'HEAD'], '/api/c/:step', as('get'))
      .on('PUT', '/api/c/:step', as('put'))
      .any('/api/c/*', as('rest'));
    const put = request('PUT', '/api/c/3');
    await router.handle(put.req, put.res, put.url);
    const deep = request('DELETE', '/api/c/1/2');
    await router.handle(deep.req, deep.res, deep.url);
    expect(seen.map((s) => s.name)).toEqual(['put', 'rest']);

    const del = request('DELETE', '/api/c/3');
    const error = await router.handle(del.req, del.res, del.url).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HttpError);
    expect(error).toMatchObject({ status: 405, code: 'method_not_allowed', message: 'use GET or HEAD or PUT' });
    expect(del.headers.allow).toBe('GET, HEAD, PUT');
    // `/api/c/` is the list's path, not a step called "": the list's methods decide.
    const slash = request('PUT', '/api/c/');
    await expect(router.handle(slash.req, slash.res, slash.url)).rejects.toMatchObject({ status: 405 });
  });

  it('runs a guard before routing, and only for paths under its prefix', async () => {
    const { seen, as } = recorder();
    const calls: string[] = [];
    const router = new Router()
      .guard('/api/admin/', async (_req, _res, url, next) => {
        calls.push(url.pathname);
        if (url.searchParams.get('ok') !== '1') throw new HttpError(401, 'unauthorized', 'no');
        return next();
      })
      .on('POST', '/api/admin/pause', as('pause'))
      .on('GET', '/api/status', as('status'));
    const refused = request('GET', '/api/admin/pause');
    await expect(router.handle(refused.req, refused.res, refused.url)).rejects.toMatchObject({ status: 401 });
    const wrongMethod = request('GET', '/api/admin/pause?ok=1');
    await expect(router.handle(wrongMethod.req, wrongMethod.res, wrongMethod.url)).rejects.toMatchObject({
      status: 405,
    });
    const unknown = request('GET', '/api/admin/nope?ok=1');
    expect(await router.handle(unknown.req, unknown.res, unknown.url)).toBe(false);
    const status = request('GET', '/api/status');
    expect(await router.handle(status.req, status.res, status.url)).toBe(true);
    expect(calls).toEqual(['/api/admin/pause', '/api/admin/pause', '/api/admin/nope']);
    expect(seen.map((s) => s.name)).toEqual(['status']);
  });
});
