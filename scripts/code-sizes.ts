/**
 * How long the product's files and functions are: `npx tsx scripts/code-sizes.ts [N] [--over 60]
 * [--dirs core,web] [--files] [--root DIR]` lists the longest functions (declaration to closing brace;
 * nested functions count inside their parent too), or with `--files` the longest files.
 * `test/unit/code-sizes.test.ts` holds the product to the limits below (docs/boundaries.md): a file or
 * function may pass its limit only with a `size-exception: why` comment (for a function, on a line of
 * its own right above it; for a file, anywhere in its first doc comment).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

/** The product's top-level folders (tools/, bench/, test/ and scripts/ are not product). */
export const PRODUCT_DIRS = ['core', 'coordinator', 'node', 'web', 'kernels', 'verifier', 'headless'];
export const MAX_FILE_LINES = 500;
export const MAX_FUNCTION_LINES = 60;
const EXCEPTION = /size-exception:\s*\S/;

export interface SizeRow {
  lines: number;
  /** `path:line`, the path relative to the root. */
  where: string;
  name: string;
  /** A `size-exception:` comment says why it may be long. */
  excused: boolean;
}

function* sources(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* sources(path);
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) yield path;
  }
}

function nameOf(node: ts.Node, file: ts.SourceFile): string {
  if ((ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node)) && node.name) return node.name.getText(file);
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  if (ts.isVariableDeclaration(node.parent)) return node.parent.name.getText(file);
  if (ts.isPropertyAssignment(node.parent) || ts.isPropertyDeclaration(node.parent))
    return node.parent.name.getText(file);
  return '(anonymous)';
}

/** The statement a function is declared by (the comment above it belongs to that statement). */
function declaringNode(node: ts.Node): ts.Node {
  let n = node;
  while (n.parent && !ts.isSourceFile(n.parent) && !ts.isBlock(n.parent) && !ts.isClassLike(n.parent)) n = n.parent;
  return n;
}

/** Every function with a body in the given folders, longest first. */
export function functionSizes(root: string, dirs: readonly string[] = PRODUCT_DIRS): SizeRow[] {
  const rows: SizeRow[] = [];
  for (const top of dirs) {
    for (const path of sources(join(root, top))) {
      const text = readFileSync(path, 'utf8');
      const file = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
      const visit = (node: ts.Node) => {
        if (ts.isFunctionLike(node) && 'body' in node && node.body) {
          const start = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
          const end = file.getLineAndCharacterOfPosition(node.getEnd()).line;
          const decl = declaringNode(node);
          const leading = text.slice(decl.getFullStart(), decl.getStart(file));
          rows.push({
            lines: end - start + 1,
            where: `${relative(root, path)}:${start + 1}`,
            name: nameOf(node, file),
            excused: EXCEPTION.test(leading),
          });
        }
        ts.forEachChild(node, visit);
      };
      visit(file);
    }
  }
  return rows.sort((a, b) => b.lines - a.lines);
}

/** Every TypeScript file in the given folders by lines, longest first. */
export function fileSizes(root: string, dirs: readonly string[] = PRODUCT_DIRS): SizeRow[] {
  const rows: SizeRow[] = [];
  for (const top of dirs) {
    for (const path of sources(join(root, top))) {
      const text = readFileSync(path, 'utf8');
      const firstComment = /^\s*\/\*\*[\s\S]*?\*\//.exec(text)?.[0] ?? '';
      rows.push({
        lines: text.split('\n').length - (text.endsWith('\n') ? 1 : 0),
        where: relative(root, path),
        name: relative(root, path),
        excused: EXCEPTION.test(firstComment),
      });
    }
  }
  return rows.sort((a, b) => b.lines - a.lines);
}

if (process.argv[1] && import.meta.filename === process.argv[1]) {
  const arg = (name: string) => {
    const at = process.argv.indexOf(name);
    return at >= 0 ? process.argv[at + 1] : undefined;
  };
  const root = arg('--root') ?? join(import.meta.dirname, '..');
  const dirs = arg('--dirs')?.split(',') ?? PRODUCT_DIRS;
  const rows = process.argv.includes('--files') ? fileSizes(root, dirs) : functionSizes(root, dirs);
  const over = arg('--over');
  const n = Number(process.argv[2]) || 15;
  for (const r of over === undefined ? rows.slice(0, n) : rows.filter((r) => r.lines > Number(over)))
    console.log(
      `${String(r.lines).padStart(5)}  ${r.name.padEnd(28)} ${r.where}${r.excused ? '  (size-exception)' : ''}`,
    );
}
