/**
 * The admin page's charts (uPlot): training loss, test accuracy and (language models) held-out bits
 * per byte against the step, samples/s and
 * world size against time, the job's compute utilization and wire bytes per sample against time. Charts follow their container's width (ResizeObserver) and the page's
 * colour scheme (CSS variables read when they are built).
 */
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { formatBytes, formatClock, formatInt } from './format';
import type { FeedEvaluation } from '../../core/protocol/admin-feed';
import type { AdminModel } from './model';

/** Smoothing of the loss line: exponential moving average with this weight on the past. */
const LOSS_EMA = 0.9;

function cssVar(name: string, fallback: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

function chartHeight(): number {
  return window.matchMedia('(max-width: 640px)').matches ? 150 : 180;
}

interface Palette {
  text: string;
  grid: string;
  loss: string;
  lossPoints: string;
  accuracy: string;
  bits: string;
  speed: string;
  world: string;
  utilization: string;
  wire: string;
}

function palette(): Palette {
  return {
    text: cssVar('--muted', '#5d6577'),
    grid: cssVar('--grid', '#e6e9ef'),
    loss: cssVar('--chart-loss', '#3a5bd9'),
    lossPoints: cssVar('--chart-loss-points', 'rgba(58, 91, 217, 0.35)'),
    accuracy: cssVar('--chart-accuracy', '#1f9d6b'),
    bits: cssVar('--chart-bits', '#3a5bd9'),
    speed: cssVar('--chart-speed', '#d9822b'),
    world: cssVar('--chart-world', '#7b5cd6'),
    utilization: cssVar('--chart-utilization', '#1f9d6b'),
    wire: cssVar('--chart-wire', '#c2417a'),
  };
}

function axis(p: Palette, extra: uPlot.Axis = {}): uPlot.Axis {
  return {
    stroke: p.text,
    grid: { stroke: p.grid, width: 1 },
    ticks: { stroke: p.grid, width: 1 },
    font: '11px system-ui, sans-serif',
    ...extra,
  };
}

const stepped = uPlot.paths.stepped!({ align: 1 });

/** Steps are whole numbers: ticks at 1, 2, 5 × 10^k. */
const STEP_INCREMENTS = [
  1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000,
];
/** Time ticks in seconds, from a second to a day. */
const TIME_INCREMENTS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400];

function stepAxis(p: Palette): uPlot.Axis {
  return axis(p, {
    label: 'step',
    labelSize: 14,
    labelFont: '11px system-ui',
    incrs: STEP_INCREMENTS,
    values: (_u, ticks) => ticks.map((t) => formatInt(t)),
  });
}

/** What every chart shares: size, no legend, horizontal drag-to-zoom. */
type ChartBase = Pick<uPlot.Options, 'width' | 'height' | 'legend' | 'cursor'>;

/** Loss against the step: every commit as a faint point, and the smoothed line. */
function lossOptions(p: Palette, base: ChartBase): uPlot.Options {
  return {
    ...base,
    scales: { x: { time: false } },
    axes: [stepAxis(p), axis(p, { size: 44 })],
    series: [
      { label: 'step' },
      {
        label: 'loss',
        stroke: p.lossPoints,
        width: 0,
        points: { show: true, size: 4, width: 0, fill: p.lossPoints },
      },
      { label: 'loss (average)', stroke: p.loss, width: 2, points: { show: false } },
    ],
  };
}

/** Test accuracy (percent) against the step. */
function accuracyOptions(p: Palette, base: ChartBase): uPlot.Options {
  return {
    ...base,
    scales: { x: { time: false }, y: { range: [0, 100] } },
    axes: [stepAxis(p), axis(p, { size: 44, values: (_u, ticks) => ticks.map((t) => `${t}%`) })],
    series: [{ label: 'step' }, { label: 'accuracy', stroke: p.accuracy, width: 2, points: { show: true, size: 5 } }],
  };
}

/** Held-out loss in bits per byte (a language model's evaluations) against the step; the y range starts at 0. */
function bitsOptions(p: Palette, base: ChartBase): uPlot.Options {
  return {
    ...base,
    scales: { x: { time: false }, y: { range: (_u, _min, max) => [0, Math.max(1, Math.ceil(max))] } },
    axes: [stepAxis(p), axis(p, { size: 44, values: (_u, ticks) => ticks.map((t) => t.toFixed(1)) })],
    series: [{ label: 'step' }, { label: 'bits/byte', stroke: p.bits, width: 2, points: { show: true, size: 5 } }],
  };
}

/** The x axis of the charts against time (uPlot's unit: seconds). */
function timeAxis(p: Palette): uPlot.Axis {
  return axis(p, {
    space: 72,
    incrs: TIME_INCREMENTS,
    values: (_u, ticks) => ticks.map((t) => formatClock(t * 1000)),
  });
}

/** Samples/s (left axis) and world size (right axis, stepped) against time. */
function throughputOptions(p: Palette, base: ChartBase): uPlot.Options {
  return {
    ...base,
    scales: {
      x: { time: true },
      rate: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] },
      world: { range: (_u, _min, max) => [0, Math.max(2, max + 1)] },
    },
    axes: [
      timeAxis(p),
      axis(p, { scale: 'rate', size: 50 }),
      axis(p, {
        scale: 'world',
        side: 1,
        size: 30,
        grid: { show: false },
        values: (_u, ticks) => ticks.map((t) => (Number.isInteger(t) ? String(t) : '')),
      }),
    ],
    series: [
      { label: 'time' },
      { label: 'samples/s', scale: 'rate', stroke: p.speed, width: 2, spanGaps: true, points: { show: false } },
      {
        label: 'world size',
        scale: 'world',
        stroke: p.world,
        width: 2,
        spanGaps: true,
        paths: stepped,
        points: { show: false },
      },
    ],
  };
}

/** The job's recent compute utilization (left axis, percent) and wire bytes per sample (right axis) at each commit. */
function usageOptions(p: Palette, base: ChartBase): uPlot.Options {
  return {
    ...base,
    scales: {
      x: { time: true },
      utilization: { range: [0, 100] },
      wire: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] },
    },
    axes: [
      timeAxis(p),
      axis(p, { scale: 'utilization', size: 44, values: (_u, ticks) => ticks.map((t) => `${t}%`) }),
      axis(p, {
        scale: 'wire',
        side: 1,
        size: 60,
        grid: { show: false },
        values: (_u, ticks) => ticks.map((t) => formatBytes(Math.round(t))),
      }),
    ],
    series: [
      { label: 'time' },
      {
        label: 'utilization',
        scale: 'utilization',
        stroke: p.utilization,
        width: 2,
        spanGaps: true,
        points: { show: false },
      },
      { label: 'bytes/sample', scale: 'wire', stroke: p.wire, width: 2, spanGaps: true, points: { show: false } },
    ],
  };
}

export class AdminCharts {
  private readonly loss: uPlot;
  private readonly accuracy: uPlot;
  private readonly bits: uPlot;
  private readonly throughput: uPlot;
  private readonly usage: uPlot;
  private readonly observer: ResizeObserver;

  constructor(
    private readonly lossEl: HTMLElement,
    private readonly accuracyEl: HTMLElement,
    private readonly throughputEl: HTMLElement,
    private readonly usageEl: HTMLElement,
    private readonly bitsEl: HTMLElement,
  ) {
    const p = palette();
    const common = {
      height: chartHeight(),
      legend: { show: false },
      cursor: { drag: { x: true, y: false } },
    } satisfies Partial<uPlot.Options>;
    const base = (node: HTMLElement): ChartBase => ({ ...common, width: Math.max(200, node.clientWidth) });
    this.loss = new uPlot(lossOptions(p, base(lossEl)), [[], [], []], lossEl);
    this.accuracy = new uPlot(accuracyOptions(p, base(accuracyEl)), [[], []], accuracyEl);
    this.throughput = new uPlot(throughputOptions(p, base(throughputEl)), [[], [], []], throughputEl);
    this.usage = new uPlot(usageOptions(p, base(usageEl)), [[], [], []], usageEl);
    this.bits = new uPlot(bitsOptions(p, base(bitsEl)), [[], []], bitsEl);
    this.observer = new ResizeObserver(() => this.resize());
    for (const node of [lossEl, accuracyEl, throughputEl, usageEl, bitsEl]) this.observer.observe(node);
  }

  private resize(): void {
    const height = chartHeight();
    for (const [chart, node] of [
      [this.loss, this.lossEl],
      [this.accuracy, this.accuracyEl],
      [this.throughput, this.throughputEl],
      [this.usage, this.usageEl],
      [this.bits, this.bitsEl],
    ] as const) {
      const width = Math.max(200, node.clientWidth);
      if (chart.width !== width || chart.height !== height) chart.setSize({ width, height });
    }
  }

  updateLoss(model: AdminModel): void {
    const steps: number[] = [];
    const loss: (number | null)[] = [];
    const average: (number | null)[] = [];
    // Bias-corrected (as Adam's moments), so the average does not start out dragged toward the first value.
    let ema = 0;
    let weight = 0;
    for (const c of model.commits) {
      steps.push(c.step);
      loss.push(c.loss);
      if (c.loss !== null) {
        ema = LOSS_EMA * ema + (1 - LOSS_EMA) * c.loss;
        weight = LOSS_EMA * weight + (1 - LOSS_EMA);
      }
      average.push(weight > 0 ? ema / weight : null);
    }
    this.loss.setData([steps, loss, average]);
  }

  updateAccuracy(model: AdminModel): void {
    const sorted = [...model.evaluations].sort((a, b) => a.step - b.step);
    this.accuracy.setData([sorted.map((e) => e.step), sorted.map((e) => e.accuracy * 100)]);
  }

  /**
   * Held-out bits per byte (loss in nats per byte / ln 2) of the evaluations that carry a loss; returns
   * how many points there are (the page shows a note while there is none).
   */
  updateBitsPerByte(model: AdminModel): number {
    const points = bitsPerByte(model.evaluations);
    this.bits.setData([points.map((e) => e.step), points.map((e) => e.bits)]);
    return points.length;
  }

  updateThroughput(model: AdminModel): void {
    // Seconds (uPlot's time unit); the world line is extended to the latest status so it reaches "now".
    const rateTable: uPlot.AlignedData = [
      model.commits.map((c) => c.at / 1000),
      model.commits.map((c) => c.samplesPerSecond),
    ];
    const worldPoints = [...model.world];
    const last = worldPoints[worldPoints.length - 1];
    if (last && model.statusAt > last.at) worldPoints.push({ at: model.statusAt, size: last.size });
    const worldTable: uPlot.AlignedData = [worldPoints.map((w) => w.at / 1000), worldPoints.map((w) => w.size)];
    this.throughput.setData(uPlot.join([dedupeX(rateTable), dedupeX(worldTable)]));
  }

  /** Returns whether there is any point to draw (the page shows a note otherwise). */
  updateUsage(model: AdminModel): boolean {
    const xs: number[] = [];
    const utilization: (number | null)[] = [];
    const wire: (number | null)[] = [];
    for (const c of model.commits) {
      // Commits recorded before this coordinator started carry no usage (the sums are not stored).
      if (!c.usage || (c.usage.utilization === null && c.usage.bytesPerSample === null)) continue;
      xs.push(c.at / 1000);
      utilization.push(c.usage.utilization === null ? null : c.usage.utilization * 100);
      wire.push(c.usage.bytesPerSample);
    }
    const [outX, outU] = dedupeX([xs, utilization]);
    const [, outW] = dedupeX([xs, wire]);
    this.usage.setData([outX, outU, outW]);
    return outX.length > 0;
  }

  destroy(): void {
    this.observer.disconnect();
    this.loss.destroy();
    this.accuracy.destroy();
    this.throughput.destroy();
    this.usage.destroy();
    this.bits.destroy();
  }
}

/** The evaluations with a loss, by step, as bits per byte (a byte-level model's loss is nats per byte). */
export function bitsPerByte(evaluations: readonly FeedEvaluation[]): { step: number; bits: number }[] {
  return evaluations
    .filter((e) => e.loss !== null && Number.isFinite(e.loss))
    .sort((a, b) => a.step - b.step)
    .map((e) => ({ step: e.step, bits: (e.loss as number) / Math.LN2 }));
}

/** uPlot.join needs strictly increasing x per table: keep the last value of equal times. */
function dedupeX(table: uPlot.AlignedData): uPlot.AlignedData {
  const [xs, ys] = table as [number[], (number | null)[]];
  const outX: number[] = [];
  const outY: (number | null)[] = [];
  for (let i = 0; i < xs.length; i++) {
    if (outX.length > 0 && xs[i] <= outX[outX.length - 1]) {
      if (xs[i] === outX[outX.length - 1]) outY[outY.length - 1] = ys[i];
      continue;
    }
    outX.push(xs[i]);
    outY.push(ys[i]);
  }
  return [outX, outY];
}
