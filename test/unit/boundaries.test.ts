/**
 * The import boundaries of docs/boundaries.md, as dependency-cruiser checks them with the repository's
 * own `.dependency-cruiser.cjs`: a small tree with one wrong-way import per rule must report exactly
 * those, and the real tree must report none. (About 10–20 s: it parses every source file once.)
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { cruise, type ICruiseOptions, type IConfiguration, type ICruiseResult } from 'dependency-cruiser';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const config = createRequire(import.meta.url)(join(ROOT, '.dependency-cruiser.cjs')) as IConfiguration;

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
  return result.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`).sort();
}

describe('import boundaries (dependency-cruiser)', () => {
  const fixture = mkdtempSync(join(tmpdir(), 'tabswarm-boundaries-'));
  afterAll(() => rmSync(fixture, { recursive: true, force: true }));

  it('reports each wrong-way import of a small tree, and only those', async () => {
    const files: Record<string, string> = {
      'core/protocol/control.ts': 'export const v = 1;\n',
      'coordinator/core/leaky.ts':
        "import { readFileSync } from 'node:fs';\nimport { s } from '../server';\nexport const x = [readFileSync, s];\n",
      'coordinator/http/server.ts':
        "import { v } from './core/protocol';\nimport { page } from '../web/page';\nimport { r } from '../verifier/recompute';\nexport const s = [v, page, r];\n",
      'node/idx.ts': 'export const d = 1;\n',
      'verifier/recompute.ts':
        "import { v } from '../coordinator/core/protocol';\nimport { d } from '../coordinator/dataset';\nimport { k } from '../kernels/matmul';\nimport { s } from '../coordinator/server';\nimport { page } from '../web/page';\nexport const r = [v, d, k, s, page];\n",
      'kernels/ops/matmul.ts':
        "import { v } from '../coordinator/core/protocol';\nimport { page } from '../web/page';\nexport const k = [v, page];\n",
      'web/page.ts':
        "import { v } from '../coordinator/core/protocol';\nimport { k } from '../kernels/matmul';\nimport { s } from '../coordinator/server';\nimport { helper } from '../test/helper';\nexport const page = [v, k, s, helper];\n",
      'test/helper.ts':
        "import { s } from '../coordinator/server';\nimport { page } from '../web/page';\nexport const helper = [s, page];\n",
    };
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(fixture, path)), { recursive: true });
      writeFileSync(join(fixture, path), text);
    }
    expect(await violations(fixture, ['coordinator', 'kernels', 'web', 'verifier', 'test'])).toEqual([
      'coordinator-not-into-web-or-kernels: coordinator/http/server.ts -> web/page.ts',
      'coordinator-spawns-verifier: coordinator/http/server.ts -> verifier/recompute.ts',
      'core-is-pure: coordinator/core/leaky.ts -> coordinator/http/server.ts',
      'core-no-node-apis: coordinator/core/leaky.ts -> fs',
      'kernels-only-core: kernels/ops/matmul.ts -> web/page.ts',
      'product-not-into-test-or-bench: web/page.ts -> test/helper.ts',
      'verifier-only-kernels-and-core: verifier/recompute.ts -> coordinator/http/server.ts',
      'verifier-only-kernels-and-core: verifier/recompute.ts -> web/page.ts',
      'web-only-kernels-and-core: web/page.ts -> coordinator/http/server.ts',
    ]);
  });

  it('finds none in the real tree', async () => {
    expect(await violations(ROOT, ['coordinator', 'web', 'kernels', 'verifier', 'bin', 'test', 'bench'])).toEqual([]);
  }, 120_000);
});
