/**
 * bench:scale's output: the table (one row per N and churn setting), the JSON line and the plot of
 * samples/s and compute utilization against N (an SVG; the driver renders it to PNG in Chromium).
 */
import { median } from './elastic-figures';
import type { ScaleResult } from './scale-run';

const f = (x: number | null | undefined, d = 0) =>
  x === null || x === undefined || !Number.isFinite(x) ? '-' : x.toFixed(d);
const medianOrNull = (xs: number[]) => (xs.length ? median(xs) : null);

/**
 * Work lost per failure against the dropped rank's share: Σ lost / Σ dropped share over the failures that
 * had work in flight (a failure while a round re-forms costs nothing in flight, and no ratio).
 */
export function lostRatio(r: ScaleResult): number | null {
  const hit = r.faults.filter((x) => x.droppedShareSteps > 0 && !x.unmeasured);
  if (hit.length === 0) return null;
  return hit.reduce((n, x) => n + x.lostSteps, 0) / hit.reduce((n, x) => n + x.droppedShareSteps, 0);
}

/** Mean global steps in flight that a failure threw away (every failure, those during a re-forming round at 0). */
export function meanLost(r: ScaleResult): number | null {
  const measured = r.faults.filter((x) => !x.unmeasured);
  return measured.length ? measured.reduce((n, x) => n + x.lostSteps, 0) / measured.length : null;
}

/**
 * Where a result's workers ran (loopback, or the test bed's profile) and, with `--topology`, how they synced
 * (`ring` or `auto`, both unverified): the rows a churn row is compared with share it.
 */
export const networkOf = (r: ScaleResult): string =>
  `${r.network ?? 'loopback'}${r.topology ? `, ${r.topology} (unverified)` : ''}`;

/** ` (k)`: faults whose outer step the survivors finished, for runs that recorded it; '' otherwise. */
const carried = (r: ScaleResult) =>
  r.faults.some((x) => x.outcome) ? ` (${r.faults.filter((x) => x.outcome === 'carried').length})` : '';

export function scaleTable(results: ScaleResult[]): string {
  const lines = [
    '| N | network | churn | commits | samples/s | vs quiet | utilization | outer step ms (compute / sync / waiting) | faults (carried) | steps lost per failure, mean (Σ lost / Σ dropped share) | join → first commit s | restarts | audit | RSS/worker MiB |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    const quiet = results.find((q) => q.n === r.n && !q.churn && networkOf(q) === networkOf(r));
    const vs =
      r.churn && quiet && quiet.committedSamples > 0
        ? `${f((100 * r.committedSamples) / quiet.committedSamples)} %`
        : '-';
    const o = r.outerStep;
    const split = o ? `${f(o.wallMs)} (${f(o.computeMs)} / ${f(o.syncMs)} / ${f(o.waitingMs)})` : '-';
    const lost = meanLost(r);
    const ratio = lostRatio(r);
    lines.push(
      `| ${r.n} | ${networkOf(r)}${r.groups ? ` [groups ${r.groups.join('+')}]` : ''} | ${r.churn ? 'yes' : 'no'} | ${r.commits} | ${f(r.samplesPerSec)} | ${vs} | ${r.utilization === null ? '-' : `${f(100 * r.utilization)} %`} | ${split} | ${r.faults.length}${carried(r)} | ${lost === null ? '-' : `${f(lost, 1)} (${ratio === null ? '-' : `${f(ratio, 1)}×`})`} | ${f(medianOrNull(r.joinToContributionS), 1)} | ${r.restarts} | ${r.auditOk ? 'ok' : 'FAIL'} | ${f(r.rssMiBPerWorker)} |`,
    );
  }
  return lines.join('\n');
}

/** samples/s (left axis) and utilization (right axis, 0–100 %) against N, quiet and churn, as an SVG. */
export function scaleSvg(results: ScaleResult[], title: string): string {
  const W = 720;
  const H = 420;
  const pad = { l: 70, r: 70, t: 50, b: 60 };
  const ns = [...new Set(results.map((r) => r.n))].sort((a, b) => a - b);
  const maxRate = Math.max(1, ...results.map((r) => r.samplesPerSec)) * 1.1;
  const x = (n: number) =>
    pad.l +
    ((Math.log2(n) - Math.log2(ns[0]!)) / Math.max(1, Math.log2(ns.at(-1)!) - Math.log2(ns[0]!))) * (W - pad.l - pad.r);
  const yRate = (v: number) => H - pad.b - (v / maxRate) * (H - pad.t - pad.b);
  const yUtil = (u: number) => H - pad.b - u * (H - pad.t - pad.b);
  const series = (churn: boolean, value: (r: ScaleResult) => number | null, y: (v: number) => number) =>
    results
      .filter((r) => r.churn === churn)
      .sort((a, b) => a.n - b.n)
      .flatMap((r) => {
        const v = value(r);
        return v === null ? [] : [`${x(r.n).toFixed(1)},${y(v).toFixed(1)}`];
      })
      .join(' ');
  const lines: [string, string, string][] = [
    [series(false, (r) => r.samplesPerSec, yRate), '#1f77b4', ''],
    [series(true, (r) => r.samplesPerSec, yRate), '#1f77b4', '6 4'],
    [series(false, (r) => r.utilization, yUtil), '#d62728', ''],
    [series(true, (r) => r.utilization, yUtil), '#d62728', '6 4'],
  ];
  const ticks = ns.map((n) => `<text x="${x(n)}" y="${H - pad.b + 20}" text-anchor="middle">${n}</text>`).join('');
  const rateTicks = [0, 0.25, 0.5, 0.75, 1]
    .map((k) => `<text x="${pad.l - 8}" y="${yRate(k * maxRate) + 4}" text-anchor="end">${f(k * maxRate)}</text>`)
    .join('');
  const utilTicks = [0, 0.25, 0.5, 0.75, 1]
    .map((k) => `<text x="${W - pad.r + 8}" y="${yUtil(k) + 4}">${f(100 * k)} %</text>`)
    .join('');
  const paths = lines
    .filter(([points]) => points)
    .map(
      ([points, color, dash]) =>
        `<polyline fill="none" stroke="${color}" stroke-width="2" ${dash ? `stroke-dasharray="${dash}"` : ''} points="${points}"/>`,
    )
    .join('');
  // A marker on every point, so a series of one N (a run cut short) still shows: filled quiet, hollow churn.
  const marks = lines
    .flatMap(([points, color, dash]) =>
      points
        .split(' ')
        .filter(Boolean)
        .map((p) => {
          const [cx, cy] = p.split(',');
          return `<circle cx="${cx}" cy="${cy}" r="4" stroke="${color}" stroke-width="2" fill="${dash ? 'white' : color}"/>`;
        }),
    )
    .join('');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">
<title>${title}</title>
<rect width="${W}" height="${H}" fill="white"/>
<text x="${W / 2}" y="22" text-anchor="middle" font-size="14">${title}</text>
<line x1="${pad.l}" y1="${H - pad.b}" x2="${W - pad.r}" y2="${H - pad.b}" stroke="#444"/>
<line x1="${pad.l}" y1="${pad.t}" x2="${pad.l}" y2="${H - pad.b}" stroke="#1f77b4"/>
<line x1="${W - pad.r}" y1="${pad.t}" x2="${W - pad.r}" y2="${H - pad.b}" stroke="#d62728"/>
${ticks}${rateTicks}${utilTicks}${paths}${marks}
<text x="${W / 2}" y="${H - 15}" text-anchor="middle">headless workers N (log scale)</text>
<text x="18" y="${H / 2}" transform="rotate(-90 18 ${H / 2})" text-anchor="middle" fill="#1f77b4">committed samples/s</text>
<text x="${W - 12}" y="${H / 2}" transform="rotate(-90 ${W - 12} ${H / 2})" text-anchor="middle" fill="#d62728">compute utilization</text>
<text x="${pad.l + 10}" y="${pad.t + 10}">solid, filled: no churn · dashed, hollow: churn</text>
</svg>
`;
}
