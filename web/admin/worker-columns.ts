/**
 * The columns of the admin page's workers table, in one place: each says its header, how its cell is
 * drawn, what it sorts by and what text the filter matches in it. The table (workers-table.ts) knows
 * nothing of the columns beyond this list; a new column (a worker's kernel variants, its GFLOP/s) is
 * one entry here and, if it needs data, one field of `FeedWorker` (core/protocol/admin-feed.ts).
 * The widths with the actions column's sum to what the card holds in a 1280 px window (84 of its ~85.6
 * em; test/browser/admin-200-workers.test.ts): a long cell ends in an ellipsis, its title has it all.
 */
import type { FeedWorker, FeedWorkerState } from '../../core/protocol/admin-feed';
import {
  el,
  formatAge,
  formatBytesPerSample,
  formatInt,
  formatKernels,
  formatNumber,
  formatPercent,
  setText,
} from './format';

/** What a cell needs besides its row: the coordinator clock of the rows and the job's heartbeat period. */
export interface ColumnContext {
  /** Coordinator clock (ms) of the status the rows came with (ages are relative to it). */
  at: number;
  heartbeatMs: number;
}

export interface WorkerColumn {
  /** Its cells' class and its sort key. */
  key: string;
  label: string;
  /** Label on a phone (`data-short`). */
  short?: string;
  title?: string;
  numeric?: boolean;
  /** Its width in the fixed table layout, in em of the table's font size (the table's width is their sum). */
  width: `${number}em`;
  /** Sorts by this (null sorts last in either direction); absent: the column does not sort. */
  sortValue?: (w: FeedWorker, ctx: ColumnContext) => number | string | null;
  /** Text the filter box matches (default: none). */
  text?: (w: FeedWorker) => string;
  /** Fills the cell (created once per row element, refilled as the row's worker or values change). */
  render: (td: HTMLTableCellElement, w: FeedWorker, ctx: ColumnContext) => void;
}

/** A heartbeat this many periods old is shown amber, and red past 2.5 (the coordinator drops a worker at 3). */
export const LATE_PERIODS = 1.5;
const VERY_LATE_PERIODS = 2.5;

export function heartbeatAgeMs(w: FeedWorker, ctx: ColumnContext): number {
  return Math.max(0, ctx.at - w.lastSeen);
}

export function isLate(w: FeedWorker, ctx: ColumnContext): boolean {
  return heartbeatAgeMs(w, ctx) > LATE_PERIODS * ctx.heartbeatMs;
}

const STATE_ORDER: Record<FeedWorkerState, number> = { training: 0, ready: 1, syncing: 2, waiting: 3 };

/** The ICE path of a worker's ring links: `relay` when any end is a TURN relay, else the local types. */
export function linkPath(w: FeedWorker): string {
  const paths = w.peerLinks.map((l) => (l.local === 'relay' || l.remote === 'relay' ? 'relay' : l.local));
  return [...new Set(paths)].join('/');
}

export const WORKER_COLUMNS: readonly WorkerColumn[] = [
  {
    key: 'rank',
    label: '#',
    width: '3.5em',
    numeric: true,
    title: 'Rank in the round; waiting workers show their place in the queue (w1, w2, …)',
    sortValue: (w) => (w.rank !== null ? w.rank : 1e6 + (w.position ?? 0)),
    render: (td, w) => setText(td, w.rank !== null ? String(w.rank) : w.position !== null ? `w${w.position + 1}` : '–'),
  },
  {
    key: 'state',
    label: 'State',
    width: '5.5em',
    title:
      'training; ready (synced, waiting for the others); syncing (receiving the state); waiting (not in the round)',
    sortValue: (w) => STATE_ORDER[w.state],
    text: (w) => w.state,
    render: (td, w) => {
      td.dataset.state = w.state;
      setText(td, w.state);
    },
  },
  {
    key: 'worker-id',
    label: 'Worker',
    width: '9em',
    sortValue: (w) => w.id,
    text: (w) => `${w.id} ${w.peerId}`,
    render: (td, w) => {
      setText(td, w.id);
      td.title = `peer ${w.peerId}`;
    },
  },
  {
    key: 'adapter-cell',
    label: 'GPU adapter',
    width: '7em',
    sortValue: (w) => w.adapter,
    text: (w) => w.adapter,
    render: (td, w) => {
      setText(td, w.adapter || 'unknown');
      td.title = w.adapter;
    },
  },
  {
    key: 'kernels-cell',
    label: 'Kernels',
    width: '7em',
    title:
      "The kernels the tab runs: its matmul variant, the matmul GFLOP/s its autotuner measured on the job's shapes, and whether it tuned now, took a cached choice or the defaults (hover a cell for every family)",
    sortValue: (w) => w.kernels?.gflops ?? null,
    text: (w) => formatKernels(w.kernels).text,
    render: (td, w) => {
      const kernels = formatKernels(w.kernels);
      setText(td, kernels.text);
      td.title = kernels.title;
    },
  },
  {
    key: 'share',
    label: 'Share',
    width: '6.5em',
    sortValue: (w) => w.share,
    render: (td, w) => {
      if (!td.firstChild)
        td.append(
          el('div', { class: 'share-bar' }, el('div', { class: 'share-fill' })),
          el('span', { class: 'share-text' }),
        );
      (td.querySelector('.share-fill') as HTMLElement).style.width = `${((w.share ?? 0) * 100).toFixed(1)}%`;
      setText(td.querySelector('.share-text')!, w.share === null ? '–' : formatPercent(w.share));
    },
  },
  {
    key: 'speed',
    label: 'Samples/s',
    width: '6.5em',
    numeric: true,
    title: 'Samples per second of compute, as the coordinator measured its reports',
    sortValue: (w) => w.throughput,
    render: (td, w) => setText(td, w.throughput === null ? '–' : formatNumber(w.throughput * 1000)),
  },
  {
    key: 'utilization',
    label: 'Util.',
    width: '5.5em',
    numeric: true,
    title:
      'Time computing / wall time over its recent steps (its compute-time claim, capped at the time the coordinator measured)',
    sortValue: (w) => w.utilization,
    render: (td, w) => setText(td, w.utilization === null ? '–' : formatPercent(w.utilization, 0)),
  },
  {
    key: 'wire',
    label: 'B/sample',
    width: '6em',
    numeric: true,
    title: 'Bytes it sent in the step collectives per sample it computed, over its recent steps (its own claim)',
    sortValue: (w) => w.bytesPerSample,
    render: (td, w) => setText(td, formatBytesPerSample(w.bytesPerSample)),
  },
  {
    key: 'heartbeat',
    label: 'Seen',
    width: '5em',
    numeric: true,
    title: "Heartbeat: time since the worker's last message",
    sortValue: (w, ctx) => heartbeatAgeMs(w, ctx),
    render: (td, w, ctx) => {
      const age = heartbeatAgeMs(w, ctx);
      setText(td, formatAge(age));
      td.dataset.late =
        age > VERY_LATE_PERIODS * ctx.heartbeatMs ? 'very' : age > LATE_PERIODS * ctx.heartbeatMs ? 'yes' : 'no';
    },
  },
  {
    key: 'rtt',
    label: 'RTT · path',
    width: '8em',
    numeric: true,
    title:
      "WebRTC round-trip time of the worker's ring links (the slowest) and their ICE path (host, srflx, prflx, relay = through TURN), from its last heartbeat",
    sortValue: (w) => w.peerRttMs,
    text: (w) => `${linkPath(w)} ${w.iceError ?? ''}`,
    render: (td, w) => {
      const path = linkPath(w);
      setText(
        td,
        w.iceError ?? `${w.peerRttMs === null ? '–' : `${formatNumber(w.peerRttMs)} ms`}${path ? ` · ${path}` : ''}`,
      );
      td.dataset.iceError = w.iceError ? 'yes' : 'no';
      td.title =
        w.iceError ??
        w.peerLinks
          .map((l) => `${l.peer}: ${l.local} → ${l.remote}${l.rttMs != null ? `, ${l.rttMs} ms` : ''}`)
          .join('\n');
    },
  },
  {
    key: 'step',
    label: 'Step',
    width: '4em',
    numeric: true,
    sortValue: (w) => w.lastStep,
    render: (td, w) =>
      setText(td, w.state === 'syncing' ? 'syncing' : w.lastStep === null ? '–' : formatInt(w.lastStep)),
  },
  {
    key: 'invite-cell',
    label: 'Invite',
    width: '4.5em',
    title: 'The invite link the worker joined through',
    sortValue: (w) => w.invite,
    text: (w) => w.invite ?? '',
    render: (td, w) => setText(td, w.invite ?? '–'),
  },
];
