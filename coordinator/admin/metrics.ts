/**
 * A minimal Prometheus registry (text exposition format 0.0.4): counters, gauges and histograms with
 * optional labels. Hand-written because the coordinator needs a dozen series, not a client library.
 */

type Labels = Record<string, string>;

function labelKey(labels: Labels | undefined): string {
  if (!labels) return '';
  const keys = Object.keys(labels).sort();
  if (keys.length === 0) return '';
  return `{${keys.map((k) => `${k}="${escapeLabel(labels[k])}"`).join(',')}}`;
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

function formatNumber(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return '+Inf';
  if (value === -Infinity) return '-Inf';
  return String(value);
}

interface Series {
  name: string;
  help: string;
  render(): string[];
}

export class Counter implements Series {
  private readonly values = new Map<string, number>();
  constructor(
    readonly name: string,
    readonly help: string,
  ) {}
  inc(by = 1, labels?: Labels): void {
    if (!(by >= 0)) return; // counters never go down; NaN is ignored
    const key = labelKey(labels);
    this.values.set(key, (this.values.get(key) ?? 0) + by);
  }
  get(labels?: Labels): number {
    return this.values.get(labelKey(labels)) ?? 0;
  }
  render(): string[] {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    if (this.values.size === 0) lines.push(`${this.name} 0`);
    for (const [key, value] of this.values) lines.push(`${this.name}${key} ${formatNumber(value)}`);
    return lines;
  }
}

export class Gauge implements Series {
  private readonly values = new Map<string, number>();
  constructor(
    readonly name: string,
    readonly help: string,
    private readonly collect?: () => number,
  ) {}
  set(value: number, labels?: Labels): void {
    this.values.set(labelKey(labels), value);
  }
  get(labels?: Labels): number {
    if (this.collect && !labels) return this.collect();
    return this.values.get(labelKey(labels)) ?? 0;
  }
  render(): string[] {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} gauge`];
    if (this.collect) lines.push(`${this.name} ${formatNumber(this.collect())}`);
    else if (this.values.size === 0) lines.push(`${this.name} 0`);
    for (const [key, value] of this.values) lines.push(`${this.name}${key} ${formatNumber(value)}`);
    return lines;
  }
}

export class Histogram implements Series {
  private readonly counts: number[];
  private sum = 0;
  private count = 0;
  constructor(
    readonly name: string,
    readonly help: string,
    /** Upper bounds, ascending. */
    private readonly buckets: number[],
  ) {
    this.counts = buckets.map(() => 0);
  }
  observe(value: number): void {
    if (!Number.isFinite(value)) return;
    this.sum += value;
    this.count += 1;
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]) this.counts[i] += 1;
  }
  get total(): number {
    return this.count;
  }
  render(): string[] {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    this.buckets.forEach((le, i) => {
      lines.push(`${this.name}_bucket{le="${formatNumber(le)}"} ${this.counts[i]}`);
    });
    lines.push(`${this.name}_bucket{le="+Inf"} ${this.count}`);
    lines.push(`${this.name}_sum ${formatNumber(this.sum)}`);
    lines.push(`${this.name}_count ${this.count}`);
    return lines;
  }
}

/**
 * A summary with quantiles over the last `window` observations (a sliding sample, not a streaming
 * sketch: enough for a coordinator that observes a few values per second).
 */
export class Summary implements Series {
  private readonly recent: number[] = [];
  private sum = 0;
  private count = 0;
  constructor(
    readonly name: string,
    readonly help: string,
    private readonly quantiles = [0.5, 0.9, 0.99],
    private readonly window = 1024,
  ) {}
  observe(value: number): void {
    if (!Number.isFinite(value)) return;
    this.sum += value;
    this.count += 1;
    this.recent.push(value);
    if (this.recent.length > this.window) this.recent.shift();
  }
  get total(): number {
    return this.count;
  }
  quantile(q: number): number {
    if (this.recent.length === 0) return Number.NaN;
    const sorted = [...this.recent].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  }
  render(): string[] {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} summary`];
    for (const q of this.quantiles) lines.push(`${this.name}{quantile="${q}"} ${formatNumber(this.quantile(q))}`);
    lines.push(`${this.name}_sum ${formatNumber(this.sum)}`);
    lines.push(`${this.name}_count ${this.count}`);
    return lines;
  }
}

export class MetricsRegistry {
  private readonly series = new Map<string, Series>();

  counter(name: string, help: string): Counter {
    return this.register(new Counter(name, help));
  }
  gauge(name: string, help: string, collect?: () => number): Gauge {
    return this.register(new Gauge(name, help, collect));
  }
  histogram(name: string, help: string, buckets: number[]): Histogram {
    return this.register(new Histogram(name, help, buckets));
  }
  summary(name: string, help: string): Summary {
    return this.register(new Summary(name, help));
  }
  get(name: string): Series | undefined {
    return this.series.get(name);
  }
  private register<T extends Series>(series: T): T {
    if (this.series.has(series.name)) throw new Error(`metric ${series.name} registered twice`);
    this.series.set(series.name, series);
    return series;
  }
  render(): string {
    const lines: string[] = [];
    for (const series of this.series.values()) lines.push(...series.render());
    return `${lines.join('\n')}\n`;
  }
}

/** Seconds-scale buckets from 1 ms to 2 min. */
export const DURATION_BUCKETS_SECONDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
