/**
 * The loss chart's polyline, bounded in cost: the chart is `width` (300) units wide, so the loss log
 * (up to 2,000 entries) is reduced to at most one point per unit, the mean of the entries that fall
 * on it. Drawing all 2,000 points on every status change was the tab's main per-step cost that grew
 * with the run: an SVG polyline re-rasterised several times per step, in Chromium's GPU process, the
 * same process that runs the WebGPU kernels (docs/performance.md).
 */
export interface LossEntry {
  step: number;
  loss: number;
}

/** SVG `points` for `losses` in a `width` × 80 box (y from 4 to 78, the minimum 0 or below). */
export function lossPolyline(losses: readonly LossEntry[], width = 300): string {
  if (losses.length < 2) return '';
  const first = losses[0].step;
  const last = losses[losses.length - 1].step;
  const range = last - first || 1;
  const sums = new Float64Array(width + 1);
  const counts = new Uint32Array(width + 1);
  let max = -Infinity;
  let min = 0;
  for (const l of losses) {
    const x = Math.round(((l.step - first) / range) * width);
    sums[x] += l.loss;
    counts[x] += 1;
    if (l.loss > max) max = l.loss;
    if (l.loss < min) min = l.loss;
  }
  const span = max - min || 1;
  const points: string[] = [];
  for (let x = 0; x <= width; x++) {
    if (counts[x] === 0) continue;
    const mean = sums[x] / counts[x];
    points.push(`${x},${(78 - ((mean - min) / span) * 74).toFixed(1)}`);
  }
  return points.join(' ');
}
