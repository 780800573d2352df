/**
 * Headless Chromium for swarms, with WebGPU on SwiftShader where there is no GPU (docs/chromium.md).
 *
 * The one flag list and lookup order of the project: `test/support/browser.ts` re-exports them.
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { NoChromiumError } from './swarm-errors';

/** Flags that gave a working WebGPU adapter headless on a CPU-only machine (docs/chromium.md). */
export const SWARM_CHROMIUM_ARGS: readonly string[] = [
  '--no-sandbox',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-default-apps',
  '--enable-unsafe-webgpu',
  '--enable-features=Vulkan',
  '--use-vulkan=swiftshader',
  '--use-webgpu-adapter=swiftshader',
  '--use-angle=swiftshader',
  // Every tab of a swarm is a background tab: its timers (heartbeats) must not be throttled.
  '--disable-background-timer-throttling',
  '--disable-renderer-backgrounding',
  '--disable-backgrounding-occluded-windows',
];

/** `CHROMIUM_PATH`, else Debian's chromium, else Playwright's own browser; undefined when none exists. */
export function findChromium(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const candidates = [env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'];
  try {
    candidates.push(chromium.executablePath());
  } catch {
    // playwright-core throws when it has no browser registry entry: not installed.
  }
  return candidates.find((p): p is string => !!p && existsSync(p));
}

/**
 * Launches the Chromium `findChromium` finds with the swarm's flags, plus `args`; `wrap` turns its path
 * into the one to execute (the network test bed runs it inside a namespace: tools/netbed/scene.ts).
 */
export async function launchSwarmChromium(
  opts: { args?: readonly string[]; wrap?: (executablePath: string) => string } = {},
): Promise<Browser> {
  const executablePath = findChromium();
  if (!executablePath) {
    throw new NoChromiumError(
      `no Chromium found${process.env.CHROMIUM_PATH ? ` (CHROMIUM_PATH=${process.env.CHROMIUM_PATH} does not exist)` : ''}: ` +
        'set CHROMIUM_PATH, apt-get install chromium, or npx playwright install chromium',
    );
  }
  // Signals are ours: Ctrl-C must close the tabs (goodbyes, the report) before the browser goes.
  // Playwright still kills the browser if this process exits without closing it.
  return chromium.launch({
    executablePath: opts.wrap ? opts.wrap(executablePath) : executablePath,
    headless: true,
    args: [...SWARM_CHROMIUM_ARGS, ...(opts.args ?? [])],
    handleSIGINT: false,
    handleSIGTERM: false,
    handleSIGHUP: false,
  });
}
