/**
 * One grouped-allreduce call's links to other ranks (group-call.ts): which link reaches which rank, the
 * route each link's frames arrive on (the group's ring under the current attempt's id, other groups
 * under the call's id), a paced send queue per rank that holds frames until a link exists, dialing on
 * demand, and closing it all when the call settles.
 */
import type { CollectiveError } from './collective-error';
import { type CollectiveId, collectiveKey, type Frame } from './framing';
import { routerFor, type Route } from './frame-router';
import { abortFrame, trySend } from './collective-session';
import { type GroupLinks, OutQueue } from './group-support';
import type { Link } from './link';
import { DEFAULT_HIGH_WATER_BYTES, PacedSender } from './paced-sender';

/** What the routes tell their call. */
export interface RouteEvents {
  /** The id frames from `rank` arrive under now. */
  routeId(rank: number): CollectiveId;
  onFrame(rank: number, link: Link, frame: Frame): void;
  /** The link to `rank` closed or broke (or could not be routed). */
  onFailure(rank: number, link: Link, error: CollectiveError): void;
  /** A queue drained or was dropped: the call may be done. */
  onDrained(): void;
  /** A dial to `rank` failed (the mesh tries until its own deadline): out, as if its link had closed. */
  onUnreachable(rank: number): void;
}

export class GroupRoutes {
  private readonly linkOf = new Map<number, Link>();
  private readonly routes = new Map<Link, { id: CollectiveId; route: Route }>();
  private readonly outs = new Map<number, OutQueue>();
  /** The number of each link's newest routing (`route`), out of `routings` so far. */
  private readonly latest = new Map<Link, number>();
  private routings = 0;
  /** Ranks lost for this call whose links may still be open (`forget`): never routed or dialed again. */
  private readonly gone = new Set<number>();
  private closed = false;

  constructor(
    private readonly links: GroupLinks,
    private readonly events: RouteEvents,
    private readonly highWaterBytes = DEFAULT_HIGH_WATER_BYTES,
  ) {}

  /** A link to `rank` (planned, dialed, or dialed in): route its frames and send it what waits. */
  register(rank: number, link: Link): void {
    if (this.closed || this.gone.has(rank)) return;
    this.linkOf.set(rank, link);
    this.route(rank, link);
    this.outs.get(rank)?.attach(link);
  }

  /** The open links, by rank. */
  entries(): IterableIterator<[number, Link]> {
    return this.linkOf.entries();
  }

  has(rank: number): boolean {
    return this.linkOf.has(rank);
  }

  /** `rank`'s peer name, for errors: from this call's link, the mesh's (a forgotten rank's), or its rank. */
  peerName(rank: number): string {
    return this.linkOf.get(rank)?.peer ?? this.links.link(rank)?.peer ?? `rank ${rank}`;
  }

  /**
   * (Re)open the route of the link to `rank` under its current id. Opening replays the frames that came
   * early, and one of them (a mate's retry) may move the call to a newer attempt, which routes this same
   * link again (`startAttempt`) before this open returns: the newer routing then stands, this one is
   * closed, and the early frames of the old id still being replayed are not delivered. Which routing of a
   * link is the newest is a number (`latest`), so a frame costs one comparison to check.
   */
  route(rank: number, link: Link): void {
    const id = this.events.routeId(rank);
    const existing = this.routes.get(link);
    if (existing && collectiveKey(existing.id) === collectiveKey(id)) return;
    existing?.route.close();
    this.routes.delete(link);
    const mine = ++this.routings;
    this.latest.set(link, mine);
    let route: Route;
    try {
      route = routerFor(link).open(id, {
        onFrame: (frame) => {
          if (this.latest.get(link) === mine) this.events.onFrame(rank, link, frame);
        },
        onFailure: (error) => this.events.onFailure(rank, link, error),
      });
    } catch (err) {
      this.events.onFailure(rank, link, err as CollectiveError);
      return;
    }
    if (this.closed || this.latest.get(link) !== mine) route.close();
    else this.routes.set(link, { id, route });
  }

  /** Dial `rank` unless a link to it exists; a failed dial drops what was queued for it and tells the call. */
  ensure(rank: number | null): void {
    if (rank === null || this.linkOf.has(rank) || this.closed) return;
    if (this.gone.has(rank)) {
      // As a dial that failed: what is queued for it is lost (later, as a dial's outcome comes).
      void Promise.resolve().then(() => this.drop(rank));
      return;
    }
    this.links.connect(rank).then(
      (link) => this.register(rank, link),
      // Not reachable: what was queued for it is lost, and the call counts it out (its heir, or its group
      // lost whole), as a closed link: otherwise only a later roster or the deadline would end the wait.
      () => {
        this.drop(rank);
        if (!this.closed && !this.gone.has(rank)) this.events.onUnreachable(rank);
      },
    );
  }

  /** The send queue to `rank` (dialing it if needed). */
  to(rank: number): OutQueue {
    let out = this.outs.get(rank);
    if (!out) {
      out = new OutQueue(
        (link) =>
          new PacedSender(
            link,
            this.highWaterBytes,
            () => this.events.onDrained(),
            (error) => this.events.onFailure(rank, link, error),
          ),
      );
      this.outs.set(rank, out);
      const link = this.linkOf.get(rank);
      if (link) out.attach(link);
      else this.ensure(rank);
    }
    return out;
  }

  /**
   * `rank` is gone for this call although its link may stay open (the coordinator lost it: a crashed
   * tab's link closes only when ICE consent fails). Its route closes, so its frames are no longer taken,
   * its queue is dropped, and it is never dialed or routed again: sends to it are lost as to a closed link.
   */
  forget(rank: number): void {
    this.gone.add(rank);
    const link = this.linkOf.get(rank);
    if (link) {
      this.routes.get(link)?.route.close();
      this.routes.delete(link);
      this.linkOf.delete(rank);
    }
    this.drop(rank);
  }

  /** Forget what is queued for `rank`. */
  drop(rank: number): void {
    this.outs.get(rank)?.dispose();
    this.outs.delete(rank);
    this.events.onDrained();
  }

  /**
   * The link to `rank` failed: forget it and its queue, and close its route (a send that failed on a link
   * still open leaves the route live in the link's router, where a later routing of that link would
   * find its id already running).
   */
  lost(rank: number, link: Link): void {
    if (this.linkOf.get(rank) === link) {
      this.linkOf.delete(rank);
      this.drop(rank);
    }
    this.routes.get(link)?.route.close();
    this.routes.delete(link);
  }

  /** Drop the queues to the ranks `which` picks (a new attempt drops the group's). */
  dropWhere(which: (rank: number) => boolean): void {
    for (const [rank, queue] of this.outs)
      if (which(rank)) {
        queue.dispose();
        this.outs.delete(rank);
      }
  }

  /** Everything queued has been handed to the links. */
  get idle(): boolean {
    for (const out of this.outs.values()) if (!out.idle) return false;
    return true;
  }

  /** An Abort frame with `error` on every routed link, under each link's id. */
  abortAll(error: CollectiveError): void {
    for (const [link, { id }] of this.routes) if (link.isOpen) trySend(link, abortFrame(id, error));
  }

  close(): void {
    this.closed = true;
    for (const { route } of this.routes.values()) route.close();
    this.routes.clear();
    this.latest.clear();
    for (const out of this.outs.values()) out.dispose();
    this.outs.clear();
  }
}
