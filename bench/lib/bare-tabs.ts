/**
 * Volunteer-like tabs for the benches: each a headless Chromium of its own (own profile) with the tab URL
 * on its command line, so no DevTools client is attached (see `openBareTabs`).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findChromium, SWARM_CHROMIUM_ARGS } from '../../tools/swarm/chromium';

/**
 * Elastic tabs in a Chromium that NO DevTools client is attached to: the tab URLs on its command line.
 * Playwright enables the DevTools Network domain on every page and worker it drives, and Blink's
 * network agent then keeps the body of every request the page sends: each checkpoint upload (2.8 MB
 * for `mlp`, every 50 steps) stayed in the renderer, ~56 KB per step that a volunteer's browser never
 * holds (docs/performance.md, "The renderer's growth in the elastic path"). Elastic steps are read
 * from the coordinator, so these tabs need no DevTools client; solo's step is read from its page.
 */
export async function openBareTabs(url: string, count: number): Promise<{ close(): Promise<void> }> {
  const executable = findChromium();
  if (!executable) throw new Error('no Chromium found (set CHROMIUM_PATH)');
  // One browser (and profile) per tab: tabs of one profile share its storage, and with two URLs on one
  // command line no step trained in 3 minutes (2026-11-24), so each tab is its own volunteer here.
  const browsers = Array.from({ length: count }, () => {
    const profile = mkdtempSync(join(tmpdir(), 'tabswarm-bench-tab-'));
    const args = [...SWARM_CHROMIUM_ARGS, '--headless', `--user-data-dir=${profile}`, '--window-size=900,700'];
    const child: ChildProcess = spawn(executable, [...args, url], { stdio: 'ignore' });
    const exited = new Promise<void>((done) => {
      child.once('exit', () => done());
      child.once('error', () => done()); // not started: nothing to stop
    });
    return { child, profile, exited };
  });
  return {
    async close() {
      for (const { child, profile, exited } of browsers) {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill('SIGTERM');
          const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
          await exited;
          clearTimeout(timer);
        }
        rmSync(profile, { recursive: true, force: true });
      }
    },
  };
}
