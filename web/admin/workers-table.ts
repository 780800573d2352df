/**
 * The admin page's workers table for hundreds of workers: virtualized (only the rows in view, and a
 * few around them, are in the DOM; a sizer keeps the scrollbar honest), sortable by any column (click a
 * header; again to reverse) and filterable by text and by state. The columns are worker-columns.ts.
 *
 * Rows are fixed-height (`ROW_PX`, the CSS agrees) so the rows in view follow from the scroll offset
 * alone. Row elements are keyed by worker id and updated in place (a delta arrives every second;
 * rebuilding rows under the pointer would swallow clicks). Kicking takes two clicks: the first arms
 * the button for a few seconds.
 */
import type { FeedWorker } from '../../core/protocol/admin-feed';
import { byRankThenPosition } from '../../core/protocol/admin-feed';
import { el, setText } from './format';
import { type ColumnContext, isLate, linkPath, WORKER_COLUMNS, type WorkerColumn } from './worker-columns';

/** Height of one row, px (admin.css `.workers-rows tr`). */
export const ROW_PX = 34;
/** Rows drawn above and below the ones in view, so a short scroll shows no blank. */
const OVERSCAN = 6;
/** Width of the actions column (the kick button), em of the table's font size like the columns'. */
const ACTIONS_WIDTH_EM = 6;
/** Rows in view when the scroller has no height yet (hidden page): its CSS max-height / ROW_PX. */
const FALLBACK_VIEW_ROWS = 16;
const KICK_ARM_MS = 4000;

/** The state filter's choices (the `<select>`'s values). */
export const STATE_FILTERS: Record<string, { label: string; keep: (w: FeedWorker, ctx: ColumnContext) => boolean }> = {
  all: { label: 'all workers', keep: () => true },
  members: { label: 'in the round', keep: (w) => w.rank !== null },
  training: { label: 'training', keep: (w) => w.state === 'training' },
  syncing: { label: 'syncing or ready', keep: (w) => w.state === 'syncing' || w.state === 'ready' },
  waiting: { label: 'waiting', keep: (w) => w.state === 'waiting' },
  late: { label: 'late heartbeat', keep: (w, ctx) => isLate(w, ctx) },
  ice: { label: 'ICE problem', keep: (w) => w.iceError !== null },
  relay: { label: 'through TURN', keep: (w) => linkPath(w).includes('relay') },
};

interface Row {
  tr: HTMLTableRowElement;
  cells: HTMLTableCellElement[];
  kick: HTMLButtonElement;
  worker: FeedWorker | null;
}

export class WorkersTable {
  private readonly rows = new Map<string, Row>();
  private workers: ReadonlyMap<string, FeedWorker> = new Map();
  private ctx: ColumnContext = { at: 0, heartbeatMs: 1000 };
  private sort: { key: string; dir: 1 | -1 } | null = null;
  private text = '';
  private state = 'all';
  private list: FeedWorker[] = [];
  private listDirty = true;
  private armed: { id: string; until: number } | null = null;
  private disarmTimer: number | null = null;
  private frame: number | null = null;
  private readonly heads = new Map<string, HTMLTableCellElement>();

  constructor(
    private readonly head: HTMLTableElement,
    private readonly scroller: HTMLElement,
    private readonly sizer: HTMLElement,
    private readonly body: HTMLTableSectionElement,
    private readonly onKick: (workerId: string) => void,
  ) {
    this.buildHead();
    // A narrower or wider window: the rows in view and the header's width change.
    new ResizeObserver(() => this.draw()).observe(scroller);
    scroller.addEventListener('scroll', () => {
      this.frame ??= requestAnimationFrame(() => {
        this.frame = null;
        this.draw();
      });
    });
  }

  /** New rows or a new status (ages move): redraw what is in view. */
  update(workers: ReadonlyMap<string, FeedWorker>, ctx: ColumnContext): void {
    this.workers = workers;
    this.ctx = ctx;
    this.listDirty = true;
    this.draw();
  }

  /** The filter box's text and the state filter's value. */
  filter(text: string, state: string): void {
    this.text = text.trim().toLowerCase();
    this.state = state in STATE_FILTERS ? state : 'all';
    this.listDirty = true;
    this.scroller.scrollTop = 0;
    this.draw();
  }

  /** Workers passing the filters, in the table's order. */
  visibleList(): FeedWorker[] {
    if (!this.listDirty) return this.list;
    const keep = STATE_FILTERS[this.state].keep;
    const words = this.text.split(/\s+/).filter(Boolean);
    const matches = (w: FeedWorker) => {
      if (words.length === 0) return true;
      const hay = WORKER_COLUMNS.map((c) => c.text?.(w) ?? '')
        .join(' ')
        .toLowerCase();
      return words.every((word) => hay.includes(word));
    };
    const list = [...this.workers.values()].filter((w) => keep(w, this.ctx) && matches(w));
    list.sort(this.comparator());
    this.list = list;
    this.listDirty = false;
    return list;
  }

  private comparator(): (a: FeedWorker, b: FeedWorker) => number {
    const column = this.sort && WORKER_COLUMNS.find((c) => c.key === this.sort!.key);
    if (!this.sort || !column?.sortValue) return byRankThenPosition;
    const { dir } = this.sort;
    const value = column.sortValue;
    return (a, b) => {
      const va = value(a, this.ctx);
      const vb = value(b, this.ctx);
      if (va === vb) return byRankThenPosition(a, b);
      if (va === null) return 1;
      if (vb === null) return -1;
      return (va < vb ? -1 : 1) * dir;
    };
  }

  private buildHead(): void {
    const colgroup = () =>
      el(
        'colgroup',
        {},
        ...WORKER_COLUMNS.map((c) => el('col', { style: `width: ${c.width}` })),
        el('col', { style: `width: ${ACTIONS_WIDTH_EM}em` }),
      );
    // The table is at least as wide as its columns: a new column widens it, no CSS to change.
    const widthEm = WORKER_COLUMNS.reduce((sum, c) => sum + Number.parseFloat(c.width), ACTIONS_WIDTH_EM);
    this.scroller.style.setProperty('--workers-width', `${widthEm}em`);
    const tr = el('tr');
    for (const column of WORKER_COLUMNS) {
      const th = el('th', {
        scope: 'col',
        class: [column.key, column.numeric ? 'num' : ''].filter(Boolean).join(' '),
        title: column.title,
        'data-short': column.short,
        'aria-sort': 'none',
      });
      th.append(column.label);
      if (column.sortValue) {
        th.classList.add('sortable');
        th.tabIndex = 0;
        th.addEventListener('click', () => this.sortBy(column));
        th.addEventListener('keydown', (e) => {
          if (e.key === 'Enter' || e.key === ' ') {
            e.preventDefault();
            this.sortBy(column);
          }
        });
      }
      this.heads.set(column.key, th);
      tr.append(th);
    }
    tr.append(el('th', { scope: 'col', class: 'actions' }, el('span', { class: 'visually-hidden' }, 'Actions')));
    this.head.replaceChildren(colgroup(), el('thead', {}, tr));
    this.body.parentElement!.prepend(colgroup());
  }

  /** Sorts by `column`, ascending; the same column again reverses; a third time returns to rank order. */
  sortBy(column: WorkerColumn): void {
    if (this.sort?.key !== column.key) this.sort = { key: column.key, dir: 1 };
    else if (this.sort.dir === 1) this.sort = { key: column.key, dir: -1 };
    else this.sort = null;
    for (const [key, th] of this.heads)
      th.setAttribute(
        'aria-sort',
        this.sort?.key === key ? (this.sort.dir === 1 ? 'ascending' : 'descending') : 'none',
      );
    this.listDirty = true;
    this.draw();
  }

  /** Draws the rows in view (and OVERSCAN around them); removes the others from the DOM. */
  private draw(): void {
    const list = this.visibleList();
    this.sizer.style.height = `${list.length * ROW_PX}px`;
    const viewRows =
      this.scroller.clientHeight > 0 ? Math.ceil(this.scroller.clientHeight / ROW_PX) : FALLBACK_VIEW_ROWS;
    const first = Math.max(0, Math.floor(this.scroller.scrollTop / ROW_PX) - OVERSCAN);
    const last = Math.min(list.length, first + viewRows + 2 * OVERSCAN);
    const rowsTable = this.body.parentElement as HTMLElement;
    rowsTable.style.transform = `translateY(${first * ROW_PX}px)`;
    // The header is a table of its own (the rows scroll under it): the same width lays out the same columns.
    const width = `${rowsTable.offsetWidth}px`;
    if (rowsTable.offsetWidth > 0 && this.head.style.width !== width) this.head.style.width = width;
    const shown = new Set<string>();
    for (let i = first; i < last; i++) {
      const worker = list[i];
      shown.add(worker.id);
      let row = this.rows.get(worker.id);
      if (!row) {
        row = this.createRow(worker.id);
        this.rows.set(worker.id, row);
      }
      this.fill(row, worker);
      const at = i - first;
      if (this.body.children[at] !== row.tr) this.body.insertBefore(row.tr, this.body.children[at] ?? null);
    }
    for (const [id, row] of this.rows) {
      if (shown.has(id)) continue;
      row.tr.remove();
      this.rows.delete(id);
    }
  }

  private createRow(id: string): Row {
    const kick = el(
      'button',
      { type: 'button', class: 'kick small', 'data-worker-id': id, title: `Remove ${id} from the job` },
      'Kick',
    );
    kick.addEventListener('click', () => this.onKickClick(id));
    const cells = WORKER_COLUMNS.map((c) =>
      el('td', { class: [c.key, c.numeric ? 'num' : ''].filter(Boolean).join(' ') }),
    );
    const tr = el('tr', { 'data-worker-id': id });
    tr.append(...cells, el('td', { class: 'actions' }, kick));
    return { tr, cells, kick, worker: null };
  }

  private fill(row: Row, worker: FeedWorker): void {
    WORKER_COLUMNS.forEach((column, i) => {
      column.render(row.cells[i], worker, this.ctx);
    });
    row.worker = worker;
    row.tr.dataset.state = worker.state;
    const armed = this.armed !== null && this.armed.id === worker.id && this.armed.until > Date.now();
    if (!row.kick.disabled) setText(row.kick, armed ? 'Confirm kick' : 'Kick');
    row.kick.classList.toggle('armed', armed);
  }

  private onKickClick(id: string): void {
    const row = this.rows.get(id);
    if (!row) return;
    if (this.armed && this.armed.id === id && this.armed.until > Date.now()) {
      this.disarm();
      row.kick.disabled = true;
      setText(row.kick, 'Kicking…');
      this.onKick(id);
      return;
    }
    this.disarm();
    this.armed = { id, until: Date.now() + KICK_ARM_MS };
    setText(row.kick, 'Confirm kick');
    row.kick.classList.add('armed');
    this.disarmTimer = window.setTimeout(() => this.disarm(), KICK_ARM_MS);
  }

  private disarm(): void {
    if (this.disarmTimer !== null) window.clearTimeout(this.disarmTimer);
    this.disarmTimer = null;
    const previous = this.armed ? this.rows.get(this.armed.id) : undefined;
    this.armed = null;
    if (previous) {
      setText(previous.kick, 'Kick');
      previous.kick.classList.remove('armed');
    }
  }

  /** A kick that failed: the row's button works again. */
  release(id: string): void {
    const row = this.rows.get(id);
    if (row) {
      row.kick.disabled = false;
      setText(row.kick, 'Kick');
    }
  }
}
