/**
 * A build of the web app plus the collectives harness page (test/browser/pages/net-harness.html), for a
 * coordinator that must serve the harness itself: on the network test bed the tabs live in namespaces
 * that reach only the bed's coordinator, not the Vite dev server the loopback tests use. The page lands
 * at `/test/browser/pages/net-harness.html` of the served site (Vite keeps inputs' paths under the root).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'vite';
import { REPO_ROOT } from './coordinator-process';

export const NET_HARNESS_PATH = '/test/browser/pages/net-harness.html';

/** Builds into a fresh temp dir (the shared dist/ is never touched) and returns it. */
export async function buildHarnessSite(): Promise<string> {
  const outDir = mkdtempSync(join(tmpdir(), 'tabswarm-harness-site-'));
  await build({
    configFile: join(REPO_ROOT, 'vite.config.ts'),
    root: REPO_ROOT,
    logLevel: 'warn',
    build: {
      outDir,
      emptyOutDir: true,
      rollupOptions: {
        input: {
          volunteer: join(REPO_ROOT, 'index.html'),
          netHarness: join(REPO_ROOT, NET_HARNESS_PATH),
        },
      },
    },
  });
  return outDir;
}
