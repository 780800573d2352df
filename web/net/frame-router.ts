/**
 * One router per link demultiplexes incoming frames by collective id. It listens from the moment the
 * first collective uses the link and stays attached for the link's life, because a neighbour may
 * start (and send the first chunks of) a collective before this rank has reached it: those frames
 * wait here, bounded by `maxPendingBytes`. Frames of collectives older than the newest one started on
 * this link are stale (a failed round's leftovers) and are dropped, as are frames of a finished one.
 * That stays right on a link that reorders frames (a striped link, web/net/link.ts): a collective ends
 * here only once it has every frame it needs from this peer, so a frame that arrives after a newer
 * collective started can only be one it no longer wants.
 */
import { CollectiveError } from './collective-error';
import { collectiveKey, compareCollectiveIds, decodeFrame, FrameError, type CollectiveId, type Frame } from './framing';
import type { Link } from './link';

/** A peer may run ahead by at most one collective's worth of data; this bounds memory if it misbehaves. */
export const DEFAULT_MAX_PENDING_BYTES = 256 * 1024 * 1024;

export interface RouteHandlers {
  onFrame(frame: Frame): void;
  /** The link closed, or the stream broke (malformed frame, too much pending data). */
  onFailure(error: CollectiveError): void;
}

export interface Route {
  readonly link: Link;
  close(): void;
}

export class FrameRouter {
  private readonly active = new Map<string, RouteHandlers>();
  private readonly pending = new Map<string, Frame[]>();
  private pendingBytes = 0;
  private newestStarted: CollectiveId | null = null;
  /** Sticky: once the stream is broken or closed, every route on it fails. */
  private broken: CollectiveError | null = null;

  constructor(
    readonly link: Link,
    private readonly maxPendingBytes = DEFAULT_MAX_PENDING_BYTES,
  ) {
    link.onMessage((data) => this.receive(data));
    link.onClose((reason, closedLocally) =>
      this.breakWith(
        closedLocally
          ? // This rank is leaving (or dropped the link on purpose): not the peer's fault.
            new CollectiveError('aborted', `data channel to ${link.peer} closed locally`, { peer: null })
          : new CollectiveError('peer_closed', `data channel to ${link.peer} closed: ${reason}`, { peer: link.peer }),
      ),
    );
  }

  /**
   * Start receiving frames of collective `id`: frames that arrived early are delivered now (in order).
   * Throws `CollectiveError` if the link is already closed or broken.
   */
  open(id: CollectiveId, handlers: RouteHandlers): Route {
    if (this.broken) throw this.broken;
    if (!this.link.isOpen)
      throw new CollectiveError('peer_closed', `data channel to ${this.link.peer} is closed`, { peer: this.link.peer });
    const key = collectiveKey(id);
    if (this.active.has(key))
      throw new CollectiveError('protocol', `collective ${key} is already running on the link to ${this.link.peer}`, {
        peer: this.link.peer,
      });
    if (this.newestStarted && compareCollectiveIds(id, this.newestStarted) <= 0) {
      throw new CollectiveError(
        'protocol',
        `collective id ${key} is not newer than ${collectiveKey(this.newestStarted)} on the link to ${this.link.peer}; ids must grow`,
        { peer: this.link.peer },
      );
    }
    this.newestStarted = id;
    this.active.set(key, handlers);
    // Early frames of this collective are delivered; those of older ones can never be wanted again.
    const early = this.pending.get(key) ?? [];
    for (const [pendingKey, frames] of this.pending) {
      if (pendingKey === key || compareCollectiveIds(frames[0].id, id) < 0) {
        this.pending.delete(pendingKey);
        for (const frame of frames) this.pendingBytes -= frame.buffer.byteLength;
      }
    }
    const route: Route = {
      link: this.link,
      close: () => {
        if (this.active.get(key) === handlers) this.active.delete(key);
      },
    };
    for (const frame of early) {
      if (this.active.get(key) !== handlers) break; // the collective ended while replaying
      handlers.onFrame(frame);
    }
    return route;
  }

  private receive(data: ArrayBuffer): void {
    if (this.broken) return;
    let frame: Frame;
    try {
      frame = decodeFrame(data);
    } catch (err) {
      const message = err instanceof FrameError ? err.message : String(err);
      this.breakWith(
        new CollectiveError('protocol', `malformed frame from ${this.link.peer}: ${message}`, {
          peer: this.link.peer,
          cause: err,
        }),
      );
      return;
    }
    const key = collectiveKey(frame.id);
    const handlers = this.active.get(key);
    if (handlers) {
      handlers.onFrame(frame);
      return;
    }
    if (this.newestStarted && compareCollectiveIds(frame.id, this.newestStarted) <= 0) return; // stale
    const queue = this.pending.get(key);
    if (queue) queue.push(frame);
    else this.pending.set(key, [frame]);
    this.pendingBytes += data.byteLength;
    if (this.pendingBytes > this.maxPendingBytes) {
      this.breakWith(
        new CollectiveError(
          'protocol',
          `${this.link.peer} sent ${this.pendingBytes} bytes for collectives not started here (limit ${this.maxPendingBytes})`,
          { peer: this.link.peer },
        ),
      );
    }
  }

  private breakWith(error: CollectiveError): void {
    if (this.broken) return;
    this.broken = error;
    this.pending.clear();
    this.pendingBytes = 0;
    const handlers = [...this.active.values()];
    this.active.clear();
    for (const h of handlers) h.onFailure(error);
  }
}

const routers = new WeakMap<Link, FrameRouter>();

/** The link's router, created (and attached for good) on first use. */
export function routerFor(link: Link): FrameRouter {
  let router = routers.get(link);
  if (!router) {
    router = new FrameRouter(link);
    routers.set(link, router);
  }
  return router;
}
