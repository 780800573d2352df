/**
 * GPU benchmark: `npm run bench:gpu -- [--sizes 512,1024,4096] [--reps 3] [--models mlp:128,cnn:32,gpt-tiny:4]
 * [--parts peak,matmul,models] [--budget-ms 3000] [--sample-ms 200] [--no-tfjs] [--write] [--out FILE]`.
 *
 * In Node with Dawn (the `webgpu` package) on whatever adapter the machine has — a real GPU where there
 * is one, else SwiftShader (bench/lib/gpu-device.ts) — it measures:
 * - a float32 FMA peak of the adapter (bench/lib/fma-peak.wgsl), so matmul is a fraction of something
 *   measured on the same adapter, not of a datasheet;
 * - GFLOP/s of every matmul variant the autotuner may choose, float32 and with half operands (f16 mode),
 *   at each size (bench/lib/gpu-matmul.ts);
 * - the training step of `mlp`, `cnn` and `gpt-tiny`: our kernels with the defaults and with the
 *   autotuner's choice, float32 and f16, beside TF.js's WebGPU backend on the same adapter
 *   (bench/lib/gpu-models.ts).
 * It prints tables and one JSON line `{"bench":"gpu",…}` (also to `--out FILE`), and with `--write` rewrites
 * the generated block of `## bench:gpu` in bench/RESULTS.md. On a software adapter the defaults shrink (no
 * n = 4096: a product takes minutes there; gpt-tiny at batch 1) unless the options say otherwise.
 * bench/gpu-bundle.ts packs this file into one script for a GPU machine without Node or network (docs/gpu.md).
 */
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { openBenchGpu, rerunOnSwiftShader, type AdapterReport } from './lib/gpu-device';
import { benchMatmul, measurePeak, type MatmulResults } from './lib/gpu-matmul';
import { benchModel, startTfjs, tfjsVersion, type ModelRow } from './lib/gpu-models';
import { goals, renderTables, summarize, writeGpuResults, type GpuResult } from './lib/gpu-report';

const { values: flags } = parseArgs({
  options: {
    sizes: { type: 'string' },
    reps: { type: 'string', default: '3' },
    models: { type: 'string' },
    parts: { type: 'string', default: 'peak,matmul,models' },
    'budget-ms': { type: 'string', default: '3000' },
    'sample-ms': { type: 'string', default: '200' },
    'no-tfjs': { type: 'boolean', default: false },
    write: { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});

const T0 = performance.now();
const log = (line: string): void =>
  void process.stderr.write(`[${((performance.now() - T0) / 1000).toFixed(0).padStart(4)} s] ${line}\n`);
const numbers = (text: string) => text.split(',').filter(Boolean).map(Number);

/** The sizes and models to run: the options, else a GPU's defaults, smaller on a software adapter. */
function plan(adapter: AdapterReport): { sizes: number[]; models: [string, number][] } {
  const software = adapter.isFallback;
  const sizes = flags.sizes ? numbers(flags.sizes) : software ? [512, 1024] : [512, 1024, 4096];
  const models = (flags.models ?? (software ? 'mlp:128,cnn:32,gpt-tiny:1' : 'mlp:128,cnn:32,gpt-tiny:4'))
    .split(',')
    .filter(Boolean)
    .map((m): [string, number] => {
      const [name, batch] = m.split(':');
      return [name, Number(batch ?? 1)];
    });
  if (software && !flags.sizes)
    log('software adapter: n = 4096 left out (minutes per product here; --sizes 4096 runs it)');
  return { sizes, models };
}

async function main(): Promise<number> {
  const opened = await openBenchGpu();
  if (!opened) {
    const code = rerunOnSwiftShader();
    if (code !== null) return code;
    console.error('no WebGPU adapter: install a GPU driver with Vulkan (libvulkan1), or run where SwiftShader is');
    return 3;
  }
  const { gpu, adapter } = opened;
  const parts = new Set(flags.parts.split(','));
  const { sizes, models } = plan(adapter);
  const reps = Number(flags.reps);
  log(
    `adapter ${JSON.stringify(adapter)}; load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} on ${cpus().length} cores`,
  );
  const peak = parts.has('peak') ? (await measurePeak(gpu)).gflops : Number.NaN;
  log(`FMA peak ${peak.toFixed(2)} GFLOP/s`);
  // Pruning slow variants saves minutes on SwiftShader; on a GPU every variant runs at every size, since a
  // tile that loses at n = 512 (launch-bound there) can win at 4096 (an H100 run pruned every subgroup tile).
  const keep = adapter.isFallback ? 0.5 : 0;
  const matmul: MatmulResults = parts.has('matmul')
    ? await benchMatmul(gpu, { sizes, reps, sampleMs: Number(flags['sample-ms']), keep, log })
    : { sizes: [], rows: [] };
  const tfjsProblem = flags['no-tfjs'] ? 'not run (--no-tfjs)' : await startTfjs();
  if (tfjsProblem) log(`TF.js: ${tfjsProblem}`);
  const rows: ModelRow[] = [];
  if (parts.has('models')) {
    for (const [name, batch] of models) {
      const row = await benchModel(gpu, name, batch, {
        reps,
        budgetMs: Number(flags['budget-ms']),
        tfjs: !tfjsProblem,
        log,
      });
      rows.push(tfjsProblem ? { ...row, tfjs_note: tfjsProblem } : row);
      log(`${name} batch ${batch}: ${JSON.stringify(row)}`);
    }
  }
  const base = {
    bench: 'gpu' as const,
    adapter,
    node: process.version,
    tfjs: tfjsProblem ? null : tfjsVersion,
    peak_gflops: Number(peak.toPrecision(4)),
    matmul: {
      sizes: matmul.sizes,
      variants: matmul.rows.map((r) => ({
        ...r,
        gflops: r.gflops.map((g) => (g === null ? null : Number(g.toPrecision(4)))),
      })),
    },
    best: matmul.sizes.length ? summarize(matmul, peak) : [],
    models: rows,
    seconds: (performance.now() - T0) / 1000,
    command: `npm run bench:gpu${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
  };
  const result: GpuResult = { ...base, goals: base.best.length ? goals(base) : [] };
  const tables = renderTables(result);
  const json = JSON.stringify(result);
  process.stdout.write(`${tables}\n${json}\n`);
  if (flags.out) writeFileSync(flags.out, `${tables}\n${json}\n`);
  if (flags.write) {
    writeGpuResults(resolve(import.meta.dirname ?? '.', 'RESULTS.md'), result, tables);
    log('wrote the bench:gpu section of bench/RESULTS.md');
  }
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : err);
    process.exit(1);
  },
);
