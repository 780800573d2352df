/**
 * Draws bench:net's lossy-link table as an SVG figure (bench/lib/lossy-plot.ts): bus bandwidth over the
 * link rate against loss, before and after, from the JSON lines the runs printed.
 *
 *   npx tsx bench/plot-lossy.ts --runs "before=/tmp/before.out,after=/tmp/after.out" --out bench/plots/lossy-links.svg
 *
 * Each file is a bench:net stdout (or any file whose lines include its `{"bench":"net",…}` line with a
 * `lossy` part); the label before `=` names its lines in the legend.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { arg } from './lib/common';
import { type LabelledRows, lossyPlotSvg } from './lib/lossy-plot';
import type { LossyRow } from './lib/net-lossy';

function rowsOf(file: string): LossyRow[] {
  const line = readFileSync(file, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('{"bench":"net"') && l.includes('"lossy"'));
  if (!line) throw new Error(`${file}: no bench:net JSON line with a lossy part`);
  return (JSON.parse(line) as { lossy: { rows: LossyRow[] } }).lossy.rows;
}

const runs: LabelledRows[] = arg('runs', '')
  .split(',')
  .filter(Boolean)
  .map((entry) => {
    const [label, file] = entry.split('=');
    return { label, rows: rowsOf(file) };
  });
if (runs.length === 0) {
  process.stderr.write('plot-lossy: --runs "label=file,…" is required\n');
  process.exit(1);
}
const out = arg('out', 'bench/plots/lossy-links.svg');
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, lossyPlotSvg(runs, runs[0].rows[0]?.rateMbit ?? 0));
process.stdout.write(`${out}\n`);
