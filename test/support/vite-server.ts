/**
 * A Vite dev server over the repository on a free port of 127.0.0.1 (a secure context), for browser
 * tests whose harness pages import TypeScript sources directly (no build step). The project's
 * `vite.config.ts` is not loaded: harness pages need none of it, and tests should not change
 * behaviour when the app's build config does.
 */
import { resolve } from 'node:path';
import { createLogger, createServer, type ProxyOptions, type ViteDevServer } from 'vite';

export const REPO_ROOT = resolve(import.meta.dirname, '../..');

export interface TestViteServer {
  /** e.g. `http://127.0.0.1:5174` (no trailing slash). */
  readonly url: string;
  readonly server: ViteDevServer;
  close(): Promise<void>;
}

/**
 * `cacheDir`: Vite's dependency cache (default node_modules/.vite). A caller with other dependencies
 * than the tests' gives its own, since re-optimizing a shared cache breaks pages served from it.
 * `proxy`: Vite's `server.proxy` (e.g. a coordinator's `/api` and sockets behind the page's origin).
 * `quiet`: error lines to drop (e.g. a proxied socket the target refused, when a test expects that).
 */
export async function startViteServer(
  opts: {
    root?: string;
    optimizeDeps?: string[];
    cacheDir?: string;
    proxy?: Record<string, ProxyOptions>;
    quiet?: RegExp;
  } = {},
): Promise<TestViteServer> {
  const logger = createLogger('warn');
  const logError = logger.error.bind(logger);
  logger.error = (msg, options) => {
    if (!opts.quiet?.test(msg)) logError(msg, options);
  };
  const server = await createServer({
    root: opts.root ?? REPO_ROOT,
    configFile: false,
    publicDir: false,
    cacheDir: opts.cacheDir,
    customLogger: logger,
    clearScreen: false,
    // Pre-bundle the dependencies up front: discovering them on first request makes Vite reload the
    // page mid-test ("new dependencies optimized").
    optimizeDeps: { include: opts.optimizeDeps ?? ['peerjs'], entries: [] },
    server: { host: '127.0.0.1', port: 0, strictPort: false, hmr: false, watch: null, proxy: opts.proxy },
  });
  await server.listen();
  const address = server.httpServer?.address();
  if (!address || typeof address === 'string') {
    await server.close();
    throw new Error('vite dev server has no port');
  }
  return { url: `http://127.0.0.1:${address.port}`, server, close: () => server.close() };
}
