/** Renders a `TabStatus` into the volunteer page's DOM (index.html). Plain DOM, no framework. */
import type { AdapterSummary } from '../worker/types';
import type { TabStatus } from './status';

function element<T extends HTMLElement | SVGElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`index.html has no #${id}`);
  return el as unknown as T;
}

const STATE_TEXT: Record<TabStatus['state'], string> = {
  checking: 'checking WebGPU',
  ready: 'ready',
  unsupported: 'unavailable',
  'loading-data': 'loading data',
  building: 'preparing',
  training: 'training',
  evaluating: 'testing',
  done: 'finished',
  stopped: 'stopped',
  error: 'error',
};

export function adapterText(a: AdapterSummary): string {
  const name = [a.vendor, a.architecture].filter(Boolean).join(' · ') || 'unnamed adapter';
  const detail = a.description || a.device;
  return `${name}${detail ? ` (${detail})` : ''}${a.isFallback ? ' — software fallback, slow' : ''}`;
}

function megabytes(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

function lossPoints(losses: TabStatus['losses']): string {
  if (losses.length < 2) return '';
  const first = losses[0].step;
  const last = losses[losses.length - 1].step;
  const max = Math.max(...losses.map((l) => l.loss));
  const min = Math.min(0, ...losses.map((l) => l.loss));
  const span = max - min || 1;
  return losses
    .map((l) => `${(((l.step - first) / (last - first || 1)) * 300).toFixed(1)},${(78 - ((l.loss - min) / span) * 74).toFixed(1)}`)
    .join(' ');
}

export class VolunteerView {
  readonly start = element<HTMLButtonElement>('start');
  readonly stop = element<HTMLButtonElement>('stop');
  private readonly adapter = element('adapter');
  private readonly gpuProblem = element('gpu-problem');
  private readonly job = element('job');
  private readonly datasetProgress = element<HTMLProgressElement>('dataset-progress');
  private readonly datasetText = element('dataset-text');
  private readonly state = element('state');
  private readonly step = element('step');
  private readonly epoch = element('epoch');
  private readonly loss = element('loss');
  private readonly accuracy = element('accuracy');
  private readonly speed = element('speed');
  private readonly epochProgress = element<HTMLProgressElement>('epoch-progress');
  private readonly chart = element<SVGSVGElement>('loss-chart');
  private readonly error = element('error');
  private pending = false;

  setJob(text: string): void {
    this.job.textContent = text;
  }

  /** Render on the next animation frame, at most once per frame (progress arrives often). */
  render(s: TabStatus): void {
    if (this.pending) return;
    this.pending = true;
    const draw = () => {
      this.pending = false;
      this.draw(s);
    };
    // Hidden tabs get no animation frames; render there too, so the title and status stay current.
    if (document.visibilityState === 'visible') requestAnimationFrame(draw);
    else setTimeout(draw, 0);
  }

  private draw(s: TabStatus): void {
    if (s.adapter) this.adapter.textContent = adapterText(s.adapter);
    else if (s.state === 'unsupported') this.adapter.textContent = 'WebGPU is not available in this browser';
    this.gpuProblem.hidden = s.state !== 'unsupported';
    if (s.state === 'unsupported') this.gpuProblem.textContent = s.error;

    const running = s.state === 'loading-data' || s.state === 'building' || s.state === 'training' || s.state === 'evaluating';
    this.start.disabled = running || s.state === 'checking' || s.state === 'unsupported';
    this.start.textContent = s.state === 'done' || s.state === 'stopped' || s.state === 'error' ? 'Train again' : 'Start training';
    this.stop.hidden = !running;

    if (s.dataset) {
      const d = s.dataset;
      this.datasetProgress.value = d.totalBytes ? d.loadedBytes / d.totalBytes : 0;
      const source = d.cachedBytes === d.loadedBytes && d.loadedBytes > 0 ? 'from this browser’s cache' : d.cachedBytes > 0 ? `${megabytes(d.cachedBytes)} from cache` : '';
      this.datasetText.textContent = d.done
        ? `${megabytes(d.totalBytes)} loaded${source ? ` ${source}` : ''}.`
        : `${megabytes(d.loadedBytes)} of ${megabytes(d.totalBytes)}${source ? ` (${source})` : ''}…`;
    }

    this.state.textContent = STATE_TEXT[s.state];
    this.step.textContent = s.step ? String(s.step) : '–';
    this.epoch.textContent = s.epochs ? `${Math.min(s.epoch + 1, s.epochs)} / ${s.epochs}` : '–';
    this.loss.textContent = s.loss === null ? '–' : s.loss.toFixed(4);
    this.accuracy.textContent = s.accuracy === null ? '–' : `${(s.accuracy * 100).toFixed(2)} %`;
    this.speed.textContent = s.samplesPerSec === null ? '–' : s.samplesPerSec.toFixed(0);
    this.epochProgress.value = s.epochProgress;

    let line = this.chart.querySelector('polyline');
    if (!line) {
      line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
      this.chart.append(line);
    }
    line.setAttribute('points', lossPoints(s.losses));

    this.error.hidden = !(s.error && s.state !== 'unsupported');
    this.error.textContent = s.error && s.state !== 'unsupported' ? s.error : '';
    document.title = running ? `${STATE_TEXT[s.state]} · ${s.step} steps — tabswarm` : 'tabswarm — lend this tab to train a neural network';
  }
}
