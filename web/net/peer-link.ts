/**
 * A `Link` over a PeerJS `DataConnection` (reliable, `serialization: 'raw'`). PeerJS is used for
 * signaling and connection setup only; frames go straight to the underlying `RTCDataChannel` so our
 * own pacing (`bufferedAmount` + `bufferedamountlow`) is the only send queue — PeerJS's buffered send
 * would add a second, unbounded one that polls every 50 ms.
 */
import type { DataConnection } from 'peerjs';
import { type Link, LinkListeners } from './link';

export interface DataConnectionLinkOptions {
  /** `bufferedamountlow` fires when the send buffer falls to this. Default 64 KiB (see paced-sender.ts). */
  readonly bufferedAmountLowThreshold?: number;
  /**
   * Treat ICE `disconnected` as closed. A crashed or frozen tab sends no SCTP abort: the only early
   * sign is ICE consent checks failing (a few seconds), long before ICE gives up (`failed`, ~30 s).
   * A training ring prefers to restore and re-form over waiting for a link that might come back.
   * Default true.
   */
  readonly closeOnIceDisconnected?: boolean;
}

/** ~3 ms of data at 20 MiB/s: enough to cover the event-loop latency between the event and the next send. */
export const DEFAULT_LOW_WATER_BYTES = 64 * 1024;

export class DataConnectionLink extends LinkListeners implements Link {
  readonly peer: string;
  readonly bufferedAmountLowThreshold: number;
  private readonly channel: RTCDataChannel;
  private open = true;
  private closeReason = '';
  private readonly detach: Array<() => void> = [];

  constructor(
    readonly connection: DataConnection,
    opts: DataConnectionLinkOptions = {},
  ) {
    super();
    this.peer = connection.peer;
    const channel = connection.dataChannel;
    if (channel?.readyState !== 'open') throw new Error(`data connection to ${connection.peer} is not open`);
    this.channel = channel;
    channel.binaryType = 'arraybuffer';
    this.bufferedAmountLowThreshold = opts.bufferedAmountLowThreshold ?? DEFAULT_LOW_WATER_BYTES;
    channel.bufferedAmountLowThreshold = this.bufferedAmountLowThreshold;

    const onLow = () => this.lowListeners.emit();
    channel.addEventListener('bufferedamountlow', onLow);
    const onChannelClose = () => this.shutDown('data channel closed');
    channel.addEventListener('close', onChannelClose);
    this.detach.push(() => {
      channel.removeEventListener('bufferedamountlow', onLow);
      channel.removeEventListener('close', onChannelClose);
    });

    const onData = (data: unknown) => {
      if (!this.open) return;
      // Raw serialization hands over what the channel received; anything but an ArrayBuffer is passed
      // on as-is and rejected by the frame decoder as a protocol error.
      this.deliver(data as ArrayBuffer);
    };
    const onClose = () => this.shutDown('connection closed');
    const onError = (err: { type?: string; message?: string }) =>
      this.shutDown(`connection error ${err.type ?? ''}: ${err.message ?? ''}`);
    const closeOnDisconnect = opts.closeOnIceDisconnected ?? true;
    const onIce = (state: RTCIceConnectionState) => {
      if (state === 'failed' || state === 'closed' || (closeOnDisconnect && state === 'disconnected'))
        this.shutDown(`ICE ${state}`);
    };
    connection.on('data', onData);
    connection.on('close', onClose);
    connection.on('error', onError);
    connection.on('iceStateChanged', onIce);
    this.detach.push(() => {
      connection.off('data', onData);
      connection.off('close', onClose);
      connection.off('error', onError);
      connection.off('iceStateChanged', onIce);
    });
  }

  get isOpen(): boolean {
    return this.open && this.channel.readyState === 'open';
  }

  get bufferedAmount(): number {
    return this.channel.bufferedAmount;
  }

  /** Why the link closed ('' while open). */
  get reason(): string {
    return this.closeReason;
  }

  send(message: ArrayBuffer): void {
    if (!this.isOpen)
      throw new Error(`link to ${this.peer} is closed${this.closeReason ? `: ${this.closeReason}` : ''}`);
    this.channel.send(message);
  }

  close(): void {
    this.shutDown('closed locally', true);
  }

  private shutDown(reason: string, closedLocally = false): void {
    if (!this.open) return;
    this.open = false;
    this.closeReason = reason;
    for (const detach of this.detach) detach();
    this.held.length = 0;
    // Closing the connection closes its RTCPeerConnection, which the remote sees at once as a closed
    // channel (an SCTP abort), rather than after ICE timeouts.
    try {
      this.connection.close();
    } catch {
      // already torn down by PeerJS
    }
    this.emitClose(reason, closedLocally);
  }
}
