/**
 * A minimal HTTP server for the browser tests of the single-tab issue: the Vite build (`WEB_BUILD_DIR`) plus
 * the dataset routes, on a free port of 127.0.0.1 (a secure context, as WebGPU requires).
 * Later tests use the real coordinator; this stays small on purpose.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { extname, join, normalize, sep } from 'node:path';
import { datasetRoutes } from '../../coordinator/datasets/idx-routes';
import type { IdxDataset } from '../../node/idx';
import { WEB_BUILD_DIR } from './browser';

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.map': 'application/json',
};

export interface WebServer {
  /** e.g. `http://127.0.0.1:41234` (no trailing slash). */
  readonly url: string;
  /** Requests served, by path (without query), to check what a page fetched. */
  readonly requests: Map<string, number>;
  close(): Promise<void>;
}

export async function startWebServer(opts: { dataset?: IdxDataset; root?: string } = {}): Promise<WebServer> {
  const root = opts.root ?? WEB_BUILD_DIR;
  if (!existsSync(join(root, 'index.html'))) {
    throw new Error(`${root}/index.html is missing: run \`npx vite build\` first (npm test does)`);
  }
  const dataset = opts.dataset ? datasetRoutes(opts.dataset) : undefined;
  const requests = new Map<string, number>();
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://localhost').pathname);
    requests.set(path, (requests.get(path) ?? 0) + 1);
    if (dataset?.(req, res)) return;
    const file = normalize(join(root, path.endsWith('/') ? `${path}index.html` : path));
    if (!file.startsWith(root + sep)) {
      res.writeHead(403).end();
      return;
    }
    readFile(file).then(
      (body) => {
        res.writeHead(200, {
          'Content-Type': CONTENT_TYPES[extname(file)] ?? 'application/octet-stream',
          'Content-Length': body.length,
        });
        res.end(body);
      },
      () => res.writeHead(404, { 'Content-Type': 'text/plain' }).end(`not found: ${path}\n`),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('web server has no port');
  return {
    url: `http://127.0.0.1:${address.port}`,
    requests,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
