/**
 * The summary card, the swarm card (the coordinator's aggregates over every worker, and aggregate rows:
 * the workers by state and by GPU adapter, computed from the rows the page holds) and the controls'
 * state. The workers table itself is workers-table.ts, the sync groups topology-view.ts.
 */
import type { AdminStatus, FeedWorker } from '../../core/protocol/admin-feed';
import { byId, el, formatBytesPerSample, formatInt, formatNumber, formatPercent, setText, syncLabel } from './format';
import type { AdminModel } from './model';
import { type ColumnContext, isLate } from './worker-columns';

const STATE_LABELS: Record<string, string> = {
  gathering: 'gathering',
  syncing: 'syncing',
  training: 'training',
  paused: 'paused',
  done: 'done',
  failed: 'failed',
};

export function renderSummary(model: AdminModel): void {
  const { status, job } = model;
  setText(
    byId('run'),
    `run ${model.runId} · ${job.model} (${formatInt(job.parameterCount)} parameters) on ${job.dataset}`,
  );
  const badge = byId('job-state');
  setText(badge, STATE_LABELS[status.state] ?? status.state);
  badge.dataset.state = status.state;
  setText(byId('sum-step'), `${formatInt(status.step)} / ${formatInt(status.totalSteps)}`);
  setText(byId('sum-epoch'), `${Math.min(status.epoch + 1, job.epochs)} / ${job.epochs}`);
  setText(byId('sum-world'), `${status.counts.members}  (${status.minWorkers}–${status.maxWorkers})`);
  setText(byId('sum-waiting'), String(status.counts.waiting));
  const lastCommit = model.commits[model.commits.length - 1];
  setText(byId('sum-loss'), formatNumber(lastCommit?.loss ?? null, 4));
  const lastRate = [...model.commits].reverse().find((c) => c.samplesPerSecond !== null)?.samplesPerSecond ?? null;
  setText(byId('sum-speed'), formatNumber(lastRate));
  setText(byId('sum-restarts'), `${status.restarts} / ${status.maxRestarts}`);
  setText(byId('sum-checkpoint'), status.latestCheckpoint ? `step ${formatInt(status.latestCheckpoint.step)}` : 'none');
  renderUsage(status);

  const done = status.state === 'done';
  const epochFraction = done ? 1 : status.datasetSize > 0 ? status.processedInEpoch / status.datasetSize : 0;
  setBar('epoch-progress', epochFraction);
  setText(
    byId('epoch-progress-text'),
    done
      ? 'all epochs done'
      : `epoch ${status.epoch + 1}: ${formatInt(status.processedInEpoch)} / ${formatInt(status.datasetSize)} samples (${formatPercent(epochFraction)})`,
  );
  const jobFraction = status.totalSteps > 0 ? status.step / status.totalSteps : 0;
  setBar('job-progress', jobFraction);
  setText(
    byId('job-progress-text'),
    `step ${formatInt(status.step)} of ${formatInt(status.totalSteps)} (${formatPercent(jobFraction)})`,
  );
  setText(
    byId('job-line'),
    `Global batch ${job.globalBatch} · ${job.stepsPerEpoch} steps per epoch · ${job.optimizer} · commit every ${job.commitEvery} step${job.commitEvery === 1 ? '' : 's'} · checkpoint every ${job.checkpointEvery}`,
  );
  setText(byId('sync-line'), `Sync: ${syncLabel(job.sync)}`);
  // Every-step sync slower than compute: the coordinator's one-line advice (coordinator/machine/sync-advice.ts).
  const advice = byId('sync-advice');
  advice.hidden = !status.syncAdvice;
  setText(advice, status.syncAdvice?.message ?? '');
}

/** The job's compute utilization and wire bytes per sample: recent in the card, the run's in the tooltip. */
function renderUsage(status: AdminStatus): void {
  const { recent, total, halfLifeMs } = status.usage;
  const utilization = byId('sum-utilization');
  setText(utilization, recent.utilization === null ? '–' : formatPercent(recent.utilization, 0));
  const window = `recent (half-life ${Math.round(halfLifeMs / 1000)} s); whole run`;
  utilization.title = `${window}: ${total.utilization === null ? '–' : formatPercent(total.utilization)}`;
  const wire = byId('sum-wire');
  setText(wire, formatBytesPerSample(recent.bytesPerSample));
  wire.title = `${window}: ${formatBytesPerSample(total.bytesPerSample)}`;
}

function setBar(id: string, fraction: number): void {
  const clamped = Math.max(0, Math.min(1, fraction));
  const bar = byId(id);
  bar.setAttribute('aria-valuenow', String(Math.round(clamped * 100)));
  byId(`${id}-fill`).style.width = `${(clamped * 100).toFixed(2)}%`;
}

/** Pause/resume toggle and the min/max inputs (left alone while being edited). */
export function renderControls(status: AdminStatus): void {
  const over = status.state === 'done' || status.state === 'failed';
  const paused = status.status === 'paused';
  const pause = byId<HTMLButtonElement>('pause');
  const resume = byId<HTMLButtonElement>('resume');
  pause.hidden = paused;
  resume.hidden = !paused;
  for (const button of [pause, resume, byId<HTMLButtonElement>('checkpoint-now')]) button.disabled = over;
  const form = byId<HTMLFormElement>('workers-form');
  if (!form.contains(document.activeElement) && form.dataset.dirty !== 'true') {
    byId<HTMLInputElement>('min-workers').value = String(status.minWorkers);
    byId<HTMLInputElement>('max-workers').value = String(status.maxWorkers);
  }
}

/** The coordinator's aggregates over every worker (bounded: counted on the server). */
export function renderSwarm(status: AdminStatus): void {
  const c = status.counts;
  setText(byId('swarm-workers'), formatInt(c.workers));
  setText(byId('swarm-members'), `${formatInt(c.members)} (${formatInt(c.ready)} ready)`);
  setText(byId('swarm-syncing'), formatInt(c.syncing));
  setText(byId('swarm-waiting'), formatInt(c.waiting));
  const late = byId('swarm-late');
  setText(late, formatInt(c.late));
  late.dataset.bad = c.late > 0 ? 'yes' : 'no';
  const ice = byId('swarm-ice');
  setText(ice, formatInt(c.iceErrors));
  ice.dataset.bad = c.iceErrors > 0 ? 'yes' : 'no';
  setText(byId('swarm-throughput'), c.throughput === null ? '–' : formatNumber(c.throughput * 1000));
  setText(
    byId('swarm-rtt'),
    c.peerRttMs ? `${formatNumber(c.peerRttMs.median)} / ${formatNumber(c.peerRttMs.max)} ms` : '–',
  );
  const paths = Object.entries(c.links)
    .filter(([, n]) => n > 0)
    .map(([path, n]) => `${path} ${n}`);
  setText(byId('swarm-links'), paths.length > 0 ? paths.join(' · ') : '–');
  const v = status.verification;
  setText(
    byId('swarm-verify'),
    !v.enabled ? 'off' : v.step === null ? 'on, idle' : `step ${formatInt(v.step)}: ${v.phase}`,
  );
}

/** One aggregate row: how many, their summed samples/s, median utilization and ring RTT, how many late. */
interface Aggregate {
  label: string;
  workers: FeedWorker[];
}

function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function aggregateRow(a: Aggregate, ctx: ColumnContext): HTMLTableRowElement {
  const speeds = a.workers.map((w) => w.throughput).filter((x): x is number => x !== null);
  const util = median(a.workers.map((w) => w.utilization).filter((x): x is number => x !== null));
  const rtt = median(a.workers.map((w) => w.peerRttMs).filter((x): x is number => x !== null));
  const late = a.workers.filter((w) => isLate(w, ctx)).length;
  return el(
    'tr',
    {},
    el('th', { scope: 'row' }, a.label),
    el('td', { class: 'num' }, formatInt(a.workers.length)),
    el('td', { class: 'num' }, speeds.length > 0 ? formatNumber(speeds.reduce((x, y) => x + y, 0) * 1000) : '–'),
    el('td', { class: 'num' }, util === null ? '–' : formatPercent(util, 0)),
    el('td', { class: 'num' }, rtt === null ? '–' : `${formatNumber(rtt)} ms`),
    el('td', { class: 'num' }, late > 0 ? el('span', { class: 'late' }, formatInt(late)) : '0'),
    el(
      'td',
      { class: 'num' },
      formatBytesPerSample(median(a.workers.map((w) => w.bytesPerSample).filter((x): x is number => x !== null))),
    ),
  );
}

/** Adapters listed one by one; the rest share a row. */
const TOP_ADAPTERS = 5;

/** The aggregate rows: by state, then by GPU adapter (the most common first). */
export function renderAggregates(
  body: HTMLTableSectionElement,
  workers: Iterable<FeedWorker>,
  ctx: ColumnContext,
): void {
  const all = [...workers];
  const byState: Aggregate[] = (['training', 'ready', 'syncing', 'waiting'] as const)
    .map((state) => ({ label: state, workers: all.filter((w) => w.state === state) }))
    .filter((a) => a.workers.length > 0);
  const adapters = new Map<string, FeedWorker[]>();
  for (const w of all) adapters.set(w.adapter || 'unknown', [...(adapters.get(w.adapter || 'unknown') ?? []), w]);
  const ranked = [...adapters].sort((a, b) => b[1].length - a[1].length);
  const byAdapter: Aggregate[] = ranked.slice(0, TOP_ADAPTERS).map(([label, ws]) => ({ label, workers: ws }));
  const rest = ranked.slice(TOP_ADAPTERS).flatMap(([, ws]) => ws);
  const others = ranked.length - TOP_ADAPTERS;
  if (rest.length > 0) byAdapter.push({ label: `${others} other adapter${others === 1 ? '' : 's'}`, workers: rest });
  const group = (title: string) => el('tr', { class: 'group-row' }, el('th', { scope: 'rowgroup', colspan: 7 }, title));
  const total = aggregateRow({ label: 'all workers', workers: all }, ctx);
  total.classList.add('total-row');
  body.replaceChildren(
    group('By state'),
    ...byState.map((a) => aggregateRow(a, ctx)),
    group('By GPU adapter'),
    ...byAdapter.map((a) => aggregateRow(a, ctx)),
    total,
  );
}
