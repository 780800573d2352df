/**
 * The browser globals a tab's main thread has and Node 20 lacks, installed once per process before any
 * web/ code runs (web/elastic/compose.ts says which it uses):
 *
 * - `WebSocket`: the `ws` package (the coordinator client, and PeerJS's signalling socket);
 * - `RTCPeerConnection`, `RTCSessionDescription`, `RTCIceCandidate`: node-datachannel's `polyfill`
 *   (libdatachannel); PeerJS finds them as globals and opens its data connections on them unchanged.
 *   Why this package and not @roamhq/wrtc or werift: docs/headless.md ("Which WebRTC") and
 *   `npm run bench:webrtc-node`.
 *
 * `fetch`, `crypto`, `performance`, `EventTarget` and `AbortController` are Node's own.
 */
import nodeDataChannel from 'node-datachannel';
import { RTCIceCandidate, RTCPeerConnection, RTCSessionDescription } from 'node-datachannel/polyfill';
import { WebSocket } from 'ws';

let installed = false;

export function installNodeGlobals(): void {
  if (installed) return;
  installed = true;
  Object.assign(globalThis, { RTCPeerConnection, RTCSessionDescription, RTCIceCandidate });
  if (typeof (globalThis as { WebSocket?: unknown }).WebSocket === 'undefined')
    Object.assign(globalThis, { WebSocket });
}

/** Stop libdatachannel's threads so the process can exit (after every peer connection is closed). */
export function releaseNodeGlobals(): void {
  nodeDataChannel.cleanup();
}
