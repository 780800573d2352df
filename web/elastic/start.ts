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
 * The status is also readable by tests as `window.tabswarmElastic` (a frozen copy per read).
 */
import type * as Comlink from 'comlink';
import type { KernelsReport } from '../../core/protocol/tab-messages';
import { CoordinatorClient, defaultCoordinatorUrl, type HelloState } from '../net/coordinator-client';
import { IceState } from '../net/ice-state';
import { LatestSample } from '../net/link-rtt';
import type { TrainingWorkerApi } from '../worker/training-worker';
import { browserHttp, type HttpPort } from './checkpoint-transfer';
import { ElasticLoop, initialElasticStatus, type ElasticStatus, type ElasticTimeouts } from './elastic-loop';
import { PeerMeshPort } from './peer-mesh-port';
import { comlinkTrainer, type ControlPort, type MeshPort, type TrainerPort } from './ports';

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

/** What the loop runs on, and the hello fields the client sends at every (re)connect. */
export interface ElasticPorts {
  trainer: TrainerPort;
  mesh: MeshPort;
  control: ControlPort;
  http: HttpPort;
  hello(): HelloState;
}

export interface ElasticCallbacks {
  /** Every status change (a fresh copy each time). */
  onStatus?(status: ElasticStatus): void;
  log?(level: 'info' | 'warn' | 'error', text: string): void;
  /** Why this tab's peer connections cannot work as configured (e.g. TURN authentication failed), or null. */
  onIceError?(message: string | null): void;
}

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
  let current: ElasticStatus = initialElasticStatus();
  exposeStatus(() => current);
  // Filled from `welcome` (STUN/TURN, this tab's TURN credential); read by every peer connection made later.
  const ice = new IceState((error) => callbacks.onIceError?.(error), log);
  const mesh = await openMesh(origin, ice, log);
  let client: CoordinatorClient | null = null;
  let left = false;
  const base = tabPorts(opts.worker, origin, mesh, {
    send: (body) => client?.send(body) ?? false,
    hello: () => ({ peerId: mesh.peerId, adapter: opts.adapter, ...kernelsField(opts), ...loop.holding() }),
  });
  const ports = opts.wrapPorts?.(base) ?? base;
  const loop = new ElasticLoop({
    trainer: ports.trainer,
    mesh: ports.mesh,
    control: ports.control,
    http: ports.http,
    timeouts: opts.timeouts,
    evaluateOnDone: opts.evaluateOnDone,
    stepPauseMs: opts.stepPauseMs,
    log,
    onStatus: (status) => {
      current = status;
      callbacks.onStatus?.(status);
      // A tab that cannot go on (worker wedged, job failed) leaves, so the others need not wait for its heartbeat to stop.
      if (status.phase === 'failed' && !left) leave();
    },
  });
  client = coordinatorClient(origin, ports, loop, ice, mesh, log);

  function leave(): void {
    if (left) return;
    left = true;
    window.removeEventListener('pagehide', onPageHide);
    // The goodbye goes out synchronously, before anything else is torn down.
    client!.goodbye();
    loop.stop();
    mesh.close();
  }
  const onPageHide = () => leave();
  window.addEventListener('pagehide', onPageHide);
  client.start();
  return {
    get status() {
      return current;
    },
    leave,
    setStepPause: (ms) => loop.setStepPause(ms),
    heartbeat: () => !left && (client?.heartbeat() ?? false),
  };
}

/** The hello's optional kernels report (absent when the page has none). */
function kernelsField(opts: StartElasticOptions): { kernels?: KernelsReport } {
  return opts.kernels ? { kernels: opts.kernels } : {};
}

/** A tab's own ports: the training worker over Comlink, the PeerJS mesh, fetch on the coordinator's origin. */
function tabPorts(
  worker: Comlink.Remote<TrainingWorkerApi>,
  origin: URL,
  mesh: PeerMeshPort,
  coordinator: { send: ControlPort['send']; hello(): HelloState },
): ElasticPorts {
  return {
    trainer: comlinkTrainer(worker),
    mesh,
    control: { send: coordinator.send },
    http: browserHttp(origin.origin),
    hello: coordinator.hello,
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

/** The tab's PeerJS mesh on the coordinator's origin; its peer connections use `ice`'s configuration. */
function openMesh(origin: URL, ice: IceState, log: Log): Promise<PeerMeshPort> {
  return PeerMeshPort.open(
    {
      rtcConfig: ice.rtcConfig,
      // `leave()` closes the mesh on pagehide, after the goodbye: a goodbye that left after the
      // links closed could reach the coordinator later than the neighbours' failure reports (a restart).
      closeOnPageHide: false,
      host: origin.hostname,
      port: Number(origin.port || (origin.protocol === 'https:' ? 443 : 80)),
      secure: origin.protocol === 'https:',
    },
    log,
  );
}

/** The coordinator client that feeds the loop (and `welcome`'s ICE configuration to `ice`); not started yet. */
function coordinatorClient(
  origin: URL,
  ports: ElasticPorts,
  loop: ElasticLoop,
  ice: IceState,
  mesh: PeerMeshPort,
  log: Log,
): CoordinatorClient {
  const links = new LatestSample(() => mesh.linkStats());
  return new CoordinatorClient({
    url: defaultCoordinatorUrl(origin),
    hello: () => ports.hello(),
    onMessage: (msg) => {
      if (msg.type === 'welcome') ice.apply(msg.ice);
      loop.handle(msg);
    },
    onDisconnect: () => loop.disconnected(),
    // Ring-link RTT and paths for the admin page: read from getStats() at most once per heartbeat, sent one beat late.
    heartbeatFields: () => {
      const sample = links.take();
      return { peerRttMs: sample?.peerRttMs ?? null, peerLinks: sample?.peerLinks, iceError: ice.error };
    },
    log,
  });
}

type Log = (level: 'info' | 'warn' | 'error', text: string) => void;

function defaultLog(level: 'info' | 'warn' | 'error', text: string): void {
  const line = `tabswarm: ${text}`;
  if (level === 'error') console.error(line);
  else if (level === 'warn') console.warn(line);
  else console.info(line);
}
