/**
 * The coordinator admin page (`/admin/`): sign in with the admin token, then everything is pushed by
 * the coordinator over one EventSource (`/api/admin/feed`, see core/protocol/admin-feed.ts) — the page runs no
 * polling loop. Controls are POSTs to the server's admin actions; downloads are fetched with the token
 * in a header.
 */
import '../shared.css';
import './admin.css';
import './workers.css';
import { AdminApi, forgetToken, initialToken, saveToken } from './admin-api';
import { AdminCharts, bitsPerByte } from './charts';
import type { FeedCheckpoint, FeedMessage } from '../../core/protocol/admin-feed';
import { byId, el, formatBytes, setText } from './format';
import { EventLog, renderCheckpoints, renderTimeline } from './log-views';
import { applyFeedMessage, mergeChanges, type AdminModel, type Changes } from './model';
import { InvitesPanel } from './invites-view';
import { wireSample } from './sample-view';
import { renderTopology } from './topology-view';
import { STATE_FILTERS, WorkersTable } from './workers-table';
import { renderAggregates, renderControls, renderSummary, renderSwarm } from './workers-view';

let api: AdminApi | null = null;
let source: EventSource | null = null;
let model: AdminModel | null = null;
let charts: AdminCharts | null = null;
let workers: WorkersTable | null = null;
let invites: InvitesPanel | null = null;
let events: EventLog | null = null;
let pending: Changes = {};
// biome-ignore lint/correctness/noUnusedVariables: read by `frame ??=` below (Biome misses the read)
let frame: number | null = null;
let messageTimer: number | null = null;
/** When the aggregate rows and the topology were last drawn (page clock): at most once a second. */
let slowDrawnAt = 0;
const SLOW_DRAW_MS = 1000;

/** Wait before reopening a feed the browser closed for good. */
const RECONNECT_MS = 3000;

// ------------------------------------------------------------------ sign-in

function showLogin(problem?: string): void {
  source?.close();
  source = null;
  api = null;
  byId('app').hidden = true;
  byId('logout').hidden = true;
  byId('login').hidden = false;
  setConnection('off', 'signed out');
  const error = byId('login-error');
  error.hidden = !problem;
  error.textContent = problem ?? '';
  byId<HTMLInputElement>('token-input').focus();
}

async function signIn(token: string, fromForm: boolean): Promise<void> {
  const candidate = new AdminApi(token);
  const verdict = await candidate.verify();
  if (verdict === 'unauthorized') {
    forgetToken();
    showLogin(
      fromForm
        ? 'That token was refused. Use the admin token the coordinator was started with.'
        : 'Your saved token is no longer accepted; sign in again.',
    );
    return;
  }
  if (verdict !== 'ok') {
    showLogin(`Cannot sign in: ${verdict.problem}`);
    return;
  }
  saveToken(token);
  api = candidate;
  byId('login').hidden = true;
  byId('app').hidden = false;
  byId('logout').hidden = false;
  if (!charts)
    charts = new AdminCharts(
      byId('loss-chart'),
      byId('accuracy-chart'),
      byId('throughput-chart'),
      byId('usage-chart'),
      byId('bits-chart'),
    );
  void invites?.load();
  connect();
}

// ------------------------------------------------------------------ feed

type ConnectionState = 'off' | 'connecting' | 'live' | 'lost';

function setConnection(state: ConnectionState, text: string): void {
  const node = byId('connection');
  node.dataset.state = state;
  node.textContent = text;
}

function connect(): void {
  if (!api) return;
  source?.close();
  setConnection('connecting', 'connecting…');
  const es = new EventSource(api.feedUrl());
  source = es;
  es.onmessage = (e: MessageEvent<string>) => {
    let msg: FeedMessage;
    try {
      msg = JSON.parse(e.data) as FeedMessage;
    } catch {
      return;
    }
    onFeedMessage(msg);
    // "live" once the page shows the feed's data (its first message is the snapshot), not when the
    // socket merely opened: until then every number on the page is stale or empty.
    if (msg.type === 'snapshot') setConnection('live', 'live');
  };
  es.onerror = () => {
    if (source !== es) return;
    // EventSource retries by itself (the server asks for 2 s); a refused token would retry forever, so check it once.
    setConnection('lost', es.readyState === EventSource.CLOSED ? 'disconnected' : 'reconnecting…');
    void api?.verify().then((verdict) => {
      if (verdict === 'unauthorized' && source === es) {
        forgetToken();
        showLogin('The coordinator no longer accepts this token (was it restarted with another one?). Sign in again.');
      } else if (es.readyState === EventSource.CLOSED && source === es) {
        // The browser gave up (a non-200 answer): try again ourselves, not in a tight loop.
        window.setTimeout(() => source === es && connect(), RECONNECT_MS);
      }
    });
  };
}

function onFeedMessage(msg: FeedMessage): void {
  const result = applyFeedMessage(model, msg);
  model = result.model;
  if (result.changes.resync) {
    // A delta was missed: what the page holds is no longer what the coordinator's deltas apply to.
    setConnection('connecting', 'resyncing…');
    connect();
    return;
  }
  pending = mergeChanges(pending, result.changes);
  // Many messages can arrive in one frame (a burst of commits): draw once per frame.
  frame ??= requestAnimationFrame(() => {
    frame = null;
    const changes = pending;
    pending = {};
    if (model) render(model, changes);
  });
  // A hidden tab gets no animation frames; render the status anyway so tests and screenshots of a background tab hold.
  // The snapshot is drawn at once too: the page says "live" right after it, and must not show stale inputs then.
  if ((document.hidden || msg.type === 'snapshot') && model) {
    const changes = pending;
    pending = {};
    render(model, changes);
  }
}

/** The workers card's title line: how many there are, in the round, and shown after the filters. */
function renderWorkerCounts(m: AdminModel): void {
  const c = m.status.counts;
  const shown = workers?.visibleList().length ?? 0;
  setText(
    byId('workers-count'),
    c.workers > 0 ? `${c.workers} · ${c.members} in round ${m.status.round} · ${c.waiting} waiting` : '',
  );
  setText(byId('workers-shown'), shown === c.workers ? '' : `${shown} shown`);
  byId('workers-empty').hidden = c.workers > 0;
}

function render(m: AdminModel, changes: Changes): void {
  const all = changes.all ?? false;
  if (all || changes.status || changes.commits || changes.checkpoints) renderSummary(m);
  if (all || changes.status) {
    renderControls(m.status);
    renderSwarm(m.status);
    const ctx = { at: m.statusAt, heartbeatMs: m.job.heartbeatMs };
    workers?.update(m.workers, ctx);
    renderWorkerCounts(m);
    if (all || changes.workers || performance.now() - slowDrawnAt > SLOW_DRAW_MS) {
      slowDrawnAt = performance.now();
      renderAggregates(byId<HTMLTableSectionElement>('aggregates-body'), m.workers.values(), ctx);
      byId('topology-empty').hidden = renderTopology(byId('topology'), m.workers.values()) > 0;
      invites?.updateCounts(m.workers.values());
    }
  }
  if (all || changes.commits) {
    charts?.updateLoss(m);
    if (charts) byId('usage-empty').hidden = charts.updateUsage(m);
    renderTimeline(m);
  }
  if (all || changes.commits || changes.status) charts?.updateThroughput(m);
  if (all) {
    // A language model's page: the held-out bits per byte chart and the Sample card.
    byId('bits-card').hidden = !m.job.languageModel;
    byId('sample-card').hidden = !m.job.languageModel;
  }
  if (all || changes.evaluations) {
    charts?.updateAccuracy(m);
    byId('accuracy-empty').hidden = m.evaluations.length > 0;
    // A number one rank alone reported is not one the coordinator can vouch for (two ranks must agree).
    const latest = [...m.evaluations].sort((a, b) => a.step - b.step).at(-1);
    byId('accuracy-latest').textContent = latest
      ? `· ${(latest.accuracy * 100).toFixed(2)} % at step ${latest.step}${latest.verified ? ', two ranks agree' : ' (unverified: one rank’s number)'}`
      : '';
    if (charts) byId('bits-empty').hidden = charts.updateBitsPerByte(m) > 0;
    const last = bitsPerByte(m.evaluations).at(-1);
    byId('bits-latest').textContent = last ? `· ${last.bits.toFixed(3)} at step ${last.step}` : '';
  }
  if (all || changes.events) events?.update(m);
  if (all || changes.checkpoints) renderCheckpoints(m.checkpoints, downloadCheckpoint);
}

// ------------------------------------------------------------------ controls

function say(text: string, kind: 'ok' | 'problem' = 'ok'): void {
  const node = byId('control-message');
  node.hidden = false;
  node.textContent = text;
  node.dataset.kind = kind;
  if (messageTimer !== null) window.clearTimeout(messageTimer);
  messageTimer = window.setTimeout(() => (node.hidden = true), kind === 'ok' ? 5000 : 12000);
}

async function act(action: string, body: unknown, done: string): Promise<boolean> {
  if (!api) return false;
  const result = await api.post(action, body);
  if (result.ok) say(done);
  else if (result.status === 401) showLogin('The coordinator refused the token; sign in again.');
  else say(`${action} failed: ${result.message}`, 'problem');
  return result.ok;
}

async function downloadCheckpoint(checkpoint: FeedCheckpoint): Promise<void> {
  if (!api) return;
  say(`Preparing step ${checkpoint.step}…`);
  const result = await api.download(checkpoint.safetensorsUrl, `tabswarm-step${checkpoint.step}.safetensors`);
  if (result.ok) say(`Saved ${result.body.filename} (${formatBytes(result.body.bytes)}).`);
  else say(`Download failed: ${result.message}`, 'problem');
}

/** The workers table, its kick buttons, and its filter box and state filter. */
function wireWorkersTable(): void {
  workers = new WorkersTable(
    byId<HTMLTableElement>('workers-table'),
    byId('workers-scroll'),
    byId('workers-sizer'),
    byId<HTMLTableSectionElement>('workers-body'),
    (workerId: string) => {
      void act('kick', { workerId }, `Kicked ${workerId}.`).then((ok) => {
        if (!ok) workers?.release(workerId);
      });
    },
  );
  byId('workers-state').replaceChildren(
    ...Object.entries(STATE_FILTERS).map(([value, f]) => el('option', { value }, f.label)),
  );
  const filter = () => {
    workers?.filter(byId<HTMLInputElement>('workers-filter').value, byId<HTMLSelectElement>('workers-state').value);
    if (model) renderWorkerCounts(model);
  };
  byId('workers-filter').addEventListener('input', filter);
  byId('workers-state').addEventListener('change', filter);
}

function wireControls(): void {
  byId('pause').addEventListener('click', () => void act('pause', {}, 'Paused: the round closed and workers wait.'));
  byId('resume').addEventListener('click', () => void act('resume', {}, 'Resumed: a new round is gathering.'));
  byId('checkpoint-now').addEventListener(
    'click',
    () => void act('checkpoint', {}, 'Checkpoint requested from rank 0.'),
  );
  byId('download-model').addEventListener('click', async () => {
    if (!api) return;
    say('Preparing the model…');
    const result = await api.download('/api/admin/model.safetensors', 'tabswarm-model.safetensors');
    if (result.ok) say(`Saved ${result.body.filename} (${formatBytes(result.body.bytes)}).`);
    else
      say(
        result.status === 404
          ? 'No checkpoint yet: press "Checkpoint now" once a step is committed.'
          : `Download failed: ${result.message}`,
        'problem',
      );
  });
  const form = byId<HTMLFormElement>('workers-form');
  form.addEventListener('input', () => (form.dataset.dirty = 'true'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const min = Number(byId<HTMLInputElement>('min-workers').value);
    const max = Number(byId<HTMLInputElement>('max-workers').value);
    if (!Number.isInteger(min) || !Number.isInteger(max) || min < 1 || max < min) {
      say('Min and max workers are whole numbers with 1 ≤ min ≤ max.', 'problem');
      return;
    }
    if (await act('workers', { min, max }, `Workers set to ${min}–${max}.`)) form.dataset.dirty = 'false';
  });
  wireWorkersTable();
  invites = new InvitesPanel(() => api, say);
  wireSample(
    () => api,
    () => model?.status.latestCheckpoint?.step ?? null,
  );
  events = new EventLog(
    byId<HTMLOListElement>('event-list'),
    byId('event-filters'),
    byId<HTMLInputElement>('event-search'),
  );
}

// ------------------------------------------------------------------ start

function start(): void {
  wireControls();
  byId<HTMLFormElement>('login-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const token = byId<HTMLInputElement>('token-input').value.trim();
    if (token) void signIn(token, true);
  });
  byId('logout').addEventListener('click', () => {
    forgetToken();
    model = null;
    showLogin();
  });
  const token = initialToken();
  if (token) void signIn(token, false);
  else showLogin();
}

start();
