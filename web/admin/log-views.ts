/** The event log (with filters), the commit timeline and the checkpoint list. */
import {
  FEED_CATEGORIES,
  type FeedCategory,
  type FeedCheckpoint,
  type FeedEvent,
} from '../../core/protocol/admin-feed';
import { byId, el, formatBytes, formatClock, formatInt, formatMoment, setText } from './format';
import type { AdminModel } from './model';

/** Event lines shown at once (the newest). */
const SHOWN_EVENTS = 300;

const CATEGORY_LABELS: Record<FeedCategory, string> = {
  join: 'Joins',
  leave: 'Goodbyes',
  crash: 'Crashes',
  restart: 'Restarts',
  rejected: 'Rejected',
  admin: 'Admin',
  checkpoint: 'Checkpoints',
  verify: 'Checks',
  round: 'Rounds',
  job: 'Job',
  other: 'Other',
};

// biome-ignore lint/suspicious/noExplicitAny: log data is free-form JSON whose fields are only interpolated into text
type Data = Record<string, any>;

/** The human line of each machine log event (names from the coordinator's log), by event name. */
const EVENT_TEXT: Record<string, (d: Data) => string> = {
  join: (d) => {
    const adapter = d.adapter ? [d.adapter.vendor, d.adapter.architecture].filter(Boolean).join(' ') : '';
    return `${d.workerId} joined${d.reconnect ? ' again (reconnect)' : ''}${adapter ? ` · ${adapter}` : ''}`;
  },
  leave: (d) => `${d.workerId} left (${d.reason})${d.wasMember ? ', its round closed' : ''}`,
  worker_failed: (d) => `${d.workerId} failed: ${d.detail}${d.member ? ` (member of round ${d.round})` : ''}`,
  failure_report: (d) =>
    `${d.workerId} reported a failure in round ${d.round}: ${d.reason}${d.peer ? ` (peer ${d.peer})` : ''}`,
  divergence: (d) => `ranks disagree on the parameters after step ${d.step} (round ${d.round})`,
  round_open: (d) =>
    `round ${d.round} opened with ${Array.isArray(d.world) ? d.world.length : '?'} rank(s), next step ${d.step}`,
  round_train: (d) => `round ${d.round} training from step ${d.step}`,
  round_closed: (d) => `round ${d.round} closed: ${d.reason}${d.restart ? ' — counts as a restart' : ''}`,
  message_rejected: (d) => messageText(d),
  message_invalid: (d) => messageText(d),
  admin: (d) => `admin: ${describeAction(d.action)}`,
  admin_ignored: (d) => `admin ${describeAction(d.action)} ignored: ${d.why}`,
  checkpoint_requested: (d) => `checkpoint of step ${d.step} requested from ${d.workerId}`,
  checkpoint_stored: (d) => `checkpoint of step ${d.step} stored (sha256 ${String(d.sha256 ?? '').slice(0, 12)}…)`,
  verification_requested: (d) => `step ${d.step} chosen for a recomputed check (state uploaded by ${d.uploader})`,
  verification_done: (d) =>
    Array.isArray(d.cheaters) && d.cheaters.length
      ? `step ${d.step} recomputed: ${d.cheaters.join(', ')} lied about their contribution`
      : `step ${d.step} recomputed: every contribution checks out (worst ${Number(Math.max(...(d.ownRatios ?? [0]))).toExponential(1)})`,
  verification_abandoned: (d) => `check of step ${d.step} abandoned: ${d.error}`,
  ring_identity_failed: (d) =>
    `step ${d.step} not committed: the ring's sums do not add up (${(d.liars ?? []).length ? `contradicted itself: ${d.liars.join(', ')}` : `disputes: ${(d.disputes ?? []).map((p: string[]) => p.join('↔')).join(', ')}`})`,
  data_dispute: (d) => `${d.reporter} says ${d.accused} sent bytes no honest tab sends (${d.reason})`,
  cheater_banned: (d) => `banned ${(d.workers ?? []).join(', ')}: ${d.why}`,
  checkpoint_ignored: (d) => `checkpoint of step ${d.step} ignored (last commit ${d.lastCommit})`,
  epoch_end: (d) => `epoch ${Number(d.epoch) + 1} finished at step ${d.step}`,
  job_done: (d) => `job done at step ${d.step} (${d.restarts} restarts)`,
  job_failed: (d) => `job failed: ${d.why}`,
  record_rolled_back: (d) => `record rolled back from step ${d.from} to ${d.to}: ${d.reason}`,
  evaluation: (d) =>
    `test accuracy ${(Number(d.accuracy) * 100).toFixed(2)}% at step ${d.step}${d.verified === true ? ' (two ranks agree)' : ' (unverified)'}`,
  evaluation_disputed: (d) => `two ranks disagree on the test evaluation of step ${d.step}`,
};

/** One human line per machine log event; an event without a line of its own shows its data (cut at 160 characters). */
export function describeEvent(event: FeedEvent): string {
  if (Object.hasOwn(EVENT_TEXT, event.event)) return EVENT_TEXT[event.event]((event.data ?? {}) as Data);
  const text = JSON.stringify(event.data);
  return text && text !== '{}' ? (text.length > 160 ? `${text.slice(0, 157)}…` : text) : '';
}

function messageText(d: Data): string {
  return `${d.code}: ${d.message}${d.conn ? ` (socket ${d.conn})` : ''}`;
}

function describeAction(action: Data | undefined): string {
  if (!action) return '?';
  switch (action.type) {
    case 'kick':
      return `kick ${action.workerId}`;
    case 'set_workers':
      return `set workers ${action.min}–${action.max}`;
    case 'checkpoint_now':
      return 'checkpoint now';
    default:
      return String(action.type);
  }
}

export class EventLog {
  private readonly enabled = new Set<FeedCategory>(FEED_CATEGORIES);
  private query = '';
  private readonly counts = new Map<FeedCategory, HTMLSpanElement>();
  private model: AdminModel | null = null;

  constructor(
    private readonly list: HTMLOListElement,
    filters: HTMLElement,
    search: HTMLInputElement,
  ) {
    for (const category of FEED_CATEGORIES) {
      const count = el('span', { class: 'chip-count' });
      this.counts.set(category, count);
      const chip = el(
        'button',
        { type: 'button', class: `chip cat-${category}`, 'aria-pressed': 'true', 'data-category': category },
        CATEGORY_LABELS[category],
        count,
      );
      chip.addEventListener('click', () => {
        const on = !this.enabled.has(category);
        if (on) this.enabled.add(category);
        else this.enabled.delete(category);
        chip.setAttribute('aria-pressed', String(on));
        this.render();
      });
      filters.append(chip);
    }
    search.addEventListener('input', () => {
      this.query = search.value.trim().toLowerCase();
      this.render();
    });
  }

  update(model: AdminModel): void {
    this.model = model;
    this.render();
  }

  private render(): void {
    if (!this.model) return;
    const tally = new Map<FeedCategory, number>();
    const shown: HTMLLIElement[] = [];
    for (let i = this.model.events.length - 1; i >= 0; i--) {
      const event = this.model.events[i];
      tally.set(event.category, (tally.get(event.category) ?? 0) + 1);
      if (shown.length >= SHOWN_EVENTS || !this.enabled.has(event.category)) continue;
      const text = describeEvent(event);
      if (this.query && !`${event.event} ${text} ${JSON.stringify(event.data)}`.toLowerCase().includes(this.query))
        continue;
      shown.push(
        el(
          'li',
          { class: `event level-${event.level}`, 'data-category': event.category, 'data-event': event.event },
          el('time', { datetime: new Date(event.at).toISOString() }, formatClock(event.at)),
          el('span', { class: `tag cat-${event.category}` }, event.event.replace(/_/g, ' ')),
          el('span', { class: 'event-text' }, text),
        ),
      );
    }
    for (const [category, node] of this.counts) setText(node, String(tally.get(category) ?? 0));
    if (shown.length === 0)
      shown.push(
        el(
          'li',
          { class: 'event empty' },
          this.model.events.length === 0 ? 'No events yet.' : 'No event matches the filters.',
        ),
      );
    this.list.replaceChildren(...shown);
  }
}

const SVG = 'http://www.w3.org/2000/svg';
const ROUND_COLORS = ['--round-a', '--round-b', '--round-c', '--round-d'];

interface RoundSpan {
  round: number;
  first: number;
  last: number;
  commits: number;
  worldSize: number;
}

/** Commits grouped into runs of consecutive commits of one round. */
function roundSpans(model: AdminModel): RoundSpan[] {
  const spans: RoundSpan[] = [];
  for (const c of model.commits) {
    const last = spans[spans.length - 1];
    if (last && last.round === c.round && c.firstStep <= last.last + 1) {
      last.last = c.step;
      last.commits += 1;
      last.worldSize = c.worldSize;
    } else {
      spans.push({ round: c.round, first: c.firstStep, last: c.step, commits: 1, worldSize: c.worldSize });
    }
  }
  return spans;
}

/** A strip over the job's steps: committed ranges coloured by round, the current step marked. */
export function renderTimeline(model: AdminModel): void {
  const svg = byId('timeline') as unknown as SVGSVGElement;
  const total = Math.max(1, model.status.totalSteps);
  svg.setAttribute('viewBox', `0 0 ${total} 10`);
  const spans = roundSpans(model);
  const nodes: SVGElement[] = [];
  const track = document.createElementNS(SVG, 'rect');
  track.setAttribute('class', 'track');
  track.setAttribute('x', '0');
  track.setAttribute('y', '0');
  track.setAttribute('width', String(total));
  track.setAttribute('height', '10');
  nodes.push(track);
  for (const span of spans) {
    const rect = document.createElementNS(SVG, 'rect');
    rect.setAttribute('x', String(span.first - 1));
    rect.setAttribute('y', '0');
    rect.setAttribute('width', String(span.last - span.first + 1));
    rect.setAttribute('height', '10');
    rect.setAttribute('style', `fill: var(${ROUND_COLORS[span.round % ROUND_COLORS.length]})`);
    const title = document.createElementNS(SVG, 'title');
    title.textContent = `round ${span.round}: steps ${span.first}–${span.last}, ${span.commits} commits, ${span.worldSize} rank(s)`;
    rect.append(title);
    nodes.push(rect);
  }
  svg.replaceChildren(...nodes);

  const rounds = byId('rounds');
  rounds.replaceChildren(
    ...spans
      .slice(-6)
      .reverse()
      .map((s) =>
        el(
          'li',
          {},
          el('span', {
            class: 'round-swatch',
            style: `background: var(${ROUND_COLORS[s.round % ROUND_COLORS.length]})`,
          }),
          `Round ${s.round} · ${s.worldSize} rank${s.worldSize === 1 ? '' : 's'} · steps ${formatInt(s.first)}–${formatInt(s.last)} · ${s.commits} commit${s.commits === 1 ? '' : 's'}`,
        ),
      ),
  );
  if (spans.length === 0) rounds.replaceChildren(el('li', { class: 'muted' }, 'Nothing committed yet.'));
}

export function renderCheckpoints(
  checkpoints: FeedCheckpoint[],
  onDownload: (checkpoint: FeedCheckpoint) => void,
): void {
  const body = byId('checkpoints-body');
  byId('checkpoints-empty').hidden = checkpoints.length > 0;
  body.replaceChildren(
    ...[...checkpoints].reverse().map((c) => {
      const download = el(
        'button',
        {
          type: 'button',
          class: 'small',
          'data-step': c.step,
          title: `Download the parameters of step ${c.step} as safetensors`,
        },
        'Download',
      );
      download.addEventListener('click', () => onDownload(c));
      return el(
        'tr',
        { 'data-step': c.step },
        el('td', { class: 'num' }, formatInt(c.step)),
        el('td', { class: 'num' }, String(c.cursor === 0 && c.step > 0 ? c.epoch : c.epoch + 1)),
        el('td', { class: 'saved', title: new Date(c.createdAt).toLocaleString() }, formatMoment(c.createdAt)),
        el('td', { class: 'num' }, formatBytes(c.bytes)),
        el('td', { class: 'mono', title: c.sha256 }, c.sha256.slice(0, 8)),
        el('td', { class: 'actions' }, download),
      );
    }),
  );
}
