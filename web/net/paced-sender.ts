/**
 * Sends frames on one link as fast as the channel drains them and no faster: frames are produced
 * lazily (a frame's bytes are read from the tensor only when it goes out) and handed to the link while
 * its `bufferedAmount` is below the high-water mark; then the sender sleeps until `bufferedamountlow`.
 * So the queue is a list of *descriptions* of frames, never an unbounded pile of copied bytes, and the
 * browser's send buffer never grows past high water (Chromium closes a channel whose buffer passes
 * 16 MiB).
 */
import { CollectiveError } from './collective-error';
import type { Link, Unsubscribe } from './link';

/**
 * Stop handing frames to a channel holding this much. 256 KiB (with the link's 64 KiB low-water
 * mark) moved data as fast as 1 MiB / 256 KiB did between Chromium tabs here, and made the stall on
 * a fresh association's first bulk transfer ~3× shorter (~0.9 s vs ~2.5–3.5 s; web/net/README.md):
 * Chromium's SCTP recovers from a smaller burst sooner.
 */
export const DEFAULT_HIGH_WATER_BYTES = 256 * 1024;

interface PendingRange {
  next: number;
  readonly end: number;
  readonly make: (index: number) => ArrayBuffer;
}

export class PacedSender {
  private readonly queue: PendingRange[] = [];
  private head = 0;
  private waitingForLow = false;
  private pumping = false;
  private disposed = false;
  private readonly unsubscribeLow: Unsubscribe;
  /** Bytes handed to the link so far. */
  bytesSent = 0;

  constructor(
    readonly link: Link,
    private readonly highWaterBytes: number,
    /** Called whenever the queue becomes empty (everything handed to the link). */
    private readonly onDrained: () => void,
    private readonly onError: (error: CollectiveError) => void,
  ) {
    this.unsubscribeLow = link.onBufferedAmountLow(() => {
      if (!this.waitingForLow) return;
      this.waitingForLow = false;
      this.pump();
    });
  }

  /** True when every enqueued frame has been handed to the link. */
  get idle(): boolean {
    return this.head === this.queue.length;
  }

  enqueue(make: () => ArrayBuffer): void {
    this.enqueueRange(0, 1, make);
  }

  /** Frames `make(start) … make(end - 1)`, produced one at a time as the link drains. */
  enqueueRange(start: number, end: number, make: (index: number) => ArrayBuffer): void {
    if (this.disposed || end <= start) return;
    this.queue.push({ next: start, end, make });
    this.pump();
  }

  pump(): void {
    if (this.pumping || this.disposed || this.waitingForLow) return;
    this.pumping = true;
    try {
      // Waiting on the threshold itself when high water is below it would wait for an event that the
      // channel only fires on crossing the threshold from above.
      const limit = Math.max(this.highWaterBytes, this.link.bufferedAmountLowThreshold);
      while (this.head < this.queue.length) {
        if (!this.link.isOpen) return; // the link's close event fails the collective
        if (this.link.bufferedAmount > limit) {
          this.waitingForLow = true;
          return;
        }
        const range = this.queue[this.head];
        const message = range.make(range.next++);
        if (range.next >= range.end) this.head++;
        try {
          this.link.send(message);
        } catch (err) {
          this.onError(
            new CollectiveError('peer_closed', `sending to ${this.link.peer} failed: ${(err as Error).message}`, {
              peer: this.link.peer,
              cause: err,
            }),
          );
          return;
        }
        this.bytesSent += message.byteLength;
      }
      this.queue.length = 0;
      this.head = 0;
    } finally {
      this.pumping = false;
    }
    this.onDrained();
  }

  dispose(): void {
    this.disposed = true;
    this.queue.length = 0;
    this.head = 0;
    this.unsubscribeLow();
  }
}
