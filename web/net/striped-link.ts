/**
 * One `Link` to a peer striped over several links to it ("stripes"), each of its own transport with its
 * own congestion control (issue 24). On a lossy, long path one reliable SCTP association moves about
 * MSS/RTT·1.22/√p, whatever the link's rate (the Mathis bound; measured in docs/networking.md, "Lossy
 * links"): 0.3 Mbit/s of a 5 Mbit/s link at 2 % loss and 320 ms RTT. K associations move about K times
 * that, until the link's rate is the limit. Data channels of one peer connection share one association
 * and so one congestion window, which is why stripes are links of their own (web/net/peer-mesh.ts dials
 * one peer connection per stripe).
 *
 * - Every message goes out on one stripe, the one with the least `bufferedAmount` (ties in turn), behind
 *   a 4-byte little-endian sequence number.
 * - **Messages are handed on as they arrive, not in sending order** (each exactly once: the sequence
 *   numbers refuse duplicates). Reassembling the order would hold every later message behind a packet
 *   one stripe is retransmitting, and a ring allreduce cannot forward what it was not given: measured on
 *   the poor profile, in-order delivery cost a fifth of the bus bandwidth (docs/networking.md). The
 *   collectives do not need the order: every frame names its collective, ring step and chunk
 *   (web/net/framing.ts), and the Link contract allows this (web/net/link.ts).
 * - `bufferedAmount` is that of the least-loaded stripe, where the next message would go, and
 *   `onBufferedAmountLow` fires when it falls to the threshold: a paced sender therefore keeps sending as
 *   long as any stripe drains, and a stripe stalled on a retransmission timeout holds back only its own
 *   messages. The browser buffers up to stripes × high water this way.
 * - Stripes may be added at any time (`addStripe`); the first stripe exists from the start. A stripe that
 *   closes closes the whole link (its undelivered messages are gone).
 * - Hostile input: a message shorter than the header, a sequence number already delivered, or one more
 *   than `MAX_AHEAD_MESSAGES` ahead of the oldest missing one closes the link (the frame router above
 *   reports the peer), and nothing is delivered past the fault.
 */
import { type Link, LinkListeners, type Unsubscribe } from './link';

/** Bytes in front of every message on a stripe: its sequence number (u32, little-endian, wrapping). */
export const STRIPE_HEADER_BYTES = 4;
/**
 * How far ahead of the oldest missing message a sequence number may be: 2^16 messages, a GiB of
 * 16 KB frames, far more than stripes × their congestion windows can hold in flight.
 */
export const MAX_AHEAD_MESSAGES = 1 << 16;

const SEQ_SPACE = 2 ** 32;

export class StripedLink extends LinkListeners implements Link {
  readonly peer: string;
  private readonly stripes: Link[] = [];
  private readonly detach: Unsubscribe[] = [];
  private open = true;
  private nextSend = 0;
  /** The oldest sequence number not received yet; those received beyond it are in `seenAhead`. */
  private oldestMissing = 0;
  private readonly seenAhead = new Set<number>();
  private turn = 0;
  private aboveLow = false;

  constructor(first: Link) {
    super();
    this.peer = first.peer;
    this.addStripe(first);
  }

  get isOpen(): boolean {
    return this.open;
  }

  get stripeCount(): number {
    return this.stripes.length;
  }

  /** The links this one stripes over, first stripe first (for their transports' statistics). */
  get links(): readonly Link[] {
    return this.stripes;
  }

  /** The least-loaded stripe's backlog: where the next message goes. */
  get bufferedAmount(): number {
    let least = Number.POSITIVE_INFINITY;
    for (const s of this.stripes) least = Math.min(least, s.bufferedAmount);
    return Number.isFinite(least) ? least : 0;
  }

  get bufferedAmountLowThreshold(): number {
    return this.stripes[0].bufferedAmountLowThreshold;
  }

  /** Stripe `link` (to the same peer, open) into this link; it carries messages from now on. */
  addStripe(link: Link): void {
    if (link.peer !== this.peer) throw new Error(`stripe to ${link.peer} added to a link to ${this.peer}`);
    if (!this.open || !link.isOpen) {
      link.close();
      return;
    }
    this.stripes.push(link);
    this.detach.push(
      link.onMessage((message) => this.receive(message)),
      link.onClose((reason, closedLocally) =>
        this.shutDown(`stripe ${this.stripes.indexOf(link) + 1} of ${this.stripes.length}: ${reason}`, closedLocally),
      ),
      link.onBufferedAmountLow(() => this.checkLow()),
    );
    this.checkLow(); // an empty stripe may end a wait for room
  }

  send(message: ArrayBuffer): void {
    if (!this.open) throw new Error(`link to ${this.peer} is closed`);
    const stripe = this.leastLoaded();
    const framed = new Uint8Array(STRIPE_HEADER_BYTES + message.byteLength);
    new DataView(framed.buffer).setUint32(0, this.nextSend, true);
    framed.set(new Uint8Array(message), STRIPE_HEADER_BYTES);
    this.nextSend = (this.nextSend + 1) % SEQ_SPACE;
    stripe.send(framed.buffer);
    if (this.bufferedAmount > this.bufferedAmountLowThreshold) this.aboveLow = true;
  }

  close(): void {
    this.shutDown('closed locally', true);
  }

  /** The stripe with the least backlog; among equals the next in turn, so idle stripes share the load. */
  private leastLoaded(): Link {
    const n = this.stripes.length;
    let best = this.stripes[this.turn % n];
    for (let i = 1; i < n; i++) {
      const candidate = this.stripes[(this.turn + i) % n];
      if (candidate.bufferedAmount < best.bufferedAmount) best = candidate;
    }
    this.turn = (this.stripes.indexOf(best) + 1) % n;
    return best;
  }

  private checkLow(): void {
    if (!this.open || !this.aboveLow || this.bufferedAmount > this.bufferedAmountLowThreshold) return;
    this.aboveLow = false;
    this.lowListeners.emit();
  }

  private receive(message: ArrayBuffer): void {
    if (!this.open) return;
    if (!(message instanceof ArrayBuffer) || message.byteLength < STRIPE_HEADER_BYTES) {
      this.refuse(`a stripe message of ${(message as ArrayBuffer)?.byteLength ?? typeof message} bytes (no header)`);
      return;
    }
    const seq = new DataView(message).getUint32(0, true);
    const ahead = (seq - this.oldestMissing + SEQ_SPACE) % SEQ_SPACE;
    if (ahead >= MAX_AHEAD_MESSAGES) {
      this.refuse(`message ${seq} is delivered already or beyond ${MAX_AHEAD_MESSAGES} of ${this.oldestMissing}`);
      return;
    }
    if (this.seenAhead.has(seq)) {
      this.refuse(`message ${seq} arrived twice`);
      return;
    }
    if (ahead > 0) this.seenAhead.add(seq);
    else {
      this.oldestMissing = (this.oldestMissing + 1) % SEQ_SPACE;
      while (this.seenAhead.delete(this.oldestMissing)) this.oldestMissing = (this.oldestMissing + 1) % SEQ_SPACE;
    }
    this.deliver(message.slice(STRIPE_HEADER_BYTES));
  }

  private refuse(why: string): void {
    this.shutDown(`protocol error from ${this.peer}: ${why}`, false);
  }

  private shutDown(reason: string, closedLocally: boolean): void {
    if (!this.open) return;
    this.open = false;
    for (const d of this.detach) d();
    this.detach.length = 0;
    for (const s of this.stripes) s.close();
    this.seenAhead.clear();
    this.held.length = 0;
    this.emitClose(reason, closedLocally);
  }
}
