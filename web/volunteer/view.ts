/** Renders a `TabStatus` into the volunteer page's DOM (index.html). Plain DOM, no framework. */
import type { KernelsReport } from '../../core/protocol/tab-messages';
import type { AdapterSummary } from '../worker/types';
import { lossPolyline } from './loss-chart';
import type { TabState, TabStatus } from './status';

function element<T extends HTMLElement | SVGElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`index.html has no #${id}`);
  return el as unknown as T;
}

const STATE_TEXT: Record<TabState, string> = {
  checking: 'checking WebGPU',
  ready: 'ready',
  unsupported: 'WebGPU unavailable',
  'loading-data': 'loading data',
  tuning: 'tuning for your GPU…',
  building: 'preparing',
  connecting: 'connecting',
  reconnecting: 'reconnecting…',
  waiting: 'waiting to join',
  syncing: 'getting the model',
  training: 'training',
  evaluating: 'testing',
  done: 'finished',
  stopped: 'stopped',
  left: 'left',
  error: 'error',
};

/** Badge colour per state: what a glance at the page should tell. */
const STATE_TONE: Record<TabState, 'idle' | 'busy' | 'active' | 'warn' | 'bad' | 'done'> = {
  checking: 'idle',
  ready: 'idle',
  unsupported: 'bad',
  'loading-data': 'busy',
  tuning: 'busy',
  building: 'busy',
  connecting: 'busy',
  reconnecting: 'warn',
  waiting: 'busy',
  syncing: 'busy',
  training: 'active',
  evaluating: 'busy',
  done: 'done',
  stopped: 'idle',
  left: 'idle',
  error: 'bad',
};

const WAIT_TEXT: Record<string, string> = {
  gathering: 'Waiting for enough tabs to start a round.',
  round_running: 'A round is running; this tab joins at the next step boundary.',
  full: 'The job has all the tabs it can use; this tab waits for a free place.',
  paused: 'The job is paused by its organiser; this tab waits.',
};

/** States in which the tab works on the job (Leave/Stop shown, Start disabled). */
export function isRunning(state: TabState): boolean {
  return [
    'loading-data',
    'tuning',
    'building',
    'connecting',
    'reconnecting',
    'waiting',
    'syncing',
    'training',
    'evaluating',
  ].includes(state);
}

/** What the tuning found, after the adapter's name: the model's matmul speed here, when measured. */
export function kernelsText(k: KernelsReport | null): string {
  if (!k || k.gflops === null) return '';
  return ` · kernels tuned for it: ${k.gflops.toPrecision(3)} GFLOP/s on this model's matmuls`;
}

export function adapterText(a: AdapterSummary): string {
  const name = [a.vendor, a.architecture].filter(Boolean).join(' · ') || 'unnamed adapter';
  const detail = a.description || a.device;
  return `${name}${detail ? ` (${detail})` : ''}${a.isFallback ? ' — software fallback, slow' : ''}`;
}

export function formatCount(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** `m:ss`, or `h:mm:ss` from an hour on. */
export function formatDuration(ms: number): string {
  const total = Math.max(0, Math.floor(ms / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = String(total % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${s}` : `${m}:${s}`;
}

/** A fraction as a percentage with enough digits to tell small shares apart. */
export function formatPercent(x: number): string {
  const p = x * 100;
  return `${p >= 10 || p === 0 ? p.toFixed(0) : p >= 1 ? p.toFixed(1) : p.toFixed(2)} %`;
}

function megabytes(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

/** The loss chart is redrawn at most this often. */
const CHART_EVERY_MS = 1000;
/** The page is redrawn at most this often. */
const RENDER_EVERY_MS = 250;

export class VolunteerView {
  private latest: TabStatus | null = null;
  private drawnAt = -Infinity;
  private chartStep = -1;
  private chartLength = 0;
  private chartDrawnAt = -Infinity;
  private chartLosses: TabStatus['losses'] = [];
  private chartTimer: ReturnType<typeof setTimeout> | null = null;
  /** The status's state at the last `render` call (a change is drawn at once). */
  private seenState: TabStatus['state'] | null = null;
  readonly start = element<HTMLButtonElement>('start');
  readonly stop = element<HTMLButtonElement>('stop');
  readonly gpuLimit = element<HTMLInputElement>('gpu-limit');
  private readonly badge = element('badge');
  private readonly adapter = element('adapter');
  private readonly gpuProblem = element('gpu-problem');
  private readonly job = element('job');
  private readonly note = element('note');
  private readonly dataset = element('dataset');
  private readonly datasetProgress = element<HTMLProgressElement>('dataset-progress');
  private readonly datasetText = element('dataset-text');
  private readonly limit = element('limit');
  private readonly limitValue = element('gpu-limit-value');
  private readonly limitText = element('gpu-limit-text');
  private readonly contribution = element('contribution');
  private readonly stats = element('stats');
  private readonly samples = element('samples');
  private readonly time = element('time');
  private readonly share = element('share');
  private readonly jobShare = element('job-share');
  private readonly contributionText = element('contribution-text');
  private readonly world = element('world');
  private readonly step = element('step');
  private readonly epoch = element('epoch');
  private readonly loss = element('loss');
  private readonly accuracy = element('accuracy');
  private readonly speed = element('speed');
  private readonly progress = element<HTMLProgressElement>('epoch-progress');
  private readonly progressText = element('progress-text');
  private readonly lossCaption = element('loss-caption');
  private readonly chart = element<SVGSVGElement>('loss-chart');
  private readonly error = element('error');
  private pending = false;

  setJob(text: string): void {
    this.job.textContent = text;
  }

  /** index.html explains the usual case (joining a coordinator's job); a solo run trains alone. */
  setSoloLede(): void {
    element('lede').textContent =
      'Press Start and this tab uses its graphics card, through WebGPU, to train a small neural network that recognises pictures of clothing, until you press Stop or close the tab.';
  }

  /**
   * Render at most every RENDER_EVERY_MS, the latest status, on an animation frame (progress arrives
   * several times per step). Each render repaints the page, and in Chromium the page's raster runs in
   * the GPU process, the same process as the WebGPU kernels: on a machine without a GPU both are CPU
   * work there, so rendering per step slowed the steps themselves (docs/performance.md).
   */
  render(s: TabStatus): void {
    // A change of state (checking → ready, training → left, …) is drawn at once: it is rare, and a
    // reader of the page (a person, a test) must never see a state the status has already left.
    // (The caller mutates one status object, so the state last seen is kept apart.)
    const stateChanged = this.seenState !== s.state;
    this.seenState = s.state;
    this.latest = s;
    if (stateChanged) {
      this.drawnAt = performance.now();
      this.draw(s);
      return;
    }
    if (this.pending) return;
    this.pending = true;
    const draw = () => {
      this.pending = false;
      this.drawnAt = performance.now();
      this.draw(this.latest!);
    };
    const wait = Math.max(0, this.drawnAt + RENDER_EVERY_MS - performance.now());
    // Hidden tabs get no animation frames; render there too, so the title and status stay current.
    const frame = () => (document.visibilityState === 'visible' ? requestAnimationFrame(draw) : setTimeout(draw, 0));
    if (wait > 0) setTimeout(frame, wait);
    else frame();
  }

  /** The loss chart, redrawn only when the log changed and at most every CHART_EVERY_MS (it is the costly part). */
  private drawChart(losses: TabStatus['losses']): void {
    const last = losses.length > 0 ? losses[losses.length - 1].step : -1;
    const now = performance.now();
    const changed = last !== this.chartStep || losses.length < this.chartLength;
    if (!changed) return;
    const wait = this.chartDrawnAt + CHART_EVERY_MS - now;
    if (wait > 0) {
      // Too soon: draw the latest log once the interval is over (the last change is never left out).
      this.chartLosses = losses;
      this.chartTimer ??= setTimeout(() => {
        this.chartTimer = null;
        this.drawChart(this.chartLosses);
      }, wait);
      return;
    }
    this.chartStep = last;
    this.chartLength = losses.length;
    this.chartDrawnAt = now;
    let line = this.chart.querySelector('polyline');
    if (!line) {
      line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
      this.chart.append(line);
    }
    line.setAttribute('points', lossPolyline(losses));
  }

  private draw(s: TabStatus): void {
    const elastic = s.mode === 'elastic';
    const running = isRunning(s.state);
    const started = s.state !== 'checking' && s.state !== 'ready' && s.state !== 'unsupported';
    document.body.dataset.mode = s.mode;
    document.body.dataset.state = s.state;

    this.badge.textContent = STATE_TEXT[s.state];
    this.badge.dataset.tone = STATE_TONE[s.state];

    if (s.adapter) this.adapter.textContent = adapterText(s.adapter) + kernelsText(s.kernels);
    else if (s.state === 'unsupported') this.adapter.textContent = 'WebGPU is not available in this browser';
    this.gpuProblem.hidden = s.state !== 'unsupported';
    if (s.state === 'unsupported') this.gpuProblem.textContent = s.error;

    this.drawButtons(s, elastic, running);
    this.drawDataset(s);
    this.drawLimit(s, elastic);
    this.drawStats(s, elastic, started);

    this.drawChart(s.losses);

    const problem = s.error && s.state !== 'unsupported' ? s.error : s.networkProblem;
    this.error.hidden = !problem;
    this.error.textContent = problem ?? '';
    document.title = running
      ? `${STATE_TEXT[s.state]} · step ${s.step} — tabswarm`
      : 'tabswarm — lend this tab to train a neural network';
  }

  /** Start/Leave and the note under them. */
  private drawButtons(s: TabStatus, elastic: boolean, running: boolean): void {
    // While running only Leave is offered: a disabled Start beside it reads as a second, broken choice.
    this.start.hidden = running;
    this.start.disabled = running || s.state === 'checking' || s.state === 'unsupported';
    this.start.textContent =
      s.state === 'left'
        ? 'Rejoin'
        : s.state === 'done' || s.state === 'stopped' || s.state === 'error'
          ? elastic
            ? 'Join again'
            : 'Train again'
          : elastic
            ? 'Start contributing'
            : 'Start training';
    this.stop.hidden = !running;
    this.stop.textContent = elastic ? 'Leave' : 'Stop';
    this.note.textContent = this.noteText(s);
    this.note.dataset.tone = s.state === 'left' || s.state === 'done' ? 'ok' : s.state === 'reconnecting' ? 'warn' : '';
  }

  /** The training-data download bar (hidden once loaded). */
  private drawDataset(s: TabStatus): void {
    this.dataset.hidden = s.dataset === null || s.dataset.done;
    if (s.dataset) {
      const d = s.dataset;
      this.datasetProgress.value = d.totalBytes ? d.loadedBytes / d.totalBytes : 0;
      const source =
        d.cachedBytes === d.loadedBytes && d.loadedBytes > 0
          ? 'from this browser’s cache'
          : d.cachedBytes > 0
            ? `${megabytes(d.cachedBytes)} from cache`
            : '';
      this.datasetText.textContent = d.done
        ? `Training data: ${megabytes(d.totalBytes)} loaded${source ? ` ${source}` : ''}.`
        : `Downloading training data: ${megabytes(d.loadedBytes)} of ${megabytes(d.totalBytes)}${source ? ` (${source})` : ''}…`;
    }
  }

  /** The GPU pause slider (elastic only). */
  private drawLimit(s: TabStatus, elastic: boolean): void {
    // The pause between steps is implemented by the elastic loop; solo runs ignore it, so hide it there.
    this.limit.hidden = !elastic;
    if (document.activeElement !== this.gpuLimit) this.gpuLimit.value = String(s.stepPauseMs);
    this.limitValue.textContent = s.stepPauseMs > 0 ? `pause ${s.stepPauseMs} ms` : 'full speed';
    this.limitText.textContent =
      s.stepPauseMs > 0
        ? `Rests ${s.stepPauseMs} ms after each step. When the coordinator rebalances, this tab gets a smaller part of each step.`
        : 'No pause between steps: this tab computes as fast as its GPU allows.';
  }

  /** This tab's contribution and the job's numbers (step, epoch, loss, accuracy, speed, progress). */
  private drawStats(s: TabStatus, elastic: boolean, started: boolean): void {
    this.contribution.hidden = !(elastic && started);
    this.stats.hidden = !started;
    this.samples.textContent = formatCount(s.samplesProcessed);
    this.time.textContent = formatDuration(s.contributedMs);
    this.share.textContent = s.share === null ? '–' : formatPercent(s.share);
    this.jobShare.textContent = s.jobShare === null ? '–' : formatPercent(s.jobShare);
    this.contributionText.textContent = this.contributionLine(s);

    this.world.textContent = s.worldSize > 0 ? String(s.worldSize) : '–';
    this.step.textContent = s.step ? (s.totalSteps ? `${s.step} / ${s.totalSteps}` : String(s.step)) : '–';
    this.epoch.textContent = s.epochs ? `${Math.min(s.epoch + 1, s.epochs)} / ${s.epochs}` : '–';
    this.loss.textContent = s.loss === null ? '–' : s.loss.toFixed(4);
    this.accuracy.textContent = s.accuracy === null ? '–' : `${(s.accuracy * 100).toFixed(2)} %`;
    this.speed.textContent = s.samplesPerSec === null ? '–' : s.samplesPerSec.toFixed(0);
    const progress = s.totalSteps > 0 ? Math.min(1, s.step / s.totalSteps) : s.epochProgress;
    this.progress.value = progress;
    this.progressText.textContent = s.step > 0 || progress > 0 ? formatPercent(progress) : '';
    this.lossCaption.textContent = elastic ? 'Training loss on this tab’s samples' : 'Training loss';
  }

  private noteText(s: TabStatus): string {
    switch (s.state) {
      case 'checking':
      case 'ready':
        return 'No training data is downloaded and your GPU stays idle until you press Start.';
      case 'unsupported':
        return 'This tab cannot help with this browser; see “Your GPU” for why.';
      case 'reconnecting':
        return 'The coordinator cannot be reached (restarting?). This tab reconnects by itself and keeps its work.';
      case 'waiting':
        return (s.waitReason && WAIT_TEXT[s.waitReason]) || 'Waiting to be admitted to a round.';
      case 'left':
        return 'You left the job: the coordinator took this tab out at once. Thank you! Rejoin whenever you like.';
      case 'done':
        return s.mode === 'elastic' ? 'The job is finished. Thank you for helping!' : 'Training finished.';
      case 'error':
        return 'This tab stopped because of the error below.';
      case 'stopped':
        return 'Stopped.';
      default:
        return s.mode === 'elastic'
          ? 'Training goes on while this tab is in the background. Leave (or closing the tab) says goodbye cleanly.'
          : 'Training in this tab alone; it goes on while the tab is in the background.';
    }
  }

  private contributionLine(s: TabStatus): string {
    if (s.state === 'training' || s.state === 'syncing') {
      const rank =
        s.rank === null
          ? ''
          : `${s.worldSize} tab${s.worldSize > 1 ? 's' : ''} train together; this one is rank ${s.rank}. `;
      return `${rank}The job has committed ${formatCount(s.jobSamples)} samples so far; ${formatCount(s.samplesProcessed)} of them were computed here.`;
    }
    if (s.samplesComputed > s.samplesProcessed && s.state !== 'left') {
      return `${formatCount(s.samplesComputed - s.samplesProcessed)} samples computed here are not committed (yet, or were redone after a tab failed).`;
    }
    return s.samplesProcessed > 0
      ? `${formatCount(s.samplesProcessed)} of the job’s ${formatCount(s.jobSamples)} committed samples were computed here.`
      : '';
  }
}
