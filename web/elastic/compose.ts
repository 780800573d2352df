/**
 * The elastic loop wired to the real world, with nothing of a page in it: the PeerJS mesh (on the
 * coordinator's signalling server), the coordinator client, the loop and the `welcome`'s ICE configuration.
 * The caller brings what differs between a browser tab and a headless worker (headless/): the trainer port
 * (the training worker behind Comlink, in a Web Worker or a Node worker thread), the HTTP port, the adapter
 * and the coordinator's origin. `start.ts` adds the page's part (the status on `window`, goodbye on
 * `pagehide`); headless/headless-worker.ts adds a process's (goodbye on SIGINT/SIGTERM).
 *
 * The globals used here are the ones a browser's main thread has: `WebSocket` (the coordinator client, and
 * PeerJS's signalling), `RTCPeerConnection` (PeerJS), `fetch`, `crypto`; a Node process installs them first
 * (headless/node-globals.ts).
 */
import type { KernelsReport } from '../../core/protocol/tab-messages';
import { CoordinatorClient, defaultCoordinatorUrl, type HelloState } from '../net/coordinator-client';
import { IceState } from '../net/ice-state';
import { LatestSample } from '../net/link-rtt';
import type { HttpPort } from './checkpoint-transfer';
import { ElasticLoop, initialElasticStatus, type ElasticStatus, type ElasticTimeouts } from './elastic-loop';
import { PeerMeshPort } from './peer-mesh-port';
import type { ControlPort, MeshPort, TrainerPort } from './ports';

/** What the loop runs on, and the hello fields the client sends at every (re)connect. */
export interface ElasticPorts {
  trainer: TrainerPort;
  mesh: MeshPort;
  control: ControlPort;
  http: HttpPort;
  hello(): HelloState;
}

export interface ComposeElasticOptions {
  /** The training worker, with the coordinator's dataset loaded. */
  trainer: TrainerPort;
  /** How checkpoints are fetched and uploaded (relative URLs resolve against its `baseUrl`). */
  http: HttpPort;
  /** The WebGPU adapter, as the coordinator records it. */
  adapter: { vendor: string; architecture: string; description: string };
  /** The kernels the worker chose (`chooseKernels`), for the admin page; sent in every hello. */
  kernels?: KernelsReport;
  /** The coordinator's origin, e.g. `http://127.0.0.1:8080`. */
  origin: URL;
  /** The PeerJS id to register (default: a fresh random `tab-…`). */
  peerId?: string;
  /** The invite token to join with (default: the page URL's `?invite=`, none outside a page). */
  invite?: string | null;
  /** Evaluate on the first N test images when the job is done (default 0: no evaluation). */
  evaluateOnDone?: number;
  /** Pause between steps to limit GPU use (ms; `ElasticLoop.setStepPause`). Default 0. */
  stepPauseMs?: number;
  timeouts?: Partial<ElasticTimeouts>;
  /** Decorate the ports (and the hello) before the loop uses them (start.ts's `wrapPorts`). */
  wrapPorts?(ports: ElasticPorts): ElasticPorts;
}

export interface ComposeElasticCallbacks {
  /** Every status change (a fresh copy each time). */
  onStatus?(status: ElasticStatus): void;
  log?(level: 'info' | 'warn' | 'error', text: string): void;
  /** Why this worker's peer connections cannot work as configured (e.g. TURN authentication failed), or null. */
  onIceError?(message: string | null): void;
}

/** The running composition. */
export interface ComposedElastic {
  readonly status: ElasticStatus;
  /** This worker's PeerJS id. */
  readonly peerId: string;
  /** Goodbye to the coordinator (sent synchronously, first), then stop the loop and close the peer links. */
  leave(): void;
  /**
   * Stop at once with no goodbye, as a crashed tab: the coordinator sees the socket close unannounced (a
   * failure), the peers see the links close. For tools that fault one of several workers of a process.
   */
  drop(): void;
  /** Change the pause between steps (ms), from the next step on. */
  setStepPause(ms: number): void;
  /** Send a heartbeat now (false when not connected or left). */
  heartbeat(): boolean;
}

/** Wire the loop and start the client; a worker whose loop fails (worker wedged, job failed) leaves by itself. */
export async function composeElastic(
  opts: ComposeElasticOptions,
  callbacks: ComposeElasticCallbacks = {},
): Promise<ComposedElastic> {
  const log = callbacks.log ?? (() => {});
  let current: ElasticStatus = initialElasticStatus();
  // Filled from `welcome` (STUN/TURN, this worker's TURN credential); read by every peer connection made later.
  const ice = new IceState((error) => callbacks.onIceError?.(error), log);
  const mesh = await openMesh(opts.origin, ice, log, opts.peerId);
  let client: CoordinatorClient | null = null;
  let left = false;
  const base: ElasticPorts = {
    trainer: opts.trainer,
    mesh,
    control: { send: (body) => client?.send(body) ?? false },
    http: opts.http,
    hello: () => ({
      peerId: mesh.peerId,
      adapter: opts.adapter,
      ...(opts.kernels ? { kernels: opts.kernels } : {}),
      ...loop.holding(),
    }),
  };
  const ports = opts.wrapPorts?.(base) ?? base;
  const loop = elasticLoop(ports, opts, log, (status) => {
    current = status;
    callbacks.onStatus?.(status);
    // A worker that cannot go on (worker wedged, job failed) leaves, so the others need not wait for its heartbeat to stop.
    if (status.phase === 'failed' && !left) leave();
  });
  client = coordinatorClient(opts, ports, loop, ice, mesh, log);

  function leave(): void {
    if (left) return;
    left = true;
    // The goodbye goes out synchronously, before anything else is torn down.
    client!.goodbye();
    loop.stop();
    mesh.close();
  }
  function drop(): void {
    if (left) return;
    left = true;
    client!.stop();
    loop.stop();
    mesh.close();
  }
  client.start();
  return {
    get status() {
      return current;
    },
    peerId: mesh.peerId,
    leave,
    drop,
    setStepPause: (ms) => loop.setStepPause(ms),
    heartbeat: () => !left && (client?.heartbeat() ?? false),
  };
}

/** The loop on `ports`, with the options a caller may set. */
function elasticLoop(
  ports: ElasticPorts,
  opts: ComposeElasticOptions,
  log: Log,
  onStatus: (status: ElasticStatus) => void,
): ElasticLoop {
  return new ElasticLoop({
    trainer: ports.trainer,
    mesh: ports.mesh,
    control: ports.control,
    http: ports.http,
    timeouts: opts.timeouts,
    evaluateOnDone: opts.evaluateOnDone,
    stepPauseMs: opts.stepPauseMs,
    log,
    onStatus,
  });
}

/** The PeerJS mesh on the coordinator's origin; its peer connections use `ice`'s configuration. */
function openMesh(origin: URL, ice: IceState, log: Log, id: string | undefined): Promise<PeerMeshPort> {
  return PeerMeshPort.open(
    {
      ...(id ? { id } : {}),
      rtcConfig: ice.rtcConfig,
      // `leave()` closes the mesh after the goodbye: a goodbye that left after the links closed could
      // reach the coordinator later than the neighbours' failure reports (a restart).
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
  opts: ComposeElasticOptions,
  ports: ElasticPorts,
  loop: ElasticLoop,
  ice: IceState,
  mesh: PeerMeshPort,
  log: Log,
): CoordinatorClient {
  const links = new LatestSample(() => mesh.linkStats());
  return new CoordinatorClient({
    url: defaultCoordinatorUrl(opts.origin),
    hello: () => ports.hello(),
    ...(opts.invite !== undefined ? { invite: opts.invite } : {}),
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
