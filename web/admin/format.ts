/** Number and time formatting for the admin page, plus a small DOM builder. */
import type { KernelsReport } from '../../core/protocol/tab-messages';

export { syncLabel } from '../../core/protocol/admin-feed';

export function formatInt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** 3 significant digits, compact: 0.000123, 1.23, 12.3, 1,234. */
export function formatNumber(n: number | null | undefined, digits = 3): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  if (Math.abs(n) >= 1000) return formatInt(n);
  if (n === 0) return '0';
  return Number(n.toPrecision(digits)).toString();
}

export function formatPercent(fraction: number, digits = 1): string {
  return `${(fraction * 100).toFixed(digits)}%`;
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  if (bytes < 1024 ** 3) return `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
  return `${(bytes / 1024 ** 3).toFixed(2)} GiB`;
}

/** Bytes per sample ('–' when unknown): "412 B", "7.2 KiB". */
export function formatBytesPerSample(bytes: number | null | undefined): string {
  return bytes === null || bytes === undefined || !Number.isFinite(bytes) ? '–' : formatBytes(Math.round(bytes));
}

/** A heartbeat age: "0.4 s", "12 s", "3 min". */
/**
 * A tab's kernels report in one cell: the matmul tile, its measured GFLOP/s and how it was chosen;
 * `title` lists every family's variant and the device's optional features. Older feeds lack the field.
 */
export function formatKernels(report: KernelsReport | null | undefined): { text: string; title: string } {
  if (!report) return { text: '–', title: 'the tab reported no kernels (an older tab)' };
  const matmul = report.variants.find((v) => v.family === 'matmul')?.variant ?? 'default';
  const how =
    report.source === 'tuned'
      ? `tuned in ${formatNumber((report.tuneMs ?? 0) / 1000, 2)} s`
      : report.source === 'cached'
        ? 'cached'
        : 'defaults';
  const gflops = report.gflops === null ? '' : ` · ${formatNumber(report.gflops)} GFLOP/s`;
  const precision = report.precision === 'f16' ? 'f16 · ' : '';
  const lines = report.variants.map((v) => `${v.family}: ${v.variant}`);
  const features = report.features.length ? report.features.join(', ') : 'none';
  return { text: `${precision}${matmul}${gflops} · ${how}`, title: [...lines, `features: ${features}`].join('\n') };
}

export function formatAge(ms: number): string {
  if (ms < 0) return '–';
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 120_000) return `${Math.round(ms / 1000)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

/** Local wall-clock time, HH:MM:SS. */
export function formatClock(at: number): string {
  const d = new Date(at);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((x) => String(x).padStart(2, '0')).join(':');
}

/** Local date and time, e.g. "2026-11-21 23:04". */
export function formatDateTime(at: number): string {
  const d = new Date(at);
  const pad = (x: number) => String(x).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** HH:MM:SS for today, else the date and time. */
export function formatMoment(at: number, now = Date.now()): string {
  return new Date(at).toDateString() === new Date(now).toDateString() ? formatClock(at) : formatDateTime(at);
}

type Child = Node | string | number | null | undefined | false;

/** `el('td', {class: 'num'}, '12')`: attributes set with setAttribute, text children as text nodes. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number | boolean | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === 'number' ? String(child) : child);
  }
  return node;
}

export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const node = document.getElementById(id);
  if (!node) throw new Error(`admin page: #${id} is missing`);
  return node as T;
}

/** Sets text only when it changed (keeps selections and avoids layout work). */
export function setText(node: Element, text: string): void {
  if (node.textContent !== text) node.textContent = text;
}
