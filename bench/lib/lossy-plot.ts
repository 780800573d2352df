/**
 * The lossy-link figure of bench:net (bench/plot-lossy.ts draws it): allreduce bus bandwidth over the
 * link rate against the access links' loss, one line per run label, access-link RTT and payload size, as
 * a self-contained SVG (no plotting library: the benches run in Node, uPlot needs a page).
 */
import type { LossyRow } from './net-lossy';

export interface LabelledRows {
  label: string;
  rows: LossyRow[];
}

const W = 720;
const H = 440;
const M = { left: 60, right: 220, top: 40, bottom: 50 };
const COLORS = ['#8a1c13', '#1f6feb', '#2da44e', '#b7791f', '#6f42c1'];
const DASH: Record<number, string> = { 80: '', 160: '6 4' };
const MARK: Record<number, string> = { 1: 'circle', 4: 'square' };

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');

/** Points (loss %, bus/rate) of each (label, access RTT, size), in loss order. */
function series(runs: readonly LabelledRows[]) {
  const out: Array<{ label: string; rtt: number; mib: number; color: string; points: Array<[number, number]> }> = [];
  runs.forEach((run, i) => {
    const settings = [...new Set(run.rows.map((r) => r.setting ?? 'default'))];
    const keys = [...new Set(run.rows.map((r) => `${r.setting ?? 'default'}|${r.accessRttMs}|${r.mib}`))];
    for (const key of keys) {
      const [setting, rttText, mibText] = key.split('|');
      const [rtt, mib] = [Number(rttText), Number(mibText)];
      const points = run.rows
        .filter((r) => (r.setting ?? 'default') === setting && r.accessRttMs === rtt && r.mib === mib)
        .map((r): [number, number] => [r.lossPercent, r.ofRate])
        .sort((a, b) => a[0] - b[0]);
      const label = settings.length > 1 || setting !== 'default' ? `${run.label}, stripes ${setting}` : run.label;
      const color = COLORS[(i + settings.indexOf(setting)) % COLORS.length];
      out.push({ label, rtt, mib, color, points });
    }
  });
  return out;
}

function marker(kind: string, x: number, y: number, color: string): string {
  return kind === 'square'
    ? `<rect x="${x - 3.5}" y="${y - 3.5}" width="7" height="7" fill="${color}"/>`
    : `<circle cx="${x}" cy="${y}" r="3.5" fill="${color}"/>`;
}

/** The SVG document for `runs` on links of `rateMbit`. */
export function lossyPlotSvg(runs: readonly LabelledRows[], rateMbit: number): string {
  const all = series(runs);
  const maxLoss = Math.max(2, ...all.flatMap((s) => s.points.map((p) => p[0])));
  const x = (loss: number) => M.left + (loss / maxLoss) * (W - M.left - M.right);
  const y = (of: number) => H - M.bottom - Math.min(1, of) * (H - M.top - M.bottom);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<title>Allreduce bus bandwidth over the link rate against access-link loss, bench:net lossy part</title>`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${M.left}" y="22" font-size="14">Allreduce bus bandwidth / link rate (${rateMbit} Mbit/s), 3 tabs, against access-link loss</text>`,
  ];
  for (let t = 0; t <= 10; t += 2) {
    const yy = y(t / 10);
    parts.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${yy}" y2="${yy}" stroke="#ddd"/>`);
    parts.push(`<text x="${M.left - 8}" y="${yy + 4}" text-anchor="end">${(t / 10).toFixed(1)}</text>`);
  }
  for (const loss of [...new Set(all.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b)) {
    parts.push(`<line x1="${x(loss)}" x2="${x(loss)}" y1="${H - M.bottom}" y2="${H - M.bottom + 5}" stroke="#333"/>`);
    parts.push(`<text x="${x(loss)}" y="${H - M.bottom + 18}" text-anchor="middle">${loss} %</text>`);
  }
  parts.push(
    `<line x1="${M.left}" x2="${W - M.right}" y1="${H - M.bottom}" y2="${H - M.bottom}" stroke="#333"/>`,
    `<line x1="${M.left}" x2="${M.left}" y1="${M.top}" y2="${H - M.bottom}" stroke="#333"/>`,
    `<text x="${(M.left + W - M.right) / 2}" y="${H - 12}" text-anchor="middle">access-link loss per direction; RTT in the legend: the access link's (a ring hop: 2× both)</text>`,
    `<line x1="${M.left}" x2="${W - M.right}" y1="${y(0.5)}" y2="${y(0.5)}" stroke="#999" stroke-dasharray="2 3"/>`,
    `<text x="${W - M.right - 4}" y="${y(0.5) - 4}" text-anchor="end" fill="#666">goal 0.5</text>`,
  );
  all.forEach((s, i) => {
    const path = s.points.map(([l, o], j) => `${j === 0 ? 'M' : 'L'}${x(l).toFixed(1)},${y(o).toFixed(1)}`).join(' ');
    parts.push(
      `<path d="${path}" fill="none" stroke="${s.color}" stroke-width="2" stroke-dasharray="${DASH[s.rtt] ?? '2 2'}"/>`,
    );
    for (const [l, o] of s.points) parts.push(marker(MARK[s.mib] ?? 'circle', x(l), y(o), s.color));
    const ly = M.top + 14 + i * 20;
    const lx = W - M.right + 16;
    parts.push(
      `<line x1="${lx}" x2="${lx + 26}" y1="${ly - 4}" y2="${ly - 4}" stroke="${s.color}" stroke-width="2" stroke-dasharray="${DASH[s.rtt] ?? '2 2'}"/>`,
      marker(MARK[s.mib] ?? 'circle', lx + 13, ly - 4, s.color),
      `<text x="${lx + 32}" y="${ly}">${esc(s.label)}, RTT ${s.rtt} ms, ${s.mib} MiB</text>`,
    );
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
