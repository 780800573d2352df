/**
 * The import boundaries of docs/boundaries.md, as dependency-cruiser checks them with the repository's
 * own `.dependency-cruiser.cjs`: a small tree with one wrong-way import per rule (a circle among them)
 * must report exactly those, and the real tree must report none. (About 10–20 s: it parses every source
 * file once.)
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { cruise, type ICruiseOptions, type IConfiguration, type ICruiseResult } from 'dependency-cruiser';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const config = createRequire(import.meta.url)(join(ROOT, '.dependency-cruiser.cjs')) as IConfiguration;
/** Every top-level folder of code, product or not (package.json's check:boundaries cruises the same). */
const FOLDERS = [
  'core',
  'coordinator',
  'node',
  'tools',
  'web',
  'kernels',
  'verifier',
  'headless',
  'bin',
  'test',
  'bench',
  'scripts',
];

async function violations(baseDir: string, roots: string[]): Promise<string[]> {
  const { options } = config;
  const cruiseOptions: ICruiseOptions = {
    ...options,
    tsConfig: undefined,
    baseDir,
    validate: true,
    ruleSet: { forbidden: config.forbidden },
  };
  const result = (await cruise(roots, cruiseOptions)).output as ICruiseResult;
  return [...new Set(result.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`))].sort();
}

const imports = (...names: string[]) =>
  `${names.map((n, i) => `import { x as x${i} } from '${n}';`).join('\n')}\nexport const x = [${names.map((_, i) => `x${i}`).join(', ')}];\n`;

/** One file per place, each importing what its rule forbids (and something it may import, which must pass). */
const FIXTURE: Record<string, string> = {
  'node_modules/zod/package.json': '{"name":"zod","main":"index.js"}',
  'node_modules/zod/index.js': 'export const x = 1;\n',
  'node_modules/left-pad/package.json': '{"name":"left-pad","main":"index.js"}',
  'node_modules/left-pad/index.js': 'export const x = 1;\n',
  'node_modules/playwright-core/package.json': '{"name":"playwright-core","main":"index.js"}',
  'node_modules/playwright-core/index.js': 'export const x = 1;\n',
  'package.json':
    '{"name":"fixture","dependencies":{"zod":"1","left-pad":"1"},"devDependencies":{"playwright-core":"1"}}',
  'core/protocol/control.ts': imports('zod'),
  'core/training/leaky.ts': imports('node:fs', 'left-pad', '../../coordinator/http/server', '../protocol/control'),
  'coordinator/machine/machine.ts': imports('node:crypto', '../runtime/store', '../../core/protocol/control'),
  'coordinator/runtime/store.ts': imports('../../node/idx'),
  'coordinator/http/server.ts': imports('../../web/page', '../../verifier/recompute', '../../tools/swarm/cli'),
  'coordinator/admin/a.ts': imports('./b'),
  'coordinator/admin/b.ts': imports('./a'),
  'coordinator/runtime/other.ts': 'export const x = 1;\n',
  'node/idx.ts': imports('../core/protocol/control', '../coordinator/runtime/other'),
  'verifier/recompute.ts': imports(
    '../core/protocol/control',
    '../node/idx',
    '../kernels/ops/matmul',
    '../coordinator/runtime/other',
  ),
  'kernels/ops/matmul.ts': imports('../../core/protocol/control', '../../node/idx'),
  'web/page.ts': imports('../core/protocol/control', '../kernels/ops/matmul', '../node/idx', '../test/helper'),
  'web/volunteer/main.ts': imports('../worker/worker'),
  'web/worker/worker.ts': imports('../volunteer/view', 'playwright-core'),
  'web/volunteer/view.ts': 'export const x = 1;\n',
  'headless/cli.ts': imports('../web/page', '../kernels/ops/matmul', '../node/idx', '../coordinator/runtime/other'),
  'coordinator/runtime/local-workers.ts': imports('../../headless/cli'),
  'tools/swarm/cli.ts': imports('../../coordinator/runtime/other', 'playwright-core'),
  'test/helper.ts': imports('../coordinator/runtime/other', 'playwright-core'),
};

describe('import boundaries (dependency-cruiser)', () => {
  const fixture = mkdtempSync(join(tmpdir(), 'tabswarm-boundaries-'));
  afterAll(() => rmSync(fixture, { recursive: true, force: true }));

  it('reports each wrong-way import of a small tree, one or more per rule, and only those', async () => {
    for (const [path, text] of Object.entries(FIXTURE)) {
      mkdirSync(dirname(join(fixture, path)), { recursive: true });
      writeFileSync(join(fixture, path), text);
    }
    const found = await violations(fixture, [
      'core',
      'coordinator',
      'node',
      'verifier',
      'kernels',
      'web',
      'headless',
      'tools',
      'test',
    ]);
    expect(found).toEqual([
      'coordinator-not-into-web-or-kernels: coordinator/http/server.ts -> web/page.ts',
      'core-imports-nothing-of-the-project: core/training/leaky.ts -> coordinator/http/server.ts',
      'core-no-node-apis: core/training/leaky.ts -> fs',
      'core-only-zod-and-noble: core/training/leaky.ts -> node_modules/left-pad/index.js',
      'headless-is-a-process: coordinator/runtime/local-workers.ts -> headless/cli.ts',
      'headless-only-web-kernels-core-node: headless/cli.ts -> coordinator/runtime/other.ts',
      'kernels-only-core: kernels/ops/matmul.ts -> node/idx.ts',
      'machine-no-node-apis: coordinator/machine/machine.ts -> crypto',
      'machine-only-core: coordinator/machine/machine.ts -> coordinator/runtime/store.ts',
      'no-circular: coordinator/admin/a.ts -> coordinator/admin/b.ts',
      'node-only-core: node/idx.ts -> coordinator/runtime/other.ts',
      'product-no-dev-dependencies: web/worker/worker.ts -> node_modules/playwright-core/index.js',
      'product-not-into-tools-bench-or-test: coordinator/http/server.ts -> tools/swarm/cli.ts',
      'product-not-into-tools-bench-or-test: web/page.ts -> test/helper.ts',
      'verifier-is-a-process: coordinator/http/server.ts -> verifier/recompute.ts',
      'verifier-only-kernels-core-node: verifier/recompute.ts -> coordinator/runtime/other.ts',
      'web-only-kernels-and-core: web/page.ts -> node/idx.ts',
      'worker-not-into-pages: web/worker/worker.ts -> web/volunteer/view.ts',
    ]);
    // Every rule of the configuration has a fixture that breaks it (a rule that silently stopped matching fails here).
    const broken = new Set(found.map((line) => line.split(':')[0]));
    const rules = (config.forbidden ?? []).map((rule) => rule.name).filter((name) => name !== 'not-to-unresolvable');
    expect(rules.filter((name) => !broken.has(name!))).toEqual([]);
  });

  it('finds none in the real tree', async () => {
    expect(await violations(ROOT, FOLDERS)).toEqual([]);
  }, 120_000);
});
