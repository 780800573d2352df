/**
 * The chaos schedule of a swarm run: a pure function of its options, so the same seed gives the same
 * faults at the same moments on the same tabs, and a failure seen once can be replayed.
 *
 * Tabs are named `t1`…`tN` for the initial ones and `tN+1`, … in the order joins open them. Each fault
 * kind with a period P fires about every P seconds: the k-th event at (k+1)·P ± P/4 (uniform jitter), on
 * its own random stream, so adding `--hang-every` does not move the closes. Targets are drawn from a
 * separate stream over the tabs that are live at that moment (open and not hung).
 *
 * Invariant: at least one live tab at all times. A fault that would take the last live tab gets a
 * `join` right before it (marked `keepAlive`), and the fault then hits the old tab. A hung tab is not
 * live; it resumes `hangFor` seconds later (or stays hung to the end).
 */

export type ChaosKind =
  /** `page.close()`: `pagehide` runs, the tab says goodbye. */
  | 'close'
  /** CDP `Page.crash`: the renderer dies, its sockets drop without a goodbye. */
  | 'crash'
  /** CDP `Debugger.pause`: the page stops while its sockets stay open; only heartbeats notice. */
  | 'hang'
  /** CDP `Debugger.resume` of a hung tab. */
  | 'resume'
  /** A new tab opens and joins. */
  | 'join'
  /** CDP `Network.emulateNetworkConditions`: the tab's HTTP and WebSocket traffic at `kbps`. */
  | 'throttle';

export interface ChaosEvent {
  /** Seconds from the start of the run (millisecond resolution). */
  at: number;
  kind: ChaosKind;
  /** The tab acted on; for a `join`, the tab it opens. */
  tab: string;
  /** A join added so that the following fault does not leave the world empty. */
  keepAlive?: true;
  /** For `throttle`: the link speed in kilobits per second. */
  kbps?: number;
}

export interface ChaosOptions {
  seed: number;
  /** Length of the run in seconds; events fall in (0, duration). */
  duration: number;
  /** Tabs open at the start. */
  workers: number;
  /** Mean seconds between faults of each kind; absent or 0: none of that kind. */
  closeEvery?: number;
  crashEvery?: number;
  hangEvery?: number;
  joinEvery?: number;
  /** Seconds a hung tab stays hung before it is resumed. Default 10. */
  hangFor?: number;
  /** Throttle one of the initial tabs (chosen by the seed) to this many kbit/s from the start. */
  throttleKbps?: number;
  /** Joins never make more tabs than this (open + hung). Default max(2·workers, workers + 2). */
  maxTabs?: number;
}

export const DEFAULT_HANG_FOR_S = 10;

/** Faults that take a tab out of the world. */
export const FAULT_KINDS: readonly ChaosKind[] = ['close', 'crash', 'hang'];

/** Order of kinds at the same instant: joins first (so a fault never empties the world needlessly). */
const KIND_ORDER: Record<ChaosKind, number> = { throttle: 0, resume: 1, join: 2, close: 3, crash: 4, hang: 5 };

/** mulberry32, as a float in [0, 1). */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** splitmix32 finaliser: independent streams from (seed, stream). */
function streamSeed(seed: number, stream: number): number {
  let x = ((seed >>> 0) ^ Math.imul(stream + 1, 0x9e3779b9)) | 0;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

const roundMs = (t: number) => Math.round(t * 1000) / 1000;

/** The k-th event at (k+1)·P ± P/4, for every such time inside (0, duration). */
function periodicTimes(seed: number, stream: number, every: number | undefined, duration: number): number[] {
  if (!every || every <= 0) return [];
  const random = mulberry32(streamSeed(seed, stream));
  const times: number[] = [];
  for (let k = 0; ; k++) {
    const base = (k + 1) * every;
    if (base - every / 4 >= duration) break;
    const t = roundMs(base + (random() - 0.5) * (every / 2));
    if (t > 0 && t < duration) times.push(t);
  }
  return times;
}

function sortEvents(events: ChaosEvent[]): ChaosEvent[] {
  return events.sort((a, b) => a.at - b.at || KIND_ORDER[a.kind] - KIND_ORDER[b.kind]);
}

export function defaultMaxTabs(workers: number): number {
  return Math.max(2 * workers, workers + 2);
}

export function chaosSchedule(opts: ChaosOptions): ChaosEvent[] {
  const { seed, duration, workers } = opts;
  if (!Number.isInteger(workers) || workers < 1)
    throw new RangeError(`chaosSchedule: workers must be a positive integer, got ${workers}`);
  if (!(duration > 0)) throw new RangeError(`chaosSchedule: duration must be positive, got ${duration}`);
  const hangFor = opts.hangFor ?? DEFAULT_HANG_FOR_S;
  const maxTabs = Math.max(opts.maxTabs ?? defaultMaxTabs(workers), workers);

  const planned: { at: number; kind: ChaosKind }[] = [];
  const kinds: [ChaosKind, number | undefined][] = [
    ['close', opts.closeEvery],
    ['crash', opts.crashEvery],
    ['hang', opts.hangEvery],
    ['join', opts.joinEvery],
  ];
  kinds.forEach(([kind, every], stream) => {
    for (const at of periodicTimes(seed, stream, every, duration)) planned.push({ at, kind });
  });
  planned.sort((a, b) => a.at - b.at || KIND_ORDER[a.kind] - KIND_ORDER[b.kind]);

  const pick = mulberry32(streamSeed(seed, 100));
  const choose = <T>(items: T[]): T => items[Math.min(items.length - 1, Math.floor(pick() * items.length))];
  const live: string[] = Array.from({ length: workers }, (_, i) => `t${i + 1}`);
  const hung = new Map<string, number>(); // tab → resume time (Infinity: hung to the end)
  let opened = workers;
  const out: ChaosEvent[] = [];

  if (opts.throttleKbps && opts.throttleKbps > 0)
    out.push({ at: 0, kind: 'throttle', tab: choose(live), kbps: opts.throttleKbps });

  const openTab = (at: number, keepAlive: boolean): string | null => {
    if (live.length + hung.size >= maxTabs) return null;
    opened += 1;
    const tab = `t${opened}`;
    live.push(tab);
    out.push(keepAlive ? { at, kind: 'join', tab, keepAlive: true } : { at, kind: 'join', tab });
    return tab;
  };
  const resumeDue = (until: number) => {
    const due = [...hung]
      .filter(([, at]) => at <= until)
      .sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0], 'en', { numeric: true }));
    for (const [tab, at] of due) {
      hung.delete(tab);
      live.push(tab);
      out.push({ at, kind: 'resume', tab });
    }
  };

  for (const event of planned) {
    resumeDue(event.at);
    if (event.kind === 'join') {
      openTab(event.at, false);
      continue;
    }
    let candidates = live;
    if (live.length === 1) {
      const fresh = openTab(event.at, true);
      if (fresh === null) continue; // no room for a replacement: skip the fault rather than empty the world
      candidates = live.filter((t) => t !== fresh);
    }
    const tab = choose(candidates);
    live.splice(live.indexOf(tab), 1);
    out.push({ at: event.at, kind: event.kind, tab });
    if (event.kind === 'hang') {
      const resumeAt = roundMs(event.at + hangFor);
      hung.set(tab, resumeAt < duration ? resumeAt : Infinity);
    }
  }
  resumeDue(duration - 1e-9);
  return sortEvents(out);
}

/**
 * Replays a schedule and returns the live-tab count after each event (for checks and the report).
 * Throws if an event acts on a tab that is not in the state it needs (a schedule bug).
 */
export function liveCountsAfter(schedule: readonly ChaosEvent[], workers: number): number[] {
  const live = new Set(Array.from({ length: workers }, (_, i) => `t${i + 1}`));
  const hung = new Set<string>();
  const gone = new Set<string>();
  return schedule.map((e) => {
    switch (e.kind) {
      case 'join':
        if (live.has(e.tab) || hung.has(e.tab) || gone.has(e.tab))
          throw new Error(`join of an existing tab ${e.tab} at ${e.at}`);
        live.add(e.tab);
        break;
      case 'close':
      case 'crash':
      case 'hang':
        if (!live.has(e.tab)) throw new Error(`${e.kind} of ${e.tab} at ${e.at}, which is not live`);
        live.delete(e.tab);
        if (e.kind === 'hang') hung.add(e.tab);
        else gone.add(e.tab);
        break;
      case 'resume':
        if (!hung.has(e.tab)) throw new Error(`resume of ${e.tab} at ${e.at}, which is not hung`);
        hung.delete(e.tab);
        live.add(e.tab);
        break;
      case 'throttle':
        if (!live.has(e.tab)) throw new Error(`throttle of ${e.tab} at ${e.at}, which is not live`);
        break;
    }
    return live.size;
  });
}
