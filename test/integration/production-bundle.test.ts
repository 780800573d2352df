/**
 * The hostile test tab (test/browser/pages/hostile/) never ships: the production build (`vite build`
 * with the project's vite.config.ts, as `npm start` runs it) contains none of its code. Checked on a
 * fresh build, with a control build that does include the hostile page, so the search is shown to
 * find the markers when they are there.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { build } from 'vite';
import { describe, expect, it } from 'vitest';
import { HOSTILE_MODES, HOSTILE_TAB_MARKER } from '../browser/pages/hostile/attacks';
import { makeTempDir } from '../support/fake-dataset';
import { HOSTILE_PAGE } from '../support/hostile-tab';

const REPO_ROOT = resolve(import.meta.dirname, '../..');

/** Strings only the hostile tab's code holds. */
const MARKERS = [HOSTILE_TAB_MARKER, 'tabswarmHostile', ...HOSTILE_MODES.filter((m) => m.includes('-'))];

async function buildInto(extraInputs: Record<string, string> = {}): Promise<string> {
  const outDir = join(makeTempDir('tabswarm-bundle-'), 'dist');
  await build({
    root: REPO_ROOT,
    configFile: join(REPO_ROOT, 'vite.config.ts'),
    logLevel: 'error',
    build: { outDir, emptyOutDir: true, rollupOptions: { input: extraInputs } },
  });
  return outDir;
}

/** Every built file's text, by path relative to `dir`. */
function builtText(dir: string): Map<string, string> {
  const files = readdirSync(dir, { recursive: true, withFileTypes: true }).filter((f) => f.isFile());
  return new Map(
    files.map((f) => [
      join(f.parentPath, f.name).slice(dir.length + 1),
      readFileSync(join(f.parentPath, f.name), 'latin1'),
    ]),
  );
}

function markersIn(files: Map<string, string>): string[] {
  return [...files].flatMap(([path, text]) => MARKERS.filter((m) => text.includes(m)).map((m) => `${path}: ${m}`));
}

describe('the production bundle', () => {
  it('holds no hostile-tab code (a build that adds the hostile page does)', async () => {
    const [production, control] = await Promise.all([
      buildInto(),
      buildInto({ hostile: join(REPO_ROOT, HOSTILE_PAGE) }),
    ]);
    const shipped = builtText(production);
    expect([...shipped.keys()]).toContain('index.html');
    // The seam the hostile page uses is in the product (it decorates nothing unless a page passes a function) …
    expect([...shipped.values()].some((text) => text.includes('wrapPorts'))).toBe(true);
    // … the attacks are not.
    expect(markersIn(shipped)).toEqual([]);
    const withHostile = markersIn(builtText(control));
    expect(withHostile.some((hit) => hit.endsWith(HOSTILE_TAB_MARKER))).toBe(true);
    expect(withHostile.some((hit) => hit.endsWith('tabswarmHostile'))).toBe(true);
  }, 120_000);
});
