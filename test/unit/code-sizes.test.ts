/**
 * The product's size limits (docs/boundaries.md): no file over 500 lines and no function over 60 lines,
 * unless a `size-exception: why` comment says why (scripts/code-sizes.ts measures both).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fileSizes, functionSizes, MAX_FILE_LINES, MAX_FUNCTION_LINES } from '../../scripts/code-sizes';

const ROOT = resolve(import.meta.dirname, '../..');
const over = (rows: ReturnType<typeof fileSizes>, max: number) =>
  rows.filter((r) => r.lines > max && !r.excused).map((r) => `${r.lines} ${r.name} ${r.where}`);

/** Parsing every product file takes ~2 s on a quiet machine, 10 s on a loaded one. */
const PARSE_TIMEOUT_MS = 60_000;

describe('product code sizes', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tabswarm-sizes-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('measures a function and a file, and honours an exception only where it is written', () => {
    mkdirSync(join(dir, 'core'));
    const body = Array.from({ length: 61 }, (_, i) => `  const v${i} = ${i};`).join('\n');
    writeFileSync(
      join(dir, 'core', 'a.ts'),
      `/** A file. */\nexport function long() {\n${body}\n}\n// size-exception: one table, read top to bottom\nexport function excused() {\n${body}\n}\n`,
    );
    const rows = functionSizes(dir, ['core']);
    expect(rows.map((r) => [r.name, r.lines, r.excused])).toEqual([
      ['long', 63, false],
      ['excused', 63, true],
    ]);
    expect(fileSizes(dir, ['core'])).toEqual([{ lines: 128, where: 'core/a.ts', name: 'core/a.ts', excused: false }]);
  });

  it(
    `has no product file over ${MAX_FILE_LINES} lines without a reason`,
    () => {
      expect(over(fileSizes(ROOT), MAX_FILE_LINES)).toEqual([]);
    },
    PARSE_TIMEOUT_MS,
  );

  it(
    `has no product function over ${MAX_FUNCTION_LINES} lines without a reason`,
    () => {
      expect(over(functionSizes(ROOT), MAX_FUNCTION_LINES)).toEqual([]);
    },
    PARSE_TIMEOUT_MS,
  );
});
