/**
 * The longest functions of the product (coordinator/, web/, kernels/), by lines from the declaration
 * to the closing brace: `npx tsx scripts/function-lengths.ts [N] [--over 80] [--dirs bench,test] [--root DIR]`. Used to keep product
 * functions under ~80 lines (docs/boundaries.md); nested functions count inside their parent too.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

const rootAt = process.argv.indexOf('--root');
const ROOT = rootAt >= 0 ? process.argv[rootAt + 1] : join(import.meta.dirname, '..');
const dirsAt = process.argv.indexOf('--dirs');
const PRODUCT = dirsAt >= 0 ? process.argv[dirsAt + 1].split(',') : ['coordinator', 'web', 'kernels', 'verifier'];

function* sources(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* sources(path);
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) yield path;
  }
}

interface Row {
  lines: number;
  where: string;
  name: string;
}

function nameOf(node: ts.Node, file: ts.SourceFile): string {
  if ((ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node)) && node.name) return node.name.getText(file);
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  if (ts.isVariableDeclaration(node.parent)) return node.parent.name.getText(file);
  if (ts.isPropertyAssignment(node.parent) || ts.isPropertyDeclaration(node.parent))
    return node.parent.name.getText(file);
  return '(anonymous)';
}

const rows: Row[] = [];
for (const top of PRODUCT) {
  for (const path of sources(join(ROOT, top))) {
    const file = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node) => {
      if (ts.isFunctionLike(node) && 'body' in node && node.body) {
        const start = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
        const end = file.getLineAndCharacterOfPosition(node.getEnd()).line;
        rows.push({ lines: end - start + 1, where: `${relative(ROOT, path)}:${start + 1}`, name: nameOf(node, file) });
      }
      ts.forEachChild(node, visit);
    };
    visit(file);
  }
}
rows.sort((a, b) => b.lines - a.lines);
const overAt = process.argv.indexOf('--over');
const over = overAt >= 0 ? Number(process.argv[overAt + 1]) : null;
const n = Number(process.argv[2]) || 15;
for (const r of over === null ? rows.slice(0, n) : rows.filter((r) => r.lines > over))
  console.log(`${String(r.lines).padStart(5)}  ${r.name.padEnd(28)} ${r.where}`);
