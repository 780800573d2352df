/**
 * Raw WebRTC transport probes for bench:net's `diagnose` part: this page's own RTCPeerConnections, no
 * PeerJS and no frame router, so what is measured is Chromium's SCTP stack on the test bed's links and
 * nothing of ours. The bench process carries the SDP between two pages (non-trickle: each side waits
 * for ICE gathering to finish), so no signaling server is involved.
 *
 * A probe opens `pcs` peer connections with `channels` data channels each (negotiated ids, so both
 * sides create the same channels without `ondatachannel`); the sender streams zero-filled messages on
 * every channel, keeping each channel's `bufferedAmount` under `highWater` (refilled on
 * `bufferedamountlow` at `lowWater`, as web/net's paced sender does); the receiver counts bytes per
 * 100 ms bucket, from which the bench takes the goodput of a steady window.
 */

export interface ProbeChannelConfig {
  /** Peer connections (each its own DTLS/SCTP association, its own congestion control). */
  readonly pcs: number;
  /** Data channels per peer connection (they share its association's congestion window). */
  readonly channels: number;
  /** Default true. */
  readonly ordered?: boolean;
  /** Set for an unreliable channel (0: never retransmitted). */
  readonly maxRetransmits?: number;
  readonly rtcConfig?: RTCConfiguration;
}

export interface ProbeSendParams {
  readonly ms: number;
  readonly messageBytes: number;
  readonly highWater: number;
  readonly lowWater: number;
  /** Wall-clock ms (performance.timeOrigin-based) at which to start. */
  readonly startAt: number;
}

export interface ProbeTransportStats {
  /** Bytes of DTLS records sent by all of this side's transports (SCTP headers, SACKs, retransmissions). */
  readonly transportBytesSent: number;
  readonly transportPacketsSent: number;
  /** Message bytes the data channels sent. */
  readonly channelBytesSent: number;
  /** The selected candidate pairs' current RTT, ms (max over pcs; null if none reported). */
  readonly rttMs: number | null;
}

const now = () => performance.timeOrigin + performance.now();
const BUCKET_MS = 100;

let pcs: RTCPeerConnection[] = [];
let channels: RTCDataChannel[] = [];
let buckets = new Map<number, number>();

function makeChannels(pc: RTCPeerConnection, config: ProbeChannelConfig): RTCDataChannel[] {
  return Array.from({ length: config.channels }, (_, k) => {
    const init: RTCDataChannelInit = { negotiated: true, id: k, ordered: config.ordered ?? true };
    if (config.maxRetransmits !== undefined)
      (init as { maxRetransmits?: number }).maxRetransmits = config.maxRetransmits;
    const channel = pc.createDataChannel(`probe${k}`, init);
    channel.binaryType = 'arraybuffer';
    channel.onmessage = (e: MessageEvent<ArrayBuffer>) => {
      const bucket = Math.floor(now() / BUCKET_MS);
      buckets.set(bucket, (buckets.get(bucket) ?? 0) + e.data.byteLength);
    };
    return channel;
  });
}

function gathered(pc: RTCPeerConnection): Promise<string> {
  return new Promise((resolve) => {
    const done = () => resolve(pc.localDescription!.sdp);
    if (pc.iceGatheringState === 'complete') return done();
    pc.addEventListener('icegatheringstatechange', () => pc.iceGatheringState === 'complete' && done());
  });
}

function opened(channel: RTCDataChannel): Promise<void> {
  if (channel.readyState === 'open') return Promise.resolve();
  return new Promise((resolve, reject) => {
    channel.addEventListener('open', () => resolve(), { once: true });
    channel.addEventListener('close', () => reject(new Error('probe channel closed before opening')), { once: true });
  });
}

function fresh(config: ProbeChannelConfig): void {
  probe.close();
  buckets = new Map();
  pcs = Array.from({ length: config.pcs }, () => new RTCPeerConnection(config.rtcConfig));
  channels = pcs.flatMap((pc) => makeChannels(pc, config));
}

async function sendOn(channel: RTCDataChannel, message: ArrayBuffer, end: number, p: ProbeSendParams): Promise<number> {
  channel.bufferedAmountLowThreshold = p.lowWater;
  let sent = 0;
  while (now() < end && channel.readyState === 'open') {
    if (channel.bufferedAmount > p.highWater) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 200); // also re-check the clock on a stalled channel
        channel.addEventListener(
          'bufferedamountlow',
          () => {
            clearTimeout(timer);
            resolve();
          },
          { once: true },
        );
      });
      continue;
    }
    channel.send(message);
    sent += message.byteLength;
  }
  return sent;
}

export const probe = {
  /** Sender side: make the connections and channels; the offers, after ICE gathering. */
  async offer(config: ProbeChannelConfig): Promise<string[]> {
    fresh(config);
    return Promise.all(
      pcs.map(async (pc) => {
        await pc.setLocalDescription(await pc.createOffer());
        return gathered(pc);
      }),
    );
  },

  /** Receiver side: the same channels, answering `offers`; resolves when every channel is open. */
  async answer(config: ProbeChannelConfig, offers: string[]): Promise<string[]> {
    fresh(config);
    return Promise.all(
      pcs.map(async (pc, i) => {
        await pc.setRemoteDescription({ type: 'offer', sdp: offers[i] });
        await pc.setLocalDescription(await pc.createAnswer());
        return gathered(pc);
      }),
    );
  },

  /** Sender side: take the answers; resolves when every channel is open. */
  async connect(answers: string[]): Promise<void> {
    await Promise.all(pcs.map((pc, i) => pc.setRemoteDescription({ type: 'answer', sdp: answers[i] })));
    await Promise.all(channels.map(opened));
  },

  async whenOpen(): Promise<void> {
    await Promise.all(channels.map(opened));
  },

  /** Stream on every channel from `startAt` for `ms`; bytes handed to each channel. */
  async send(p: ProbeSendParams): Promise<number[]> {
    const message = new ArrayBuffer(p.messageBytes);
    const wait = p.startAt - now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const end = now() + p.ms;
    return Promise.all(channels.map((c) => sendOn(c, message, end, p)));
  },

  /** Receiver side: bytes received per 100 ms bucket, as [bucket start ms, bytes]. */
  received(): Array<[number, number]> {
    return [...buckets.entries()].sort((a, b) => a[0] - b[0]).map(([b, n]) => [b * BUCKET_MS, n]);
  },

  async stats(): Promise<ProbeTransportStats> {
    let transportBytesSent = 0;
    let transportPacketsSent = 0;
    let channelBytesSent = 0;
    let rttMs: number | null = null;
    for (const pc of pcs) {
      (await pc.getStats()).forEach((s: Record<string, unknown>) => {
        if (s.type === 'transport') {
          transportBytesSent += Number(s.bytesSent ?? 0);
          transportPacketsSent += Number(s.packetsSent ?? 0);
        } else if (s.type === 'data-channel') channelBytesSent += Number(s.bytesSent ?? 0);
        else if (s.type === 'candidate-pair' && s.nominated && typeof s.currentRoundTripTime === 'number')
          rttMs = Math.max(rttMs ?? 0, s.currentRoundTripTime * 1000);
      });
    }
    return { transportBytesSent, transportPacketsSent, channelBytesSent, rttMs };
  },

  close(): void {
    for (const pc of pcs) pc.close();
    pcs = [];
    channels = [];
  },
};

export type RtcProbe = typeof probe;
