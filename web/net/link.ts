/**
 * A `Link` is one reliable, message-oriented channel to one peer: what a WebRTC data channel
 * (`reliable: true`) gives, reduced to the little the collectives need. Collectives are written
 * against this interface only, so the same code runs over PeerJS data channels in browsers and over
 * in-memory links in Node unit tests (`memory-link.ts`).
 *
 * Contract (every implementation keeps it):
 * - Every message sent arrives exactly once and complete, or the link closes. **The order is not
 *   promised**: a single data channel or memory link keeps it, a striped link (`striped-link.ts`, several
 *   peer connections to one peer) hands messages on as they arrive. Nothing above a link may depend on
 *   the order: every frame names its collective, step and chunk (`framing.ts`).
 * - Messages that arrive before any `onMessage` listener is attached are held and handed to the first
 *   listener, so a fast neighbour's first frames are not lost while this side is still computing.
 * - `bufferedAmount` counts bytes accepted by `send` and not yet handed to the network; when it falls
 *   from above `bufferedAmountLowThreshold` to at or below it, `onBufferedAmountLow` listeners run
 *   (the data channel's `bufferedamountlow` event). Senders pace on this instead of queueing without
 *   bound.
 * - `onClose` listeners run once, when either side closes or the transport fails, told whether this
 *   side closed it (`closedLocally`); `send` on a closed link throws.
 */
export type Unsubscribe = () => void;

export interface Link {
  /** The remote peer's id (for errors and logs). */
  readonly peer: string;
  readonly isOpen: boolean;
  readonly bufferedAmount: number;
  readonly bufferedAmountLowThreshold: number;
  send(message: ArrayBuffer): void;
  onMessage(listener: (message: ArrayBuffer) => void): Unsubscribe;
  onClose(listener: (reason: string, closedLocally: boolean) => void): Unsubscribe;
  onBufferedAmountLow(listener: () => void): Unsubscribe;
  /** Close both directions; the remote side's `onClose` runs too. */
  close(): void;
}

/** A ring as the allreduce sees it. `left`/`right` may be the same link (size 2) and are unused at size 1. */
export interface Ring {
  readonly rank: number;
  readonly size: number;
  /** The link to rank `(rank - 1) mod size`: frames are received from it. */
  readonly left: Link | null;
  /** The link to rank `(rank + 1) mod size`: frames are sent to it. */
  readonly right: Link | null;
}

/** A listener set that tolerates listeners removing themselves (or others) while being called. */
export class ListenerSet<A extends unknown[]> {
  private listeners: Array<(...args: A) => void> = [];

  get size(): number {
    return this.listeners.length;
  }

  add(listener: (...args: A) => void): Unsubscribe {
    this.listeners = [...this.listeners, listener];
    return () => {
      this.listeners = this.listeners.filter((l) => l !== listener);
    };
  }

  emit(...args: A): void {
    for (const listener of this.listeners) listener(...args);
  }

  clear(): void {
    this.listeners = [];
  }
}

/**
 * The listener side of the `Link` contract, which every implementation keeps alike: the three listener
 * sets, the messages held for the first `onMessage` listener, and the once-only close. A link extends it
 * and calls `deliver` for each message, `lowListeners.emit()` when its buffer drains, and `emitClose` once.
 */
export abstract class LinkListeners {
  /** Messages that arrived before any `onMessage` listener (handed to the first one). */
  protected readonly held: ArrayBuffer[] = [];
  protected readonly messageListeners = new ListenerSet<[ArrayBuffer]>();
  protected readonly closeListeners = new ListenerSet<[string, boolean]>();
  protected readonly lowListeners = new ListenerSet<[]>();

  onMessage(listener: (message: ArrayBuffer) => void): Unsubscribe {
    const unsubscribe = this.messageListeners.add(listener);
    if (this.held.length > 0) for (const message of this.held.splice(0)) listener(message);
    return unsubscribe;
  }

  onClose(listener: (reason: string, closedLocally: boolean) => void): Unsubscribe {
    return this.closeListeners.add(listener);
  }

  onBufferedAmountLow(listener: () => void): Unsubscribe {
    return this.lowListeners.add(listener);
  }

  /** Hand `message` to the listeners, or hold it until the first one. */
  protected deliver(message: ArrayBuffer): void {
    if (this.messageListeners.size === 0) this.held.push(message);
    else this.messageListeners.emit(message);
  }

  /** Run the close listeners (the link calls this once), then drop every listener. */
  protected emitClose(reason: string, closedLocally: boolean): void {
    this.closeListeners.emit(reason, closedLocally);
    this.closeListeners.clear();
    this.messageListeners.clear();
    this.lowListeners.clear();
  }
}
