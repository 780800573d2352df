/**
 * In-memory `Link`s for unit tests and simulations: the ordering, buffering and closing behaviour of
 * a reliable WebRTC data channel, with faults that tests inject on purpose.
 *
 * - Delivery is asynchronous (a timer), never inside `send`, like a real channel.
 * - `latencyMs` (a number or a function per message, for jitter) and `bytesPerMs` delay delivery,
 *   but delivery stays in send order: a reliable ordered channel never reorders, so neither do we.
 * - `bufferedAmount` counts sent-but-undelivered bytes and `bufferedamountlow` fires when it falls to
 *   the threshold, so pacing code is exercised for real.
 * - `closeAfterSentBytes` closes the pair mid-transfer once that many bytes have been sent from this
 *   end (the message that crosses the limit is lost), and `close()` does it at any moment: undelivered
 *   messages are dropped and both ends see `close`; `closeAsFault()` as a crash does (neither end closed it).
 * - `tamper` sees each message this end sends and may corrupt its bytes in place or drop it: faults a
 *   reliable channel never shows, for tests of what a collective does with them.
 * Messages are copied on delivery so a sender reusing its buffer cannot fake a correct result.
 */
import { type Link, LinkListeners } from './link';

/**
 * An access link several memory links share (a home's uplink or downlink): it carries one message at a
 * time at its rate. Messages are booked when they are sent but may reach a downlink later than messages
 * booked after them (another sender, a shorter path), so the link keeps a calendar of busy intervals and
 * books each message into the first gap, at or after its arrival, long enough for it.
 */
export class SharedRate {
  /** Busy intervals [start, end), ascending and disjoint. */
  private busy: [number, number][] = [];

  constructor(readonly bytesPerMs: number) {}

  /** When `bytes` reaching the link at `at` (ms) are through it. */
  pass(bytes: number, at: number): number {
    const length = bytes / this.bytesPerMs;
    const now = performance.now();
    // Intervals over before now can take nothing any more.
    while (this.busy.length > 0 && this.busy[0][1] <= now) this.busy.shift();
    let start = at;
    let i = 0;
    for (; i < this.busy.length; i++) {
      const [s, e] = this.busy[i];
      if (start + length <= s) break;
      if (e > start) start = e;
    }
    this.busy.splice(i, 0, [start, start + length]);
    return start + length;
  }
}

export interface MemoryLinkOptions {
  /** Delay of each message (ms), or a function drawing one per message. Default 0. */
  latencyMs?: number | (() => number);
  /** Simulated bandwidth; each message also waits bytes/bytesPerMs. Default: unlimited. */
  bytesPerMs?: number;
  bufferedAmountLowThreshold?: number;
  /**
   * Instead of `bytesPerMs`: the sender's uplink and the receiver's downlink, shared with the other
   * links of those ranks (a message leaves through `uplink`, travels `latencyMs`, enters through `downlink`).
   */
  access?: { uplink: SharedRate; downlink: SharedRate };
}

export interface MemoryLinkEndOptions extends MemoryLinkOptions {
  /** Close the pair once this end has sent this many bytes (a peer vanishing mid-collective). */
  closeAfterSentBytes?: number;
  /** Sees message `index` (0-based, of this end) as it is sent: change its bytes, or return 'drop' to lose it. */
  tamper?: (message: Uint8Array, index: number) => 'drop' | undefined;
}

interface InFlight {
  readonly data: ArrayBuffer;
  readonly deliverAt: number;
}

export class MemoryLink extends LinkListeners implements Link {
  remote!: MemoryLink;
  readonly bufferedAmountLowThreshold: number;
  private open = true;
  private buffered = 0;
  private sentBytes = 0;
  private sentMessages = 0;
  private peakBuffered = 0;
  private lastDeliverAt = 0;
  private readonly inFlight: InFlight[] = [];
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    readonly peer: string,
    private readonly opts: MemoryLinkEndOptions = {},
  ) {
    super();
    this.bufferedAmountLowThreshold = opts.bufferedAmountLowThreshold ?? 64 * 1024;
  }

  get isOpen(): boolean {
    return this.open;
  }

  get bufferedAmount(): number {
    return this.buffered;
  }

  /** Total bytes this end has sent (for tests that pick a moment to cut the link). */
  get bytesSent(): number {
    return this.sentBytes;
  }

  /** The largest `bufferedAmount` seen, to check that senders pace instead of flooding the channel. */
  get peakBufferedAmount(): number {
    return this.peakBuffered;
  }

  /** Listeners currently attached, to check that collectives clean up after themselves. */
  get listenerCounts(): { message: number; close: number; bufferedAmountLow: number } {
    return {
      message: this.messageListeners.size,
      close: this.closeListeners.size,
      bufferedAmountLow: this.lowListeners.size,
    };
  }

  send(message: ArrayBuffer): void {
    if (!this.open) throw new Error(`link to ${this.peer} is closed`);
    this.sentBytes += message.byteLength;
    const limit = this.opts.closeAfterSentBytes;
    if (limit !== undefined && this.sentBytes > limit) {
      this.closeWith(`fault: closed after ${limit} bytes`);
      return;
    }
    const latency = typeof this.opts.latencyMs === 'function' ? this.opts.latencyMs() : (this.opts.latencyMs ?? 0);
    const transfer = this.opts.bytesPerMs ? message.byteLength / this.opts.bytesPerMs : 0;
    const now = performance.now();
    const data = message.slice(0);
    if (this.opts.tamper?.(new Uint8Array(data), this.sentMessages++) === 'drop') return;
    const access = this.opts.access;
    const arrives = access
      ? access.downlink.pass(message.byteLength, access.uplink.pass(message.byteLength, now) + latency)
      : 0;
    // Never before the previous message: ordered delivery whatever the drawn latency.
    const deliverAt = access
      ? Math.max(this.lastDeliverAt, arrives)
      : Math.max(this.lastDeliverAt, now + latency) + transfer;
    this.lastDeliverAt = deliverAt;
    this.inFlight.push({ data, deliverAt });
    this.buffered += message.byteLength;
    this.peakBuffered = Math.max(this.peakBuffered, this.buffered);
    this.schedule();
  }

  close(): void {
    if (!this.open) return;
    this.shutDown('closed locally', true);
    this.remote.shutDown('closed by the remote peer', false);
  }

  /** A fault: the channel dies under both ends (neither closed it), as when a peer crashes. */
  closeAsFault(reason: string): void {
    this.closeWith(reason);
  }

  private closeWith(reason: string): void {
    if (!this.open) return;
    this.shutDown(reason, false);
    this.remote.shutDown(reason, false);
  }

  private shutDown(reason: string, closedLocally: boolean): void {
    if (!this.open) return;
    this.open = false;
    this.inFlight.length = 0;
    this.buffered = 0;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    // Like a data channel, `close` is an event: it runs after the current task.
    setTimeout(() => this.emitClose(reason, closedLocally), 0);
  }

  private schedule(): void {
    if (this.timer !== null || this.inFlight.length === 0) return;
    const wait = Math.max(0, this.inFlight[0].deliverAt - performance.now());
    this.timer = setTimeout(() => {
      this.timer = null;
      this.deliverDue();
    }, wait);
  }

  private deliverDue(): void {
    const now = performance.now();
    while (this.open && this.inFlight.length > 0 && this.inFlight[0].deliverAt <= now) {
      const { data } = this.inFlight.shift()!;
      const before = this.buffered;
      this.buffered -= data.byteLength;
      this.remote.receive(data);
      if (before > this.bufferedAmountLowThreshold && this.buffered <= this.bufferedAmountLowThreshold)
        this.lowListeners.emit();
    }
    if (this.open) this.schedule();
  }

  private receive(data: ArrayBuffer): void {
    if (this.open) this.deliver(data);
  }
}

/** Two connected ends: `[a's link to b, b's link to a]`. Options apply to each end's sending side. */
export function memoryLinkPair(
  a: string,
  b: string,
  opts: { a?: MemoryLinkEndOptions; b?: MemoryLinkEndOptions } & MemoryLinkOptions = {},
): [MemoryLink, MemoryLink] {
  const { a: aOpts, b: bOpts, ...shared } = opts;
  const ab = new MemoryLink(b, { ...shared, ...aOpts });
  const ba = new MemoryLink(a, { ...shared, ...bOpts });
  ab.remote = ba;
  ba.remote = ab;
  return [ab, ba];
}

/** A ring of `size` ranks over memory links: `rings[r]` is rank r's view; `links[r]` joins r → r+1. */
export function memoryRing(
  size: number,
  opts: MemoryLinkOptions & {
    linkOptions?: (from: number) => { a?: MemoryLinkEndOptions; b?: MemoryLinkEndOptions };
  } = {},
): {
  rings: { rank: number; size: number; left: MemoryLink | null; right: MemoryLink | null }[];
  links: [MemoryLink, MemoryLink][];
} {
  const { linkOptions, ...shared } = opts;
  const name = (r: number) => `rank${r}`;
  const links: [MemoryLink, MemoryLink][] = [];
  if (size === 2) {
    // Two ranks share one channel, as in a real mesh: left and right are the same link.
    links.push(memoryLinkPair(name(0), name(1), { ...shared, ...linkOptions?.(0) }));
  } else if (size > 2) {
    for (let r = 0; r < size; r++)
      links.push(memoryLinkPair(name(r), name((r + 1) % size), { ...shared, ...linkOptions?.(r) }));
  }
  const rings = [];
  for (let r = 0; r < size; r++) {
    if (size === 1) rings.push({ rank: r, size, left: null, right: null });
    else if (size === 2) rings.push({ rank: r, size, left: links[0][r], right: links[0][r] });
    // links[r] = [r's end to r+1, (r+1)'s end to r]; r's left is links[r-1][1].
    else rings.push({ rank: r, size, left: links[(r - 1 + size) % size][1], right: links[r][0] });
  }
  return { rings, links };
}
