/**
 * Test harness page for the WebRTC collectives: exposes `window.netHarness` so a Playwright test can
 * drive real tabs (form a ring, allreduce, broadcast, measure the raw channel, probe the transport) and read plain-JSON
 * results. Inputs are generated here from seeds with the same generator the test uses in Node, so
 * megabytes never cross the CDP connection except the one result the test checks byte for byte.
 */
import { hashBytes } from '../../../core/state/hash';
import { broadcast } from '../../../web/net/broadcast';
import { isCollectiveError } from '../../../web/net/collective-error';
import { routerFor } from '../../../web/net/frame-router';
import type { CollectiveId } from '../../../web/net/framing';
import type { Link, Ring } from '../../../web/net/link';
import { DEFAULT_HIGH_WATER_BYTES } from '../../../web/net/paced-sender';
import { PeerMesh, type PeerMeshEvent } from '../../../web/net/peer-mesh';
import { ringAllreduce, type WireCompression } from '../../../web/net/ring-allreduce';
import { mulberry32, randomArray } from '../../support/rng';
import { probe } from './rtc-probe';
import { StripedLink } from '../../../web/net/striped-link';
import type { StripeSetting } from '../../../web/net/stripe-policy';

export interface HarnessError {
  name: string;
  kind: string | null;
  peer: string | null;
  message: string;
}

export type Outcome<T> = ({ ok: true } & T) | { ok: false; error: HarnessError; endAt: number };

export interface AllreduceParams {
  n: number;
  /** Rank r's input is `randomArray(mulberry32(seed * 1000 + r), n)`. */
  seed: number;
  id: CollectiveId;
  timeoutMs: number;
  chunkElements?: number;
  compression?: WireCompression;
  /** Wall-clock ms (performance.timeOrigin-based) at which every tab starts: a barrier for timing. */
  startAt?: number;
  /** Return the result bytes (base64); else only their hash. */
  returnData?: boolean;
  /** Run on the ring of the extra mesh of this name (`openExtra`), not the main one. */
  ring?: string;
  highWaterBytes?: number;
}

export interface AllreduceResult {
  startAt: number;
  endAt: number;
  hash: string;
  base64?: string;
}

const now = () => performance.timeOrigin + performance.now();

function describeError(err: unknown): HarnessError {
  if (isCollectiveError(err)) return { name: err.name, kind: err.kind, peer: err.peer, message: err.message };
  const e = err as Error;
  return { name: e?.name ?? 'Error', kind: null, peer: null, message: e?.message ?? String(err) };
}

async function waitUntil(at: number | undefined): Promise<void> {
  if (at === undefined) return;
  const wait = at - now();
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
}

function toBase64(bytes: Uint8Array): string {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function randomBytes(seed: number, n: number): ArrayBuffer {
  const words = new Uint32Array(Math.ceil(n / 4));
  const rand = mulberry32(seed);
  for (let i = 0; i < words.length; i++) words[i] = Math.floor(rand() * 2 ** 32);
  return words.buffer.slice(0, n);
}

/** Counts bytes arriving on a link (after its frame router, so the router still sees every frame). */
class ReceiveCounter {
  bytes = 0;
  private waiters: Array<{ bytes: number; resolve: () => void }> = [];
  private readonly unsubscribe: () => void;
  constructor(link: Link) {
    routerFor(link);
    this.unsubscribe = link.onMessage((m) => {
      this.bytes += m.byteLength;
      this.waiters = this.waiters.filter((w) => {
        if (this.bytes < w.bytes) return true;
        w.resolve();
        return false;
      });
    });
  }
  whenAtLeast(bytes: number): Promise<void> {
    if (this.bytes >= bytes) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ bytes, resolve }));
  }
  stop(): void {
    this.unsubscribe();
  }
}

let mesh: PeerMesh | null = null;
let rawMesh: PeerMesh | null = null;
let ring: Ring | null = null;
/** Further meshes with rings of their own (other stripe counts side by side in one page: bench:net's lossy part). */
const extraMeshes = new Map<string, PeerMesh>();
const extraRings = new Map<string, Ring>();
let running: Promise<Outcome<AllreduceResult>> | null = null;
let counter: ReceiveCounter | null = null;
const events: PeerMeshEvent[] = [];
let signaling: { host: string; port: number; secure?: boolean; path?: string; rtcConfig?: RTCConfiguration } | null =
  null;
let lowWaterBytes: number | undefined;

const harness = {
  /**
   * Joins the signaling server. On loopback only host and port are needed; on the network test bed
   * (bench:net) the coordinator's `/peer` over TLS (`secure`, `path`) and the ICE servers and policy a
   * volunteer tab would get in its welcome (`rtcConfig`).
   */
  async open(opts: {
    id: string;
    host: string;
    port: number;
    lowWaterBytes?: number;
    secure?: boolean;
    path?: string;
    rtcConfig?: RTCConfiguration;
    /** Stripes per neighbour (web/net/stripe-policy.ts); default the mesh's. */
    stripes?: StripeSetting;
  }): Promise<void> {
    signaling = { host: opts.host, port: opts.port, secure: opts.secure, path: opts.path, rtcConfig: opts.rtcConfig };
    lowWaterBytes = opts.lowWaterBytes;
    mesh = await PeerMesh.open({
      id: opts.id,
      host: opts.host,
      port: opts.port,
      secure: opts.secure,
      path: opts.path,
      rtcConfig: opts.rtcConfig,
      link: { bufferedAmountLowThreshold: lowWaterBytes },
      stripes: opts.stripes,
    });
    mesh.on((event) => events.push(event));
  },

  /** A further mesh `name` registered as `id` with its own stripe setting, on the main mesh's signaling server. */
  async openExtra(name: string, id: string, stripes?: StripeSetting): Promise<void> {
    extraMeshes.set(
      name,
      await PeerMesh.open({ id, ...signaling!, link: { bufferedAmountLowThreshold: lowWaterBytes }, stripes }),
    );
  },

  async ringExtra(name: string, members: string[], timeoutMs = 20_000): Promise<void> {
    extraRings.set(name, await extraMeshes.get(name)!.ring(members, { timeoutMs }));
  },

  /** The stripes (peer connections) of this tab's ring links (left, then right if another link). */
  stripes(name?: string): number[] {
    const r = name === undefined ? ring : (extraRings.get(name) ?? null);
    const links = r ? [...new Set([r.left, r.right])] : [];
    return links.flatMap((l) => (l instanceof StripedLink ? [l.stripeCount] : []));
  },

  events(): PeerMeshEvent[] {
    return events.map((e) =>
      e.type === 'error' ? { type: 'error', error: { message: e.error.message } as Error } : e,
    );
  },

  async ring(members: string[], timeoutMs = 20_000): Promise<{ rank: number; size: number }> {
    ring = await mesh!.ring(members, { timeoutMs });
    return { rank: ring.rank, size: ring.size };
  },

  async allreduce(params: AllreduceParams): Promise<Outcome<AllreduceResult>> {
    const r = params.ring === undefined ? ring! : extraRings.get(params.ring)!;
    const data = randomArray(mulberry32(params.seed * 1000 + r.rank), params.n, -1, 1);
    await waitUntil(params.startAt);
    const startAt = now();
    try {
      await ringAllreduce(r, data, {
        id: params.id,
        timeoutMs: params.timeoutMs,
        chunkElements: params.chunkElements,
        compression: params.compression,
        highWaterBytes: params.highWaterBytes,
      });
    } catch (err) {
      return { ok: false, error: describeError(err), endAt: now() };
    }
    const endAt = now();
    const bytes = new Uint8Array(data.buffer);
    return {
      ok: true,
      startAt,
      endAt,
      hash: hashBytes(bytes),
      base64: params.returnData ? toBase64(bytes) : undefined,
    };
  },

  /** Start an allreduce without waiting (for fault tests); `finishAllreduce` returns its outcome. */
  startAllreduce(params: AllreduceParams): void {
    counter?.stop();
    counter = ring!.left ? new ReceiveCounter(ring!.left) : null;
    running = harness.allreduce(params);
  },

  /** Resolves once this tab received `bytes` from its left neighbour since `startAllreduce`. */
  async waitReceived(bytes: number): Promise<number> {
    await counter!.whenAtLeast(bytes);
    return counter!.bytes;
  },

  async finishAllreduce(): Promise<Outcome<AllreduceResult>> {
    const outcome = await running!;
    counter?.stop();
    counter = null;
    return outcome;
  },

  async broadcast(params: {
    root: string;
    receivers: string[];
    bytes: number;
    seed: number;
    id: CollectiveId;
    timeoutMs: number;
    chunkBytes?: number;
  }): Promise<Outcome<{ hash: string; ms: number; byteLength: number; progressCalls: number }>> {
    const isRoot = mesh!.id === params.root;
    const links = await mesh!.connect(isRoot ? params.receivers : [params.root]);
    const state = isRoot ? randomBytes(params.seed, params.bytes) : null;
    let progressCalls = 0;
    const t0 = now();
    try {
      const got = await broadcast([...links.values()], isRoot, state, {
        id: params.id,
        timeoutMs: params.timeoutMs,
        hash: hashBytes,
        chunkBytes: params.chunkBytes,
        onProgress: () => progressCalls++,
      });
      return { ok: true, hash: hashBytes(got), ms: now() - t0, byteLength: got.byteLength, progressCalls };
    } catch (err) {
      return { ok: false, error: describeError(err), endAt: now() };
    }
  },

  /** A second mesh (`<id>-raw`) for raw throughput, so raw bytes never meet a frame router. */
  async rawConnect(selfId: string, peerIds: string | string[]): Promise<void> {
    rawMesh ??= await PeerMesh.open({
      id: `${selfId}-raw`,
      ...signaling!,
      link: { bufferedAmountLowThreshold: lowWaterBytes },
      stripes: 1, // one data channel: what "raw" compares against
    });
    await rawMesh.connect((Array.isArray(peerIds) ? peerIds : [peerIds]).map((p) => `${p}-raw`));
  },

  /** Send `total` bytes in `messageBytes` messages, paced like the collectives (same high water by default). */
  async rawSend(
    peerId: string,
    total: number,
    messageBytes: number,
    startAt: number,
    highWaterBytes = DEFAULT_HIGH_WATER_BYTES,
  ): Promise<{ startAt: number; endAt: number }> {
    const link = rawMesh!.link(`${peerId}-raw`)!;
    const message = new ArrayBuffer(messageBytes);
    const highWater = Math.max(highWaterBytes, link.bufferedAmountLowThreshold);
    await waitUntil(startAt);
    const t0 = now();
    let sent = 0;
    while (sent < total) {
      if (link.bufferedAmount > highWater) {
        await new Promise<void>((resolve) => {
          const off = link.onBufferedAmountLow(() => {
            off();
            resolve();
          });
        });
        continue;
      }
      const size = Math.min(messageBytes, total - sent);
      link.send(size === messageBytes ? message : message.slice(0, size));
      sent += size;
    }
    return { startAt: t0, endAt: now() };
  },

  /** Resolves with the arrival time of the last of `total` bytes from `peerId`. */
  rawReceive(peerId: string, total: number): Promise<{ endAt: number }> {
    const link = rawMesh!.link(`${peerId}-raw`)!;
    return new Promise((resolve) => {
      let received = 0;
      const off = link.onMessage((m) => {
        received += m.byteLength;
        if (received >= total) {
          off();
          resolve({ endAt: now() });
        }
      });
    });
  },

  /** Raw RTCPeerConnection probes of the transport itself (bench:net `diagnose`; ./rtc-probe.ts). */
  probe,

  close(): void {
    counter?.stop();
    rawMesh?.destroy();
    mesh?.destroy();
    for (const m of extraMeshes.values()) m.destroy();
    extraMeshes.clear();
    extraRings.clear();
    rawMesh = null;
    mesh = null;
  },
};

export type NetHarness = typeof harness;
(window as unknown as { netHarness: NetHarness }).netHarness = harness;
document.title = 'net harness ready';
