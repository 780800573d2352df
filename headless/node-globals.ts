/**
 * The browser globals a tab's main thread has and Node 20 lacks, installed once per process before any
 * web/ code runs (web/elastic/compose.ts says which it uses):
 *
 * - `WebSocket`: the `ws` package (the coordinator client, and PeerJS's signalling socket), as a browser's
 *   behaves: an error is an event followed by `close`, never a throw. `ws` emits `error` as a Node event,
 *   and one with no listener ends the process; PeerJS sets no `onerror`, so a refused or reset signalling
 *   socket (a coordinator busy with 64 workers starting) killed every worker of the process;
 * - `RTCPeerConnection`, `RTCSessionDescription`, `RTCIceCandidate`: node-datachannel's `polyfill`
 *   (libdatachannel); PeerJS finds them as globals and opens its data connections on them unchanged.
 *   Why this package and not @roamhq/wrtc or werift: docs/headless.md ("Which WebRTC") and
 *   `npm run bench:webrtc-node`.
 *
 *   Its `getStats()` says the candidate pair's round-trip time in milliseconds (libdatachannel's `rtt()`,
 *   a count of `std::chrono::milliseconds`), where WebRTC's stats, and so web/net/link-rtt.ts, say seconds:
 *   `BrowserLikePeerConnection` puts it in seconds. Before, a 30-ms loopback link read as 30 s, so the
 *   striped links' `auto` rule (web/net/stripe-policy.ts) opened the maximum of 16 peer connections per
 *   ring neighbour of every headless worker, and the admin page showed RTTs of a minute.
 *
 *   It also treats a listener that throws as a browser does: the error is reported and the event goes on.
 *   Node's `EventTarget` makes it an uncaught exception, which ends the process. PeerJS's `ondatachannel`
 *   throws (a TypeError on a connection it no longer has) when a peer connection's data channel arrives
 *   after the worker closed its mesh: a worker that crashed while a dial to it was in flight took the
 *   other 7 workers of its process with it (bench:scale, N = 32, once the spare links made such dials
 *   common: SIGABRT, 8 workers gone at once).
 *
 * `fetch`, `crypto`, `performance`, `EventTarget` and `AbortController` are Node's own.
 */
import nodeDataChannel from 'node-datachannel';
import { RTCIceCandidate, RTCPeerConnection, RTCSessionDescription } from 'node-datachannel/polyfill';
import { WebSocket } from 'ws';

/** `ws`'s WebSocket with an `error` listener always attached (a browser's never throws on errors). */
export class BrowserLikeWebSocket extends WebSocket {
  constructor(...args: ConstructorParameters<typeof WebSocket>) {
    super(...args);
    this.on('error', () => {});
  }
}

/** A stats entry as the polyfill builds it (plain objects in a Map). */
type StatsEntry = { type?: string; currentRoundTripTime?: unknown; totalRoundTripTime?: unknown };

/**
 * The candidate pairs of a polyfill stats report with their round-trip times in seconds, as WebRTC's
 * stats define them (the polyfill gives libdatachannel's milliseconds; −1 ms, "unknown", is left out).
 * Changes the report in place and returns it.
 */
export function rttInSeconds<R extends Map<string, unknown>>(report: R): R {
  for (const entry of report.values()) {
    const stat = entry as StatsEntry;
    if (stat?.type !== 'candidate-pair') continue;
    for (const key of ['currentRoundTripTime', 'totalRoundTripTime'] as const) {
      const ms = stat[key];
      if (typeof ms !== 'number') continue;
      if (ms >= 0 && Number.isFinite(ms)) stat[key] = ms / 1000;
      else delete stat[key];
    }
  }
  return report;
}

/** Each listener added to a `BrowserLikePeerConnection`, and the wrapper that reports its throws. */
const guardedListeners = new WeakMap<object, EventListener>();

/**
 * The polyfill's peer connection with WebRTC's units in its stats (`rttInSeconds`), whose listeners'
 * throws are reported, not fatal (file comment).
 */
export class BrowserLikePeerConnection extends RTCPeerConnection {
  override addEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: AddEventListenerOptions | boolean,
  ): void {
    if (!listener) return;
    // (The polyfill's constructor adds listeners before this class's fields exist: the map is the module's.)
    let guarded = guardedListeners.get(listener);
    if (!guarded) {
      guarded = (event: Event) => {
        try {
          if (typeof listener === 'function') listener.call(event.currentTarget, event);
          else listener.handleEvent(event);
        } catch (err) {
          console.warn(`a peer connection's ${type} listener threw (reported, as a browser does): ${err}`);
        }
      };
      guardedListeners.set(listener, guarded);
    }
    super.addEventListener(type, guarded, options);
  }

  override removeEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: EventListenerOptions | boolean,
  ): void {
    const guarded = listener ? guardedListeners.get(listener) : undefined;
    if (guarded) super.removeEventListener(type, guarded, options);
  }

  override async getStats(...args: Parameters<RTCPeerConnection['getStats']>): Promise<RTCStatsReport> {
    return rttInSeconds(
      (await super.getStats(...args)) as unknown as Map<string, unknown>,
    ) as unknown as RTCStatsReport;
  }
}

let installed = false;

export function installNodeGlobals(): void {
  if (installed) return;
  installed = true;
  Object.assign(globalThis, { RTCPeerConnection: BrowserLikePeerConnection, RTCSessionDescription, RTCIceCandidate });
  // Always ours, also where Node has a WebSocket of its own (22+): the coordinator client and PeerJS then
  // meet the same socket everywhere, one that never throws on an error.
  Object.assign(globalThis, { WebSocket: BrowserLikeWebSocket });
}

/**
 * Stop libdatachannel's threads so the process can exit (after every peer connection is closed). Its
 * cleanup gives up after a timeout when a thread is still busy (seen on a loaded machine: "cleanup timeout
 * (possible deadlock)"); the worker has said goodbye by then and the process is exiting, so that is a
 * warning on stderr, not a failed run.
 */
export function releaseNodeGlobals(): void {
  try {
    nodeDataChannel.cleanup();
  } catch (err) {
    process.stderr.write(`tabswarm worker: warning: WebRTC cleanup at exit: ${(err as Error).message}\n`);
  }
}
