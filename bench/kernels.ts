/**
 * Kernel benchmark: `npm run bench:kernels -- [--reps 5] [--sizes 256,512,1024] [--batches 128,512] [--tfjs-forms fused,plain]
 * [--transformer-batches 1,4] [--transformer-reps 3] [--parts matmul,mlp,transformer] [--probe] [--breakdown] [--no-write]`.
 *
 * Our WGSL kernels against TF.js's WebGPU backend in ONE headless Chromium page on the same adapter
 * (bench/pages/kernels-page.ts, served by a Vite dev server so it imports our TypeScript directly):
 * - square float32 matmul at each size, GFLOP/s, with several of our tile variants (WGSL override
 *   constants, with and without workgroup memory); the best variant per size is reported;
 * - a full mlp (784-256-128-10, ReLU, softmax cross-entropy, Adam) training step per batch size,
 *   samples/s: `Model.trainStep` (one submission) against `optimizer.minimize` in TF.js;
 * - a full gpt-tiny training step (forward, cross-entropy, backward, Adam) per batch of windows of 128
 *   bytes, tokens/s: `Model.trainTokens` against the same model written in TF.js ops
 *   (test/support/reference-transformer-tfjs.ts) under `optimizer.minimize` (`transformer_step`).
 * Samples alternate between the sides (and the order flips every repetition), so drifts of this
 * shared machine's speed hit both; figures are medians. No sample includes a read-back: each waits
 * for its device queue to go idle (see the page). Prints a table and one JSON line
 * `{"bench":"kernels",...}` and rewrites the generated part of the `## bench:kernels` section of
 * bench/RESULTS.md. This file runs the parts; the rows, tables and the RESULTS.md block are
 * bench/lib/kernels-report.ts.
 */
import { cpus, loadavg } from 'node:os';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { Page } from 'playwright-core';
import type { MatmulTile } from '../kernels/ops/matmul';
import { launchChromium, watchPage } from '../test/support/browser';
import { REPO_ROOT, startViteServer, type TestViteServer } from '../test/support/vite-server';
import {
  adapterName,
  type MatmulResults,
  type MatmulRow,
  renderSection,
  renderTable,
  renderTransformerTable,
  type TableSettings,
  type TrainRow,
  type TransformerRow,
  writeResults,
} from './lib/kernels-report';
import { median } from './lib/topology-figures';
import type { AdapterReport, Side, TfjsForm } from './pages/kernel-bench-api';

const { values: flags } = parseArgs({
  options: {
    reps: { type: 'string', default: '5' },
    sizes: { type: 'string', default: '256,512,1024' },
    batches: { type: 'string', default: '128,512' },
    'no-write': { type: 'boolean', default: false },
    /** Also time the bench-only interleaved-column matmul (bench/pages/interleaved-matmul.ts). */
    probe: { type: 'boolean', default: false },
    /** Also time each dispatch of our training step alone (where our step's time goes). */
    breakdown: { type: 'boolean', default: false },
    /** TF.js model forms to race (the faster counts): fused (tf.fused.matMul) and/or plain (matMul/add/relu). */
    'tfjs-forms': { type: 'string', default: 'fused,plain' },
    /** Windows per gpt-tiny step (a step of 2 takes seconds on SwiftShader, TF.js's many more). */
    'transformer-batches': { type: 'string', default: '1,4' },
    'transformer-reps': { type: 'string', default: '3' },
    /** Which parts to run; bench/RESULTS.md is rewritten only when all three ran. */
    parts: { type: 'string', default: 'matmul,mlp,transformer' },
    /** Budget (ms) of the autotuner whose choice is timed beside the default kernels (0: none). */
    'autotune-ms': { type: 'string', default: '3000' },
  },
});
const PARTS = new Set(flags.parts.split(',').filter(Boolean));
if ([...PARTS].some((p) => !['matmul', 'mlp', 'transformer'].includes(p))) throw new Error(`--parts: ${flags.parts}`);
const TRANSFORMER_BATCHES = flags['transformer-batches'].split(',').filter(Boolean).map(Number);
const TRANSFORMER_REPS = Number(flags['transformer-reps']);
const REPS = Number(flags.reps);
const SIZES = flags.sizes.split(',').filter(Boolean).map(Number);
const BATCHES = flags.batches.split(',').filter(Boolean).map(Number);
const TFJS_FORMS = flags['tfjs-forms'].split(',').filter(Boolean) as TfjsForm[];
if (TFJS_FORMS.length === 0 || TFJS_FORMS.some((f) => f !== 'fused' && f !== 'plain'))
  throw new Error(`--tfjs-forms: ${flags['tfjs-forms']}`);
const RESULTS_PATH = resolve(import.meta.dirname, 'RESULTS.md');
const AUTOTUNE_MS = Number(flags['autotune-ms']);

interface Variant {
  name: string;
  tile: MatmulTile;
  /** Bench-only shader (bench/pages/interleaved-matmul.ts), timed with --probe, never reported as ours. */
  interleaved?: boolean;
}

function variantOf(tile: MatmulTile): Variant {
  const { tm, tn, wgX, wgY } = tile;
  const name = tile.workgroupMemory
    ? `${tm}x${tn} wgmem wg${wgX}x${wgY} tk${tile.tk ?? 16}`
    : `${tm}x${tn} regs wg${wgX}x${wgY}`;
  return { name, tile };
}
const regs = (tm: number, tn: number, wgX: number, wgY: number): Variant =>
  variantOf({ tm, tn, wgX, wgY, workgroupMemory: false });
const shared = (tm: number, tn: number, wgX: number, wgY: number, tk: number): Variant =>
  variantOf({ tm, tn, wgX, wgY, workgroupMemory: true, tk });

/**
 * Tile variants to race. Once the page reports the kernels' DEFAULT_MATMUL_TILE it goes first (the
 * reference: the model's training step uses it) and a duplicate of it here is dropped.
 */
const VARIANTS: Variant[] = [
  regs(4, 4, 8, 8),
  regs(4, 4, 16, 16),
  regs(8, 4, 8, 8),
  regs(4, 8, 8, 8),
  regs(8, 8, 8, 8),
  shared(4, 4, 8, 8, 16),
  shared(4, 4, 16, 16, 16),
  shared(8, 8, 16, 16, 8),
];

const interleaved = (tm: number, tn: number, wgX: number, wgY: number): Variant => ({
  ...regs(tm, tn, wgX, wgY),
  name: `probe ${tm}x${tn} inter wg${wgX}x${wgY}`,
  interleaved: true,
});
if (flags.probe) VARIANTS.push(interleaved(4, 4, 8, 8), interleaved(8, 4, 8, 8), interleaved(8, 8, 8, 8));

/**
 * A variant slower than this fraction of the best at one size is not tried at the next (saves minutes);
 * the default tile is always kept, as the reference the app runs.
 */
const KEEP_FRACTION = 0.5;

const round = (x: number, digits = 3): number => Number(x.toPrecision(digits));
const T0 = performance.now();
/** Progress on stderr, stamped with seconds since start (stdout carries only the table and the JSON line). */
const log = (line: string): void =>
  void process.stderr.write(`[${((performance.now() - T0) / 1000).toFixed(0).padStart(3)} s] ${line}\n`);

async function main(): Promise<void> {
  const started = performance.now();
  const loadStart = loadavg();
  log(`bench:kernels  load average ${loadStart.map((l) => l.toFixed(2)).join(' ')} on ${cpus().length} cores`);

  const vite = await startBenchServer();
  const browser = await launchChromium();
  try {
    log(`vite dev server ${vite.url}, Chromium launched`);
    const page = await browser.newPage();
    const problems = watchPage(page);
    await page.goto(`${vite.url}/bench/pages/kernels.html`);
    await page.waitForFunction(() => window.kernelBench !== undefined, null, { timeout: 120_000 });
    const adapter = await initAdapter(page);
    const matmul = PARTS.has('matmul') ? await benchMatmul(page) : { rows: [], variantTable: new Map(), spreads: [] };
    const trainRows = PARTS.has('mlp') ? await benchTrainStep(page, matmul.rows) : [];
    const transformerRows = PARTS.has('transformer') ? await benchTransformerStep(page) : [];
    problems.assertNone();
    report(adapter, matmul, trainRows, transformerRows, { loadStart, started });
  } finally {
    await browser.close();
    await vite.close();
  }
}

/**
 * Initialise both sides on the page, check TF.js got the same adapter as ours, and put the kernels'
 * default tile first among the VARIANTS (dropping its duplicate).
 */
async function initAdapter(page: Page): Promise<AdapterReport> {
  const adapter: AdapterReport = await page.evaluate(() => window.kernelBench!.init());
  if (adapter.tfjsAdapter.architecture !== adapter.architecture || adapter.tfjsAdapter.vendor !== adapter.vendor) {
    throw new Error(
      `TF.js got adapter ${JSON.stringify(adapter.tfjsAdapter)}, ours ${adapter.vendor}/${adapter.architecture}: not the same adapter`,
    );
  }
  log(`adapter ${adapterName(adapter)}; TF.js ${adapter.tfjsVersion}`);
  const fallback = variantOf(adapter.defaultTile);
  const duplicate = VARIANTS.findIndex((v) => !v.interleaved && v.name === fallback.name);
  if (duplicate >= 0) VARIANTS.splice(duplicate, 1);
  VARIANTS.unshift(fallback);
  return adapter;
}

/** Every size in SIZES, pruning variants that ran below KEEP_FRACTION of the best before the next. */
async function benchMatmul(page: Page): Promise<MatmulResults> {
  const results: MatmulResults = { rows: [], variantTable: new Map(), spreads: [] };
  let candidates = VARIANTS.map((_, i) => i);
  for (const n of SIZES) {
    const { tfjsMs, oursMs, runs } = await timeMatmul(page, n, candidates);
    const gflops = (ms: number) => (2 * n ** 3 * runs) / (ms * 1e6);
    const tfjs = gflops(median(tfjsMs));
    const perVariant = VARIANTS.map(() => Number.NaN);
    candidates.forEach((v, j) => {
      perVariant[v] = gflops(median(oursMs[j]));
    });
    results.variantTable.set(n, perVariant);
    const best = candidates.reduce(
      (b, v) => (!VARIANTS[v].interleaved && perVariant[v] > perVariant[b] ? v : b),
      candidates[0],
    );
    const bestOverall = candidates.reduce((b, v) => (perVariant[v] > perVariant[b] ? v : b), candidates[0]);
    const row = {
      n,
      ours: round(perVariant[best]),
      tfjs: round(tfjs),
      ratio: round(perVariant[best] / tfjs),
      variant: VARIANTS[best].name,
    };
    results.rows.push(row);
    const range = (ms: number[]): [number, number] => [gflops(Math.max(...ms)), gflops(Math.min(...ms))];
    results.spreads.push({ ours: range(oursMs[candidates.indexOf(best)]), tfjs: range(tfjsMs) });
    log(
      `matmul ${n}: tfjs ${tfjs.toFixed(3)} GFLOP/s | ` +
        candidates.map((v) => `${VARIANTS[v].name} ${perVariant[v].toFixed(3)}`).join(' | ') +
        ` | best ${row.variant} ratio ${row.ratio}`,
    );
    candidates = candidates.filter((v) => v === 0 || perVariant[v] >= KEEP_FRACTION * perVariant[bestOverall]);
  }
  return results;
}

/**
 * Set up an n×n product, check every candidate variant against TF.js, and time both sides
 * alternately: milliseconds per sample for TF.js and per candidate, and the products per sample.
 */
async function timeMatmul(
  page: Page,
  n: number,
  candidates: readonly number[],
): Promise<{ tfjsMs: number[]; oursMs: number[][]; runs: number }> {
  const tiles = candidates.map((i) => ({ tile: VARIANTS[i].tile, interleaved: VARIANTS[i].interleaved ?? false }));
  const setup = await page.evaluate(([n, tiles]) => window.kernelBench!.matmulSetup(n, tiles), [n, tiles] as const);
  setup.relativeDiff.forEach((d, j) => {
    if (!(d < 1e-4))
      throw new Error(`matmul ${n}: variant ${VARIANTS[candidates[j]].name} differs from TF.js by ${d} (relative)`);
  });
  // Small products repeat within a sample so a sample lasts long enough to time well.
  const runs = Math.max(1, Math.round((512 / n) ** 3 / 4));
  const reps = n >= 1024 ? Math.max(3, Math.ceil(REPS / 2)) : REPS;
  const sides: Side[] = [
    { side: 'tfjs', variant: 0 },
    ...candidates.map((_, j): Side => ({ side: 'ours', variant: j })),
  ];
  const [tfjsMs, ...oursMs] = await timeAlternately(reps, sides, (side) =>
    page.evaluate(([side, runs]) => window.kernelBench!.matmulTime(side, runs), [side, runs] as const),
  );
  await page.evaluate(() => window.kernelBench!.matmulTeardown());
  return { tfjsMs, oursMs, runs };
}

/**
 * The training step at every batch size. Ours with the kernels' default tile (what the app runs) and,
 * when another variant won the largest matmul, also with that one (`ours_tuned`): cheap, since our
 * step is the fast side.
 */
async function benchTrainStep(page: Page, matmulRows: readonly MatmulRow[]): Promise<TrainRow[]> {
  const winner =
    matmulRows.length > 0 ? VARIANTS.findIndex((v) => v.name === matmulRows[matmulRows.length - 1].variant) : 0;
  const tuned = winner > 0 ? VARIANTS[winner] : undefined;
  const tiles = tuned ? [null, tuned.tile] : [null];
  const trainRows: TrainRow[] = [];
  for (const batch of BATCHES) {
    const { tfjsMs, oursMs, steps, reference, autotuned, autotunedIsDefault } = await timeTrainStep(page, batch, tiles);
    if (flags.breakdown) await logBreakdown(page, batch, tiles.length, tuned);
    await page.evaluate(() => window.kernelBench!.trainTeardown());
    const rate = (ms: number) => (steps * batch) / (ms / 1000);
    const ours = rate(median(oursMs[0]));
    const tfjsRates = tfjsMs.map((ms) => rate(median(ms)));
    const fastest = tfjsRates.indexOf(Math.max(...tfjsRates));
    const tfjs = tfjsRates[fastest];
    const row: TrainRow = {
      batch,
      ours: round(ours),
      tfjs: round(tfjs),
      ratio: round(ours / tfjs),
      tfjs_form: TFJS_FORMS[fastest],
      tfjs_forms: Object.fromEntries(TFJS_FORMS.map((f, j) => [f, round(tfjsRates[j])])),
    };
    if (tuned) Object.assign(row, { ours_tuned: round(rate(median(oursMs[1]))), tuned_variant: tuned.name });
    if (autotuned) {
      const ours_autotuned = round(rate(median(oursMs[tiles.length])));
      Object.assign(row, { ours_autotuned, autotuned, autotuned_is_default: autotunedIsDefault });
    }
    trainRows.push(row);
    log(
      `train step batch ${batch}: ours ${ours.toFixed(1)} samples/s` +
        (row.ours_tuned !== undefined ? ` (${row.ours_tuned} with ${row.tuned_variant})` : '') +
        `, tfjs ${TFJS_FORMS.map((f, j) => `${f} ${tfjsRates[j].toFixed(1)}`).join(' / ')} samples/s; initial loss ${reference.toFixed(5)}`,
    );
  }
  return trainRows;
}

/**
 * Set up the training step at `batch` (checking every side starts from the same loss) and time the
 * TF.js forms and our tiles alternately: milliseconds per sample of `steps` steps. Leaves it set up.
 */
async function timeTrainStep(
  page: Page,
  batch: number,
  tiles: (MatmulTile | null)[],
): Promise<{
  tfjsMs: number[][];
  oursMs: number[][];
  steps: number;
  reference: number;
  autotuned?: string[];
  autotunedIsDefault?: boolean;
}> {
  const setup = await page.evaluate(([batch, options]) => window.kernelBench!.trainSetup(batch, options), [
    batch,
    { tiles, tfjsForms: TFJS_FORMS, autotuneMs: AUTOTUNE_MS },
  ] as const);
  const reference = setup.lossTfjs[0];
  for (const loss of [...setup.lossOurs, ...setup.lossTfjs]) {
    const gap = Math.abs(loss - reference) / Math.abs(reference);
    if (!(gap < 1e-4))
      throw new Error(`train step ${batch}: initial losses ${JSON.stringify(setup)} disagree: not the same model`);
  }
  // One sample = this many consecutive steps (256 samples or one step), then wait for the queue.
  const steps = Math.max(1, Math.round(256 / batch));
  const ours = tiles.length + (setup.autotuned ? 1 : 0);
  const sides: Side[] = [
    ...TFJS_FORMS.map((_, j): Side => ({ side: 'tfjs', variant: j })),
    ...Array.from({ length: ours }, (_, j): Side => ({ side: 'ours', variant: j })),
  ];
  const ms = await timeAlternately(REPS, sides, (side) =>
    page.evaluate(([side, steps]) => window.kernelBench!.trainTime(side, steps), [side, steps] as const),
  );
  const oursMs = ms.slice(TFJS_FORMS.length);
  const { autotuned, autotunedIsDefault } = setup;
  return { tfjsMs: ms.slice(0, TFJS_FORMS.length), oursMs, steps, reference, autotuned, autotunedIsDefault };
}

/**
 * gpt-tiny's training step at each batch: both sides from the same weights and windows (their initial
 * losses must agree within 1e-4, or the bench compares different models), then timed alternately, one
 * step per sample, TRANSFORMER_REPS samples per side.
 */
async function benchTransformerStep(page: Page): Promise<TransformerRow[]> {
  const rows: TransformerRow[] = [];
  for (const batch of TRANSFORMER_BATCHES) {
    log(`transformer step batch ${batch}: setting up gpt-tiny on both sides (a TF.js warm-up step takes a while)`);
    const setup = await page.evaluate(([batch, ms]) => window.kernelBench!.transformerSetup(batch, ms), [
      batch,
      AUTOTUNE_MS,
    ] as const);
    const gap = Math.abs(setup.lossOurs - setup.lossTfjs) / Math.abs(setup.lossTfjs);
    if (!(gap < 1e-4))
      throw new Error(
        `transformer step ${batch}: initial losses ${JSON.stringify(setup)} disagree: not the same model`,
      );
    const sides: Side[] = [
      { side: 'tfjs', variant: 0 },
      { side: 'ours', variant: 0 },
      { side: 'ours', variant: 1 },
    ];
    const [tfjsMs, oursMs, tunedMs] = await timeAlternately(TRANSFORMER_REPS, sides, (side) =>
      page.evaluate((side) => window.kernelBench!.transformerTime(side, 1), side),
    );
    await page.evaluate(() => window.kernelBench!.transformerTeardown());
    const rate = (ms: number) => (batch * setup.context) / (ms / 1000);
    const [ours, tfjs, autotuned] = [rate(median(oursMs)), rate(median(tfjsMs)), rate(median(tunedMs))];
    rows.push({
      batch,
      context: setup.context,
      ours: round(ours),
      tfjs: round(tfjs),
      ratio: round(ours / tfjs),
      ours_autotuned: round(autotuned),
      autotuned: setup.autotuned,
      autotuned_is_default: setup.autotunedIsDefault,
    });
    log(
      `transformer step batch ${batch}: ours ${ours.toFixed(1)} tokens/s (${oursMs.map((m) => m.toFixed(0)).join(', ')} ms), ` +
        `tfjs ${tfjs.toFixed(1)} tokens/s (${tfjsMs.map((m) => m.toFixed(0)).join(', ')} ms); initial loss ${setup.lossOurs.toFixed(5)} vs ${setup.lossTfjs.toFixed(5)}`,
    );
  }
  return rows;
}

/**
 * `reps` rounds timing every side once, every other round in reverse order (so no side always runs
 * first, on a warmer or cooler GPU); the milliseconds of each side, in the order of `sides`.
 */
async function timeAlternately(
  reps: number,
  sides: readonly Side[],
  time: (side: Side) => Promise<number>,
): Promise<number[][]> {
  const ms: number[][] = sides.map(() => []);
  for (let r = 0; r < reps; r++) {
    const order = sides.map((_, i) => i);
    if (r % 2 === 1) order.reverse();
    for (const i of order) ms[i].push(await time(sides[i]));
  }
  return ms;
}

/** --breakdown: each dispatch of our training step timed alone, per tile, on stderr. */
async function logBreakdown(page: Page, batch: number, tileCount: number, tuned: Variant | undefined): Promise<void> {
  for (let j = 0; j < tileCount; j++) {
    const parts = await page.evaluate(([j, reps]) => window.kernelBench!.trainBreakdown(j, reps), [j, 3] as const);
    const total = parts.reduce((sum, p) => sum + p.ms, 0);
    log(
      `breakdown batch ${batch}, ${j === 0 ? VARIANTS[0].name : tuned!.name}: ${total.toFixed(1)} ms in ${parts.length} dispatches, each alone (median of 3):`,
    );
    for (const p of parts)
      log(
        `  ${p.label.padEnd(28)} ${`[${p.workgroups.join(',')}]`.padEnd(14)} ${p.ms.toFixed(2).padStart(8)} ms  ${((100 * p.ms) / total).toFixed(1).padStart(5)} %`,
      );
  }
}

/** Print the table and the JSON line, and (unless --no-write) record them in bench/RESULTS.md. */
function report(
  adapter: AdapterReport,
  matmul: MatmulResults,
  trainRows: TrainRow[],
  transformerRows: TransformerRow[],
  info: { loadStart: number[]; started: number },
): void {
  const { loadStart, started } = info;
  const loadEnd = loadavg();
  const seconds = (performance.now() - started) / 1000;
  const chromium = /Chrom(?:e|ium)\/([\d.]+)/.exec(adapter.userAgent)?.[1] ?? 'unknown';
  const result = {
    bench: 'kernels',
    adapter: {
      vendor: adapter.vendor,
      architecture: adapter.architecture,
      device: adapter.device,
      description: adapter.description,
      chromium,
      tfjs: adapter.tfjsVersion,
    },
    matmul: matmul.rows,
    train_step: trainRows,
    transformer_step: transformerRows,
    load: { start: loadStart.map((l) => round(l)), end: loadEnd.map((l) => round(l)), cores: cpus().length },
  };
  const settings: TableSettings = {
    sizes: SIZES,
    reps: REPS,
    tiles: VARIANTS,
    keepFraction: KEEP_FRACTION,
    tfjsForms: TFJS_FORMS,
    transformerReps: TRANSFORMER_REPS,
  };
  const table = renderTable(result.matmul, matmul.spreads, result.train_step, matmul.variantTable, settings);
  const load = `load average ${loadStart.map((l) => l.toFixed(2)).join(' ')} at start, ${loadEnd.map((l) => l.toFixed(2)).join(' ')} at end (${cpus().length} cores); run took ${seconds.toFixed(0)} s`;
  const lines = [table, renderTransformerTable(transformerRows, settings), load].join('\n\n');
  process.stdout.write(`${lines}\n${JSON.stringify(result)}\n`);
  if (PARTS.size < 3) log(`--parts ${flags.parts}: not all parts ran, so bench/RESULTS.md is left alone`);
  else if (!flags['no-write']) {
    writeResults(RESULTS_PATH, renderSection(lines, JSON.stringify(result), adapter, chromium));
    log(`wrote the bench:kernels section of ${RESULTS_PATH}`);
  }
}

/**
 * The test Vite dev server for the bench page, which imports our TypeScript directly. Its own
 * dependency cache: browser tests running at the same time use Vite's default one with other
 * dependencies, and re-optimizing a shared cache breaks their pages. TF.js is pre-bundled up front:
 * discovering it on first request would make Vite reload the page.
 */
function startBenchServer(): Promise<TestViteServer> {
  return startViteServer({
    cacheDir: resolve(REPO_ROOT, 'node_modules/.vite-bench-kernels'),
    optimizeDeps: ['@tensorflow/tfjs', '@tensorflow/tfjs-backend-webgpu', 'zod'],
  });
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exitCode = 1;
});
