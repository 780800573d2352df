/**
 * What the benches share: their command-line options, the Chromium version their JSON lines carry, and
 * the checks that stop a run before it starts (the web app built; for the test-bed benches, what
 * coordinator/netbed needs).
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { netbedUnavailable } from '../../tools/netbed/netbed';
import { WEB_BUILD_DIR } from '../../test/support/browser';

/** `--name value` from the command line, or `fallback`. */
export function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
}

/** `chromium --version`, or 'unknown'. */
export function chromiumVersion(): string {
  try {
    return execFileSync('chromium', ['--version'], { stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .trim();
  } catch {
    return 'unknown';
  }
}

/**
 * Exits with status 1 and the reason on stderr unless bench `name` can run: with `netbed`, the network
 * test bed first; then the built web app its tabs load.
 */
export function exitUnlessReady(name: string, o: { netbed?: boolean } = {}): void {
  const why = o.netbed ? netbedUnavailable() : null;
  if (why) {
    process.stderr.write(`${name}: ${why}\n`);
    process.exit(1);
  }
  if (!existsSync(join(WEB_BUILD_DIR, 'index.html'))) {
    process.stderr.write(`${name}: build the web app first (npx vite build; serving ${WEB_BUILD_DIR})\n`);
    process.exit(1);
  }
}

/** Milliseconds since the epoch with `performance.now()`'s resolution (comparable across processes on one machine). */
export const nowMs = (): number => performance.timeOrigin + performance.now();
