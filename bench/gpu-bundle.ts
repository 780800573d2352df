/**
 * `npm run bench:gpu:bundle -- [--out DIR] [--platform linux-x64] [--node PATH]`: bench:gpu as a folder
 * that runs on a GPU machine with no Node install and no network (docs/gpu.md):
 * - `bench-gpu.mjs`: bench/gpu.ts and everything it imports (kernels, TF.js, the WGSL as strings) in one
 *   file, bundled by esbuild (in node_modules as a dependency of Vite's toolchain);
 * - `dawn.node`: the `webgpu` package's Dawn build for `--platform` (the bundle loads it from beside
 *   itself instead of from node_modules);
 * - `lib/libvulkan.so.1`: the Vulkan loader Chromium ships, used only where the machine has none (the
 *   GPU driver's own Vulkan driver is still the machine's);
 * - `run.sh`: runs the bench with `./node` (unpacked from `node.xz` if that is what was carried), else the
 *   `node` on PATH, and keeps the output in `result-<time>.txt`;
 * - with `--node PATH`, that Node binary compressed as `node.xz` (xz -9: this machine's 99 MB Node 20 becomes
 *   24 MB). Without it the folder holds no Node, and one must be carried beside it.
 * The folder is what to copy; `run.sh` is the one command.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { build, type Plugin } from 'esbuild';

const REPO = resolve(import.meta.dirname, '..');
const { values: flags } = parseArgs({
  options: {
    out: { type: 'string', default: join(REPO, 'dist-bench-gpu') },
    platform: { type: 'string', default: `${process.platform}-${process.arch}` },
    node: { type: 'string' },
  },
});

/** `import code from './x.wgsl?raw'` (a Vite feature the kernels use): the file's text. */
const rawText: Plugin = {
  name: 'raw-text',
  setup(b) {
    b.onResolve({ filter: /\?raw$/ }, (args) => ({
      path: resolve(args.resolveDir, args.path.slice(0, -'?raw'.length)),
      namespace: 'raw-text',
    }));
    b.onLoad({ filter: /.*/, namespace: 'raw-text' }, (args) => ({
      contents: `export default ${JSON.stringify(readFileSync(args.path, 'utf8'))};`,
      loader: 'js',
    }));
  },
};

/** `webgpu` → the dawn.node beside the bundle (the package would look in its own dist/ folder). */
const dawnBeside: Plugin = {
  name: 'dawn-beside',
  setup(b) {
    b.onResolve({ filter: /^webgpu$/ }, () => ({ path: 'webgpu', namespace: 'dawn-beside' }));
    b.onLoad({ filter: /.*/, namespace: 'dawn-beside' }, () => ({
      contents: [
        "import { createRequire } from 'node:module';",
        "const dawn = createRequire(import.meta.url)('./dawn.node');",
        'export const create = dawn.create;',
        'export const globals = dawn.globals;',
      ].join('\n'),
      loader: 'js',
    }));
  },
};

const RUN_SH = `#!/bin/sh
# bench:gpu, portable (made by \`npm run bench:gpu:bundle\` in the tabswarm repository; docs/gpu.md).
# Usage: ./run.sh [bench options, e.g. --sizes 512,1024,4096]. Output: stdout and result-<time>.txt here.
set -e
DIR=$(cd "$(dirname "$0")" && pwd)
NODE="$DIR/node"
if [ ! -x "$NODE" ] && [ -f "$DIR/node.xz" ]; then xz -dkc "$DIR/node.xz" > "$NODE" && chmod +x "$NODE"; fi
if [ ! -x "$NODE" ]; then NODE=$(command -v node || true); fi
if [ -z "$NODE" ]; then echo "no Node: put a Node binary (20 or newer) at $DIR/node or node.xz" >&2; exit 2; fi
# The Vulkan loader: the machine's, else the one carried in lib/ (the GPU's Vulkan driver is the machine's).
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\\.so\\.1 '; then
  export LD_LIBRARY_PATH="$DIR/lib\${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
exec "$NODE" "$DIR/bench-gpu.mjs" --out "$DIR/result-$(date +%Y%m%d-%H%M%S).txt" "$@"
`;

async function main(): Promise<void> {
  const out = resolve(flags.out);
  const dawn = join(REPO, 'node_modules/webgpu/dist', flags.platform, 'dawn.node');
  if (!existsSync(dawn)) throw new Error(`no Dawn build for ${flags.platform} at ${dawn}`);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(join(out, 'lib'), { recursive: true });
  await build({
    entryPoints: [join(REPO, 'bench/gpu.ts')],
    outfile: join(out, 'bench-gpu.mjs'),
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    plugins: [rawText, dawnBeside],
    // CommonJS packages inside the bundle may call require(); an ES module has none of its own.
    banner: {
      js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
    },
    logLevel: 'warning',
  });
  copyFileSync(dawn, join(out, 'dawn.node'));
  const loader = '/usr/lib/chromium/libvulkan.so.1';
  if (existsSync(loader)) copyFileSync(loader, join(out, 'lib/libvulkan.so.1'));
  writeFileSync(join(out, 'run.sh'), RUN_SH);
  chmodSync(join(out, 'run.sh'), 0o755);
  if (flags.node) {
    execFileSync('sh', ['-c', `xz -9 -T0 -c "${flags.node}" > "${join(out, 'node.xz')}"`]);
  }
  const size = (f: string) =>
    existsSync(join(out, f)) ? `${(statSync(join(out, f)).size / 1e6).toFixed(1)} MB` : 'absent';
  console.log(
    `${out}: bench-gpu.mjs ${size('bench-gpu.mjs')}, dawn.node ${size('dawn.node')} (${flags.platform}), ` +
      `lib/libvulkan.so.1 ${size('lib/libvulkan.so.1')}, node.xz ${size('node.xz')}, run.sh`,
  );
  console.log(`copy the folder to the GPU machine and run ${join(basename(out), 'run.sh')} there`);
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exitCode = 1;
});
