/**
 * The volunteer page's entry into elastic training: one call wires the training worker (its dataset
 * already loaded), the PeerJS mesh, the coordinator client and the loop, and says goodbye on
 * `pagehide` so the coordinator closes the round at once instead of waiting for a heartbeat timeout.
 *
 * ```ts
 * const elastic = await startElastic({ worker: api, adapter }, { onStatus: (s) => render(s) });
 * // later: elastic.leave();  (the Stop button)
 * ```
 *
 * The status is also readable by tests as `window.tabswarmElastic` (a frozen copy per read). The wiring
 * itself (mesh, coordinator client, loop) is compose.ts's, which a headless worker (headless/) shares; this
 * file adds what only a page has.
 */
import type * as Comlink from 'comlink';
import type { KernelsReport } from '../../core/protocol/tab-messages';
import type { TrainingWorkerApi } from '../worker/training-worker';
import { browserHttp } from './checkpoint-transfer';
import { composeElastic, type ComposeElasticCallbacks, type ElasticPorts } from './compose';
import { initialElasticStatus, type ElasticStatus, type ElasticTimeouts } from './elastic-loop';
import { comlinkTrainer } from './ports';

export type { ElasticPorts } from './compose';

declare global {
  interface Window {
    /** The elastic loop's status (read-only copy), while the page trains with a coordinator. */
    readonly tabswarmElastic?: Readonly<ElasticStatus>;
  }
}

export interface StartElasticOptions {
  /** The training worker, with the coordinator's dataset loaded (`loadData`). */
  worker: Comlink.Remote<TrainingWorkerApi>;
  /** The WebGPU adapter, as the coordinator records it. */
  adapter: { vendor: string; architecture: string; description: string };
  /** The kernels the worker chose (`chooseKernels`), for the admin page; sent in every hello. */
  kernels?: KernelsReport;
  /** The coordinator's origin, e.g. `http://127.0.0.1:8080`; default the page's. */
  origin?: string;
  /** Evaluate on the first N test images when the job is done (default 0: no evaluation). */
  evaluateOnDone?: number;
  /** Pause between steps to limit GPU use (ms; `ElasticLoop.setStepPause`). Default 0. */
  stepPauseMs?: number;
  timeouts?: Partial<ElasticTimeouts>;
  /**
   * Decorate the ports (and the hello) before the loop uses them. The volunteer page passes none; a
   * test harness page does (test/browser/pages/hostile/: a tab that misbehaves on purpose, which the
   * production build cannot contain since nothing under web/ imports test/).
   */
  wrapPorts?(ports: ElasticPorts): ElasticPorts;
}

export type ElasticCallbacks = ComposeElasticCallbacks;

export interface ElasticHandle {
  readonly status: ElasticStatus;
  /** Leave the job: goodbye to the coordinator, close the peer links. */
  leave(): void;
  /** Change the pause between steps (ms), from the next step on. */
  setStepPause(ms: number): void;
  /**
   * Send a heartbeat now (false when not connected). The client sends its own from a main-thread
   * interval; a page may add beats from a source that hidden tabs do not throttle (a worker's timer).
   */
  heartbeat(): boolean;
}

export async function startElastic(
  opts: StartElasticOptions,
  callbacks: ElasticCallbacks = {},
): Promise<ElasticHandle> {
  const origin = new URL(opts.origin ?? location.origin);
  const log = callbacks.log ?? defaultLog;
  let elastic: Awaited<ReturnType<typeof composeElastic>> | null = null;
  const initial = initialElasticStatus();
  exposeStatus(() => elastic?.status ?? initial);
  elastic = await composeElastic(
    {
      trainer: comlinkTrainer(opts.worker),
      http: browserHttp(origin.origin),
      adapter: opts.adapter,
      kernels: opts.kernels,
      origin,
      evaluateOnDone: opts.evaluateOnDone,
      stepPauseMs: opts.stepPauseMs,
      timeouts: opts.timeouts,
      wrapPorts: opts.wrapPorts,
    },
    { ...callbacks, log },
  );
  const composed = elastic;
  const leave = () => {
    window.removeEventListener('pagehide', leave);
    composed.leave();
  };
  window.addEventListener('pagehide', leave);
  return {
    get status() {
      return composed.status;
    },
    leave,
    setStepPause: (ms) => composed.setStepPause(ms),
    heartbeat: () => composed.heartbeat(),
  };
}

/** `window.tabswarmElastic`: a frozen copy of the status `current()` returns, per read. */
function exposeStatus(current: () => ElasticStatus): void {
  Object.defineProperty(window, 'tabswarmElastic', {
    configurable: true,
    get: () => {
      const status = current();
      return Object.freeze({ ...status, losses: Object.freeze([...status.losses]) as ElasticStatus['losses'] });
    },
  });
}

function defaultLog(level: 'info' | 'warn' | 'error', text: string): void {
  const line = `tabswarm: ${text}`;
  if (level === 'error') console.error(line);
  else if (level === 'warn') console.warn(line);
  else console.info(line);
}
