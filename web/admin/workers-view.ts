/**
 * The summary card, the controls' state and the workers table. Rows are keyed by worker id and
 * updated in place (a status arrives every second; rebuilding rows under the pointer would swallow
 * clicks). Kicking takes two clicks: the first arms the button for a few seconds.
 */
import type { AdminStatus, AdminWorkerView } from '../../core/protocol/admin-feed';
import {
  byId,
  el,
  formatAge,
  formatBytesPerSample,
  formatInt,
  formatKernels,
  formatNumber,
  formatPercent,
  setText,
  syncLabel,
} from './format';
import type { AdminModel } from './model';

const KICK_ARM_MS = 4000;

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
  setText(byId('sum-world'), `${status.world.length}  (${status.minWorkers}–${status.maxWorkers})`);
  setText(byId('sum-waiting'), String(status.waiting.length));
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

interface WorkerRow {
  tr: HTMLTableRowElement;
  rank: HTMLTableCellElement;
  id: HTMLTableCellElement;
  adapter: HTMLTableCellElement;
  kernels: HTMLTableCellElement;
  invite: HTMLTableCellElement;
  shareFill: HTMLDivElement;
  shareText: HTMLSpanElement;
  speed: HTMLTableCellElement;
  utilization: HTMLTableCellElement;
  wire: HTMLTableCellElement;
  heartbeat: HTMLTableCellElement;
  rtt: HTMLTableCellElement;
  step: HTMLTableCellElement;
  kick: HTMLButtonElement;
}

export class WorkersTable {
  private readonly rows = new Map<string, WorkerRow>();
  private armed: { id: string; until: number } | null = null;
  private disarmTimer: number | null = null;

  constructor(
    private readonly body: HTMLTableSectionElement,
    private readonly onKick: (workerId: string) => void,
  ) {}

  render(status: AdminStatus, heartbeatMs: number): void {
    const seen = new Set<string>();
    status.world.forEach((worker, index) => {
      seen.add(worker.id);
      let row = this.rows.get(worker.id);
      if (!row) {
        row = this.createRow(worker.id);
        this.rows.set(worker.id, row);
      }
      this.updateRow(row, worker, heartbeatMs);
      if (this.body.children[index] !== row.tr) this.body.insertBefore(row.tr, this.body.children[index] ?? null);
    });
    for (const [id, row] of this.rows) {
      if (!seen.has(id)) {
        row.tr.remove();
        this.rows.delete(id);
      }
    }
    setText(byId('workers-count'), status.world.length > 0 ? `${status.world.length} in round ${status.round}` : '');
    byId('workers-empty').hidden = status.world.length > 0;
    const waiting = byId('waiting');
    waiting.hidden = status.waiting.length === 0;
    const list = byId('waiting-list');
    list.replaceChildren(
      ...status.waiting.map((w) =>
        el(
          'li',
          { 'data-worker-id': w.id },
          el('span', { class: 'mono' }, w.id),
          ` · ${w.adapter || 'unknown adapter'} · heartbeat ${formatAge(w.lastHeartbeatAgeMs)}`,
          w.iceError ? el('span', { class: 'ice-error' }, ` · ${w.iceError}`) : '',
        ),
      ),
    );
  }

  private createRow(id: string): WorkerRow {
    const shareFill = el('div', { class: 'share-fill' });
    const shareText = el('span', { class: 'share-text' });
    const kick = el(
      'button',
      { type: 'button', class: 'kick small', 'data-worker-id': id, title: `Remove ${id} from the job` },
      'Kick',
    );
    kick.addEventListener('click', () => this.onKickClick(id));
    const row: WorkerRow = {
      tr: el('tr', { 'data-worker-id': id }),
      rank: el('td', { class: 'rank num' }),
      id: el('td', { class: 'mono worker-id' }),
      adapter: el('td', { class: 'adapter-cell' }),
      kernels: el('td', { class: 'kernels-cell' }),
      invite: el('td', { class: 'mono invite-cell' }),
      shareFill,
      shareText,
      speed: el('td', { class: 'num' }),
      utilization: el('td', { class: 'num utilization' }),
      wire: el('td', { class: 'num wire' }),
      heartbeat: el('td', { class: 'num heartbeat' }),
      rtt: el('td', { class: 'num rtt' }),
      step: el('td', { class: 'num' }),
      kick,
    };
    row.tr.append(
      row.rank,
      row.id,
      row.adapter,
      row.kernels,
      el('td', { class: 'share' }, el('div', { class: 'share-bar' }, shareFill), shareText),
      row.speed,
      row.utilization,
      row.wire,
      row.heartbeat,
      row.rtt,
      row.step,
      row.invite,
      el('td', { class: 'actions' }, kick),
    );
    return row;
  }

  private updateRow(row: WorkerRow, worker: AdminWorkerView, heartbeatMs: number): void {
    setText(row.rank, String(worker.rank));
    setText(row.id, worker.id);
    row.id.title = `peer ${worker.peerId}`;
    setText(row.adapter, worker.adapter || 'unknown');
    const kernels = formatKernels(worker.kernels);
    setText(row.kernels, kernels.text);
    row.kernels.title = kernels.title;
    setText(row.invite, worker.invite ?? '–');
    row.shareFill.style.width = `${(worker.share * 100).toFixed(1)}%`;
    setText(row.shareText, formatPercent(worker.share));
    setText(row.speed, worker.throughput === null ? '–' : formatNumber(worker.throughput * 1000));
    setText(row.utilization, worker.utilization === null ? '–' : formatPercent(worker.utilization, 0));
    setText(row.wire, formatBytesPerSample(worker.bytesPerSample));
    setText(row.heartbeat, formatAge(worker.lastHeartbeatAgeMs));
    // Late heartbeats: amber past 1.5 periods, red past 2.5 (the coordinator drops a worker at 3).
    row.heartbeat.dataset.late =
      worker.lastHeartbeatAgeMs > 2.5 * heartbeatMs
        ? 'very'
        : worker.lastHeartbeatAgeMs > 1.5 * heartbeatMs
          ? 'yes'
          : 'no';
    // Older coordinators' feeds lack the field: treat it like null.
    const rtt = worker.peerRttMs ?? null;
    // The ICE path of each ring link (`relay` = through TURN), and an ICE problem, which wins.
    const paths = (worker.peerLinks ?? []).map((l) =>
      l.local === 'relay' || l.remote === 'relay' ? 'relay' : l.local,
    );
    const path = [...new Set(paths)].join('/');
    const iceError = worker.iceError ?? null;
    setText(row.rtt, iceError ?? `${rtt === null ? '–' : `${formatNumber(rtt)} ms`}${path ? ` · ${path}` : ''}`);
    row.rtt.dataset.iceError = iceError ? 'yes' : 'no';
    row.rtt.title = (worker.peerLinks ?? []).map((l) => `${l.peer}: ${l.local} → ${l.remote}`).join('\n');
    setText(row.step, worker.ready ? formatInt(worker.lastStep) : 'syncing');
    const armed = this.armed !== null && this.armed.id === worker.id && this.armed.until > Date.now();
    setText(row.kick, armed ? 'Confirm kick' : 'Kick');
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
