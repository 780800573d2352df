/**
 * Serves the Vite build (`dist/`): `/` → index.html, `/admin/` → admin/index.html (Vite keeps the
 * input's path relative to the root: web/admin/index.html lands at dist/web/admin/index.html, so both
 * places are tried). Paths are resolved inside the root only; anything else is a 404.
 */
import { createReadStream, existsSync, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { sendText } from './http-util';

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
  '.wgsl': 'text/plain; charset=utf-8',
};

/** Where the URL path may live in dist/, in order of preference. */
function candidates(pathname: string): string[] {
  if (pathname === '/' || pathname === '/index.html') return ['index.html'];
  if (pathname === '/admin' || pathname === '/admin/' || pathname === '/admin/index.html') {
    return ['admin/index.html', 'web/admin/index.html'];
  }
  const relative = pathname.replace(/^\/+/, '');
  return pathname.endsWith('/') ? [join(relative, 'index.html')] : [relative];
}

export interface StaticFiles {
  /** Serves the file for GET/HEAD `pathname`; returns false when there is none (the caller replies 404). */
  serve(req: IncomingMessage, res: ServerResponse, pathname: string): boolean;
  readonly available: boolean;
}

export function staticFiles(root: string): StaticFiles {
  const absoluteRoot = resolve(root);
  const available = existsSync(join(absoluteRoot, 'index.html'));
  return {
    available,
    serve(req, res, pathname) {
      if (req.method !== 'GET' && req.method !== 'HEAD') return false;
      if (!available && (pathname === '/' || pathname.startsWith('/admin'))) {
        sendText(
          res,
          503,
          `The web app is not built: run \`npm run build\` (or \`npm start\`), which writes ${absoluteRoot}.\n`,
        );
        return true;
      }
      let decoded: string;
      try {
        decoded = decodeURIComponent(pathname);
      } catch {
        return false;
      }
      if (decoded.includes('\0')) return false;
      for (const candidate of candidates(decoded)) {
        const file = resolve(absoluteRoot, normalize(candidate));
        if (file !== absoluteRoot && !file.startsWith(absoluteRoot + sep)) return false;
        let size: number;
        try {
          const stat = statSync(file);
          if (!stat.isFile()) continue;
          size = stat.size;
        } catch {
          continue;
        }
        const type = CONTENT_TYPES[extname(file).toLowerCase()] ?? 'application/octet-stream';
        // Vite fingerprints everything under assets/, so those may be cached for good; pages may not.
        const cache = decoded.startsWith('/assets/') ? 'public, max-age=31536000, immutable' : 'no-cache';
        res.writeHead(200, { 'content-type': type, 'content-length': size, 'cache-control': cache });
        if (req.method === 'HEAD') {
          res.end();
          return true;
        }
        const stream = createReadStream(file);
        stream.on('error', () => res.destroy());
        stream.pipe(res);
        return true;
      }
      return false;
    },
  };
}
