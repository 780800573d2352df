/**
 * bench:kernels's output: the rows each part measures, the tables (matmul, the variants raced, the mlp
 * and gpt-tiny training steps), and the generated block of the `## bench:kernels` section of
 * bench/RESULTS.md, which a full run rewrites between its markers.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { AdapterReport, TfjsForm } from '../pages/kernel-bench-api';

export interface MatmulRow {
  n: number;
  ours: number;
  tfjs: number;
  ratio: number;
  variant: string;
}

/** Slowest and fastest sample (GFLOP/s) per side, for the table: how much the machine's load scattered them. */
export interface MatmulSpread {
  ours: [number, number];
  tfjs: [number, number];
}

export interface TrainRow {
  batch: number;
  /** With the kernels' default matmul tile, as the app trains. */
  ours: number;
  tfjs: number;
  ratio: number;
  /** The TF.js model form that was faster (and counts as `tfjs`), and each form's rate. */
  tfjs_form: TfjsForm;
  tfjs_forms: Partial<Record<TfjsForm, number>>;
  /** With the tile that won the largest matmul, when that is not the default. */
  ours_tuned?: number;
  tuned_variant?: string;
  /** With the autotuner's choice for this adapter and batch (kernels/tuning/autotune.ts), and that choice. */
  ours_autotuned?: number;
  autotuned?: string[];
  /** The autotuner kept every default variant. */
  autotuned_is_default?: boolean;
}

/** GFLOP/s medians of every variant tried at a size (NaN: pruned). */
export type VariantTable = Map<number, number[]>;

export interface MatmulResults {
  rows: MatmulRow[];
  variantTable: VariantTable;
  spreads: MatmulSpread[];
}

export interface TransformerRow {
  batch: number;
  context: number;
  /** Tokens (batch · context) per second through a whole training step. */
  ours: number;
  tfjs: number;
  ratio: number;
  /** With the autotuner's choice (same run, alternated with the default), and that choice. */
  ours_autotuned: number;
  autotuned: string[];
  autotuned_is_default: boolean;
}

/**
 * When the autotuner kept every default, its model runs the very same kernels as the default one, and a
 * gap between their rates is the machine's noise.
 */
function keptDefaults(row: { autotuned_is_default?: boolean }): string {
  return row.autotuned_is_default ? ' (= the defaults: the same kernels, so any gap is noise)' : '';
}

/** What the tables say about how the run was made. */
export interface TableSettings {
  /** Matmul sizes, in order, and samples per side at the sizes below 1024 (half, at least 3, from 1024 up). */
  sizes: readonly number[];
  reps: number;
  /** The tile variants raced, the kernels' default first, and the fraction below the best that drops one. */
  tiles: readonly { name: string }[];
  keepFraction: number;
  tfjsForms: readonly TfjsForm[];
  transformerReps: number;
}

export function renderTable(
  matmulRows: readonly MatmulRow[],
  spreads: readonly MatmulSpread[],
  trainRows: readonly TrainRow[],
  variants: VariantTable,
  info: TableSettings,
): string {
  const { sizes, keepFraction, tiles, tfjsForms } = info;
  const pad = (s: string | number, w: number) => String(s).padStart(w);
  const lines = [
    `matmul, square float32, GFLOP/s (median; ${sizes.map((n) => (n >= 1024 ? Math.max(3, Math.ceil(info.reps / 2)) : info.reps)).join('/')} samples per side)`,
    `${pad('n', 6)} ${pad('ours', 8)} ${pad('tfjs', 8)} ${pad('ratio', 7)}  ${'best variant'.padEnd(24)}${pad('ours min-max', 14)}${pad('tfjs min-max', 14)}`,
    ...matmulRows.map((r, i) => {
      const span = ([lo, hi]: [number, number]) => pad(`${lo.toFixed(2)}-${hi.toFixed(2)}`, 14);
      return `${pad(r.n, 6)} ${pad(r.ours.toFixed(3), 8)} ${pad(r.tfjs.toFixed(3), 8)} ${pad(r.ratio.toFixed(2), 7)}  ${r.variant.padEnd(24)}${span(spreads[i].ours)}${span(spreads[i].tfjs)}`;
    }),
    '',
    `our matmul variants, GFLOP/s (- : dropped after running below ${keepFraction}x the best at a smaller size)`,
    `${'variant'.padEnd(26)}${sizes.map((n) => pad(n, 9)).join('')}`,
    ...tiles.map(
      (v, i) =>
        `${v.name.padEnd(26)}${sizes.map((n) => pad(Number.isNaN(variants.get(n)?.[i] ?? Number.NaN) ? '-' : variants.get(n)![i].toFixed(3), 9)).join('')}`,
    ),
    '',
    `mlp 784-256-128-10 training step (forward, loss, backward, Adam), samples/s (median of ${info.reps})`,
    `${pad('batch', 6)} ${pad('ours', 8)} ${pad('tfjs', 8)} ${pad('ratio', 7)}  ${tfjsForms.map((f) => pad(`tfjs ${f}`, 12)).join(' ')}${trainRows[0]?.tuned_variant ? `  ours with ${trainRows[0].tuned_variant} (ratio)` : ''}`,
    ...trainRows.map(
      (r) =>
        `${pad(r.batch, 6)} ${pad(r.ours.toFixed(1), 8)} ${pad(r.tfjs.toFixed(1), 8)} ${pad(r.ratio.toFixed(2), 7)}  ` +
        tfjsForms.map((f) => pad((r.tfjs_forms[f] ?? Number.NaN).toFixed(1), 12)).join(' ') +
        (r.ours_tuned !== undefined
          ? `  ${pad(r.ours_tuned.toFixed(1), 8)} (${(r.ours_tuned / r.tfjs).toFixed(2)})`
          : ''),
    ),
    `ours = the kernels' default matmul tile (${tiles[0].name}), as the app trains; tfjs = the faster of its model forms`,
    `(fused: tf.fused.matMul with bias+ReLU per layer; plain: matMul, add, relu), each with tf.train.adam via optimizer.minimize`,
    ...trainRows
      .filter((r) => r.ours_autotuned !== undefined)
      .map(
        (r) =>
          `autotuned at batch ${r.batch}: ${r.ours_autotuned!.toFixed(1)} samples/s (${(r.ours_autotuned! / r.ours).toFixed(2)}x the default, same run) with ${r.autotuned!.join(', ')}${keptDefaults(r)}`,
      ),
  ];
  return lines.join('\n');
}

export function renderTransformerTable(rows: readonly TransformerRow[], info: TableSettings): string {
  const pad = (s: string | number, w: number) => String(s).padStart(w);
  return [
    `gpt-tiny training step (forward, loss, backward, Adam), tokens/s (median of ${info.transformerReps}; goal: ratio >= 3)`,
    `${pad('batch', 6)} ${pad('context', 8)} ${pad('ours', 8)} ${pad('tfjs', 8)} ${pad('ratio', 7)} ${pad('autotuned', 10)} ${pad('/ours', 6)}`,
    ...rows.map(
      (r) =>
        `${pad(r.batch, 6)} ${pad(r.context, 8)} ${pad(r.ours.toFixed(1), 8)} ${pad(r.tfjs.toFixed(1), 8)} ${pad(r.ratio.toFixed(2), 7)} ${pad(r.ours_autotuned.toFixed(1), 10)} ${pad((r.ours_autotuned / r.ours).toFixed(2), 6)}`,
    ),
    ...rows.map((r) => `autotuned at batch ${r.batch}: ${r.autotuned.join(', ')}${keptDefaults(r)}`),
    `ours = Model.trainTokens (one submission); tfjs = the same model in TF.js ops (test/support/reference-transformer-tfjs.ts)`,
    `with tf.train.adam via optimizer.minimize; same weights and windows, initial losses equal within 1e-4`,
  ].join('\n');
}

const BEGIN =
  '<!-- bench:kernels:begin (generated by `npm run bench:kernels`; edits between the markers are overwritten) -->';
const END = '<!-- bench:kernels:end -->';

export function adapterName(adapter: AdapterReport): string {
  const detail = [adapter.device, adapter.description].filter(Boolean).join(', ');
  return `${adapter.vendor}/${adapter.architecture}${detail ? ` (${detail})` : ''}`;
}

export function renderSection(table: string, json: string, adapter: AdapterReport, chromium: string): string {
  return [
    BEGIN,
    `Last run: ${new Date().toISOString()}, \`npm run bench:kernels\`, Chromium ${chromium} headless, adapter ${adapterName(adapter)},` +
      ` TF.js ${adapter.tfjsVersion} WebGPU backend.`,
    '',
    '```text',
    table,
    '```',
    '',
    '```json',
    json,
    '```',
    END,
  ].join('\n');
}

/**
 * Replace the generated block inside `## bench:kernels` of `RESULTS_PATH` (creating the file or the
 * section as needed), leaving other benches' sections and the hand-written notes of this one alone.
 */
export function writeResults(RESULTS_PATH: string, block: string): void {
  let text = existsSync(RESULTS_PATH) ? readFileSync(RESULTS_PATH, 'utf8') : '# Benchmark results\n';
  const begin = text.indexOf(BEGIN.slice(0, 30));
  const end = text.indexOf(END);
  if (begin >= 0 && end > begin) {
    text = text.slice(0, begin) + block + text.slice(end + END.length);
  } else if (/^## bench:kernels\s*$/m.test(text)) {
    text = text.replace(/^## bench:kernels\s*$/m, `## bench:kernels\n\n${block}\n`);
  } else {
    text = `${text.trimEnd()}\n\n## bench:kernels\n\n${block}\n`;
  }
  writeFileSync(RESULTS_PATH, text);
}
