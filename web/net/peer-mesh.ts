/**
 * The tab's PeerJS endpoint and its links to other tabs.
 *
 * - One `Peer` per tab, registered with the coordinator's signaling server (`/peer`). No STUN/TURN by
 *   default: tabs of one machine or LAN reach each other with host candidates; across NATs the
 *   coordinator's STUN/TURN servers come in `welcome` and go into `rtcConfig`.
 * - One reliable raw data connection per pair of tabs. To avoid two connections racing for the same
 *   pair, only the tab with the lower id dials; the other waits for the call. A dial to a tab that has
 *   not registered yet is retried until the deadline (the signaling server only holds offers for 5 s).
 *   An attempt that gets no answer is given up after a bound learned from this mesh's earlier dials
 *   (web/net/dial-budget.ts: a few connections on a loaded machine never open) and dialed again.
 * - Each link is a `StripedLink` (web/net/striped-link.ts): once the first connection is open, the tab
 *   that dialed it adds `stripes − 1` more connections to the same peer (label `STRIPE_LABEL`, metadata
 *   naming the first connection), each a peer connection of its own with its own congestion control;
 *   the link is usable at once and takes each stripe into use as it opens. `stripes: 'auto'` decides
 *   the count from the first connection's RTT (web/net/stripe-policy.ts). A stripe that fails to open
 *   is left out; one that closes later closes the link.
 * - A link that closes is forgotten, and listeners hear `link-closed`; a later `connect` dials again.
 */
import { Peer, type DataConnection, type PeerError } from 'peerjs';
import type { GroupLayout } from '../../core/training/group-geometry';
import type { GroupLinks } from './group-allreduce';
import { ListenerSet, type Link, type Ring, type Unsubscribe } from './link';
import { selectedPairRttMs } from './link-rtt';
import { DIAL_ATTEMPT_MS, DialBudget, dialUntil, NoAnswer } from './dial-budget';
import { DataConnectionLink, type DataConnectionLinkOptions } from './peer-link';
import type { StatsLike } from './ice-path';
import { StripedLink } from './striped-link';
import { MAX_STRIPES, type StripeSetting, stripesFor } from './stripe-policy';

export interface PeerMeshOptions {
  /** This tab's id on the signaling server (letters, digits, `-`, `_`). */
  readonly id: string;
  readonly host: string;
  readonly port: number;
  /** Where the coordinator mounts PeerServer. Default `/peer`. */
  readonly path?: string;
  /** PeerServer key. Default `peerjs` (the coordinator's). */
  readonly key?: string;
  readonly secure?: boolean;
  /** Default none: localhost and LAN only. Ignored when `rtcConfig` is given. */
  readonly iceServers?: RTCIceServer[];
  /**
   * The configuration of every peer connection, read when each one is made: the caller may change
   * its fields later (the coordinator's ICE servers and TURN credential arrive in `welcome`, after the
   * mesh registered) and connections made from then on use them.
   */
  readonly rtcConfig?: RTCConfiguration;
  /** How long `PeerMesh.open` waits for the signaling server. Default 10 s. */
  readonly openTimeoutMs?: number;
  readonly link?: DataConnectionLinkOptions;
  /**
   * Peer connections per link (stripes), or `'auto'`: from the first connection's RTT
   * (web/net/stripe-policy.ts). Default `'auto'`.
   */
  readonly stripes?: StripeSetting;
  /** PeerJS log level 0–3. */
  readonly debug?: 0 | 1 | 2 | 3;
  /**
   * Close every link on `pagehide` (default true in a page). Closing the peer connections sends an
   * SCTP abort the neighbours see at once; a tab torn down without it is only noticed when ICE
   * consent checks fail, seconds later.
   */
  readonly closeOnPageHide?: boolean;
}

export type PeerMeshEvent =
  | { readonly type: 'link-open'; readonly peer: string }
  | { readonly type: 'link-closed'; readonly peer: string; readonly reason: string }
  /** The signaling connection is lost: existing links keep working, new ones cannot be made. */
  | { readonly type: 'signaling-lost'; readonly reason: string }
  | { readonly type: 'error'; readonly error: Error };

interface Waiter {
  resolve(link: Link): void;
  reject(error: Error): void;
}

/**
 * The first connection of a link, and the further stripes. The version in the label keeps a tab of an
 * older build (unstriped frames) from pairing with this one: each refuses the other's label.
 */
export const LABEL = 'tabswarm/2';
export const STRIPE_LABEL = 'tabswarm/2+stripe';
/** How long the dialing side waits for the first connection's RTT before deciding `'auto'` stripes. */
const RTT_WAIT_MS = 2000;
/** How long a stripe that opened before the link it names waits for that link. */
const STRIPE_WAIT_MS = 5000;

export class PeerMesh {
  private readonly links = new Map<string, StripedLink>();
  /** Each link's first connection id: what a stripe's metadata must name to join it. */
  private readonly firstConnection = new WeakMap<StripedLink, string>();
  /** Stripes that opened before the link they name (key: peer and first connection id). */
  private readonly earlyStripes = new Map<string, DataConnection[]>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  /** Dials in flight, by peer (`dialShared`). */
  private readonly dialing = new Map<string, Promise<Link>>();
  private readonly listeners = new ListenerSet<[PeerMeshEvent]>();
  private readonly peerErrors = new ListenerSet<[PeerError<string>]>();
  /** How long a dial attempt waits, learned from this mesh's attempts that opened (dial-budget.ts). */
  private readonly dialBudget = new DialBudget();
  private destroyed = false;

  private constructor(
    private readonly peerClient: Peer,
    private readonly opts: PeerMeshOptions,
  ) {
    peerClient.on('connection', (connection) => this.accept(connection));
    peerClient.on('error', (error) => {
      this.peerErrors.emit(error);
      // A dial to an unknown id is the dial loop's business; everything else is worth reporting.
      if (error.type !== 'peer-unavailable') this.emit({ type: 'error', error });
    });
    peerClient.on('disconnected', () =>
      this.emit({ type: 'signaling-lost', reason: 'disconnected from the signaling server' }),
    );
    if ((opts.closeOnPageHide ?? true) && typeof window !== 'undefined') {
      const onPageHide = () => this.destroy();
      window.addEventListener('pagehide', onPageHide);
      this.removePageHide = () => window.removeEventListener('pagehide', onPageHide);
    }
  }

  private removePageHide: () => void = () => {};

  /** Register `opts.id` with the signaling server; rejects if it is taken or the server is unreachable. */
  static open(opts: PeerMeshOptions): Promise<PeerMesh> {
    const peerClient = new Peer(opts.id, {
      host: opts.host,
      port: opts.port,
      path: opts.path ?? '/peer',
      key: opts.key ?? 'peerjs',
      secure: opts.secure ?? false,
      config: opts.rtcConfig ?? { iceServers: opts.iceServers ?? [] },
      debug: opts.debug ?? 0,
    });
    return new Promise<PeerMesh>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          fail(
            new Error(
              `signaling server ${opts.host}:${opts.port} did not answer within ${opts.openTimeoutMs ?? 10_000} ms`,
            ),
          ),
        opts.openTimeoutMs ?? 10_000,
      );
      const onOpen = () => {
        clearTimeout(timer);
        peerClient.off('error', onError);
        resolve(new PeerMesh(peerClient, opts));
      };
      const onError = (error: PeerError<string>) => fail(new Error(`PeerJS ${error.type}: ${error.message}`));
      const fail = (error: Error) => {
        clearTimeout(timer);
        peerClient.off('open', onOpen);
        peerClient.off('error', onError);
        peerClient.destroy();
        reject(error);
      };
      peerClient.once('open', onOpen);
      peerClient.on('error', onError);
    });
  }

  get id(): string {
    return this.opts.id;
  }

  on(listener: (event: PeerMeshEvent) => void): Unsubscribe {
    return this.listeners.add(listener);
  }

  /** The open link to `peer`, if any. */
  link(peer: string): Link | undefined {
    const link = this.links.get(peer);
    return link?.isOpen ? link : undefined;
  }

  /** Peers with an open link. */
  get connectedPeers(): string[] {
    return [...this.links.keys()].filter((p) => this.links.get(p)!.isOpen);
  }

  /** How long a first dial attempt waits now (dial-budget.ts): a deadline that allows one attempt. */
  get firstAttemptMs(): number {
    return this.dialBudget.attemptMs(0);
  }

  /** Open links to all `peers` (dialing those with a higher id, awaiting the others' calls). */
  async connect(peers: readonly string[], opts: { timeoutMs?: number } = {}): Promise<Map<string, Link>> {
    const deadline = performance.now() + (opts.timeoutMs ?? 15_000);
    const unique = [...new Set(peers)].filter((p) => p !== this.id);
    const links = await Promise.all(unique.map((peer) => this.connectOne(peer, deadline)));
    return new Map(unique.map((peer, i) => [peer, links[i]]));
  }

  /**
   * This tab's place in a ring of `members` (in rank order, this tab among them), with links to its
   * neighbours. With two members both neighbours are the same link.
   */
  async ring(members: readonly string[], opts: { timeoutMs?: number } = {}): Promise<Ring> {
    const rank = members.indexOf(this.id);
    if (rank < 0) throw new Error(`ring: ${this.id} is not among the members ${members.join(', ')}`);
    if (new Set(members).size !== members.length) throw new Error(`ring: members repeat: ${members.join(', ')}`);
    const size = members.length;
    if (size === 1) return { rank, size, left: null, right: null };
    const leftId = members[(rank - 1 + size) % size];
    const rightId = members[(rank + 1) % size];
    const links = await this.connect([leftId, rightId], opts);
    return { rank, size, left: links.get(leftId)!, right: links.get(rightId)! };
  }

  /**
   * This tab's view of the links among `members` (in rank order) for the grouped allreduce: ranks to
   * peers, dialing on demand (both ends of a new link call `connect`, the lower id dials), and the links
   * other members open to this tab while a call runs.
   */
  groupLinks(members: readonly string[], rank: number, layout: GroupLayout): GroupLinks {
    const rankOf = new Map(members.map((peer, r) => [peer, r]));
    return {
      rank,
      layout,
      link: (r) => this.link(members[r]) ?? null,
      connect: async (r) => (await this.connect([members[r]])).get(members[r])!,
      onLink: (listener) =>
        this.on((event) => {
          const r = event.type === 'link-open' ? rankOf.get(event.peer) : undefined;
          const link = r === undefined ? undefined : this.link(members[r]);
          if (r !== undefined && link) listener(r, link);
        }),
    };
  }

  /** Close links to peers not in `keep` (members that left the round). */
  retain(keep: readonly string[]): void {
    const wanted = new Set(keep);
    for (const [peer, link] of this.links) if (!wanted.has(peer)) link.close();
  }

  disconnect(peer: string): void {
    this.links.get(peer)?.close();
  }

  /** Close every link and leave the signaling server. */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.removePageHide();
    this.sayGoodbye();
    for (const link of [...this.links.values()]) link.close();
    for (const [peer, waiters] of this.waiters)
      for (const w of waiters) w.reject(new Error(`mesh destroyed while waiting for ${peer}`));
    this.waiters.clear();
    this.peerClient.destroy();
  }

  /**
   * Tell each linked peer we are leaving, through the signaling server (a PeerJS LEAVE, on which its
   * PeerJS closes our connections). A closing tab's own peer-connection teardown races the renderer's
   * shutdown and is often lost, leaving neighbours to notice only when ICE consent fails (~5 s); the
   * WebSocket message leaves the renderer at once.
   */
  private sayGoodbye(): void {
    for (const peer of this.connectedPeers) {
      try {
        this.peerClient.socket.send({ type: 'LEAVE', dst: peer });
      } catch {
        // signaling already gone: the links' own close is all we can do
      }
    }
  }

  private async connectOne(peer: string, deadline: number): Promise<Link> {
    const existing = this.link(peer);
    if (existing) return existing;
    if (this.destroyed) throw new Error('mesh destroyed');
    return this.id < peer ? this.dialShared(peer, deadline) : this.awaitCall(peer, deadline);
  }

  /**
   * One dial per peer at a time: a caller finding one in flight (a spare link still dialing when the next
   * round needs the same peer as a neighbour) waits for it. Two dials would each open a connection, and
   * the callee keeps only the later one (`adopt`), closing the link the other caller may already use.
   * When the shared dial fails before this caller's own deadline, it dials again.
   */
  private async dialShared(peer: string, deadline: number): Promise<Link> {
    for (;;) {
      let pending = this.dialing.get(peer);
      if (!pending) {
        pending = this.dial(peer, deadline).finally(() => this.dialing.delete(peer));
        this.dialing.set(peer, pending);
      }
      try {
        return await pending;
      } catch (err) {
        if (this.destroyed || performance.now() >= deadline) throw err;
      }
    }
  }

  private dial(peer: string, deadline: number): Promise<Link> {
    return dialUntil({
      what: `${this.id} → ${peer}`,
      deadline,
      budget: this.dialBudget,
      stopped: () => this.destroyed,
      // The other side may have called us after all.
      established: () => this.link(peer),
      attempt: (timeoutMs) => this.dialOnce(peer, timeoutMs),
    });
  }

  private dialOnce(peer: string, timeoutMs: number): Promise<Link> {
    const connection = this.peerClient.connect(peer, { reliable: true, serialization: 'raw', label: LABEL });
    if (!connection) return Promise.reject(new Error('PeerJS refused to dial (peer destroyed or disconnected)'));
    return new Promise<Link>((resolve, reject) => {
      const cleanups: Array<() => void> = [];
      const finish = (error: Error | null) => {
        for (const c of cleanups) c();
        if (error) {
          connection.close();
          reject(error);
        } else resolve(this.adopt(connection));
      };
      const timer = setTimeout(() => finish(new NoAnswer(`no answer within ${Math.round(timeoutMs)} ms`)), timeoutMs);
      cleanups.push(() => clearTimeout(timer));
      const onOpen = () => finish(null);
      const onFail = () => finish(new Error('connection closed or failed before opening'));
      connection.on('open', onOpen);
      connection.on('error', onFail);
      connection.on('close', onFail);
      cleanups.push(() => {
        connection.off('open', onOpen);
        connection.off('error', onFail);
        connection.off('close', onFail);
      });
      // PeerJS reports an unknown destination on the Peer, naming it in the message.
      cleanups.push(
        this.peerErrors.add((error) => {
          if (error.type === 'peer-unavailable' && error.message.endsWith(` ${peer}`))
            finish(new Error(`${peer} is not on the signaling server`));
        }),
      );
    });
  }

  private awaitCall(peer: string, deadline: number): Promise<Link> {
    return new Promise<Link>((resolve, reject) => {
      let waiters = this.waiters.get(peer);
      if (!waiters) {
        waiters = new Set();
        this.waiters.set(peer, waiters);
      }
      const timer = setTimeout(
        () => {
          waiters!.delete(waiter);
          reject(new Error(`${peer} did not connect to ${this.id} in time`));
        },
        Math.max(0, deadline - performance.now()),
      );
      const waiter: Waiter = {
        resolve: (link) => {
          clearTimeout(timer);
          resolve(link);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      waiters.add(waiter);
    });
  }

  private accept(connection: DataConnection): void {
    if (this.destroyed || connection.serialization !== 'raw') connection.close();
    else if (connection.label === LABEL) {
      const offered = performance.now();
      connection.once('open', () => {
        this.dialBudget.opened(performance.now() - offered);
        this.adopt(connection, false);
      });
    } else if (connection.label === STRIPE_LABEL) connection.once('open', () => this.acceptStripe(connection));
    else connection.close();
  }

  /**
   * A further stripe the peer dialed: joined to the link whose first connection its metadata names. One
   * that opens before that link is adopted here waits for it (`STRIPE_WAIT_MS`); one naming no link of
   * this peer, or beyond `MAX_STRIPES`, is closed.
   */
  private acceptStripe(connection: DataConnection): void {
    const meta = connection.metadata as { stripeOf?: unknown } | null | undefined;
    const stripeOf = typeof meta === 'object' && meta !== null ? meta.stripeOf : undefined;
    if (typeof stripeOf !== 'string' || stripeOf.length > 100) {
      connection.close();
      return;
    }
    const link = this.links.get(connection.peer);
    if (link?.isOpen && this.firstConnection.get(link) === stripeOf) {
      this.joinStripe(link, connection);
      return;
    }
    const key = `${connection.peer}\n${stripeOf}`;
    const waiting = this.earlyStripes.get(key) ?? [];
    if (waiting.length >= MAX_STRIPES) {
      connection.close();
      return;
    }
    this.earlyStripes.set(key, [...waiting, connection]);
    setTimeout(() => {
      const still = this.earlyStripes.get(key);
      if (!still?.includes(connection)) return;
      this.earlyStripes.set(
        key,
        still.filter((c) => c !== connection),
      );
      connection.close();
    }, STRIPE_WAIT_MS);
  }

  private joinStripe(link: StripedLink, connection: DataConnection): void {
    if (link.isOpen && link.stripeCount < MAX_STRIPES)
      link.addStripe(new DataConnectionLink(connection, this.opts.link));
    else connection.close();
  }

  private adopt(connection: DataConnection, dialedHere = true): Link {
    const peer = connection.peer;
    // The remote dialed again: it considers the previous link dead, so it is.
    this.links.get(peer)?.close();
    const link = new StripedLink(new DataConnectionLink(connection, this.opts.link));
    this.firstConnection.set(link, connection.connectionId);
    this.links.set(peer, link);
    if (dialedHere) void this.addStripes(link, connection);
    const early = `${peer}\n${connection.connectionId}`;
    for (const stripe of this.earlyStripes.get(early) ?? []) this.joinStripe(link, stripe);
    this.earlyStripes.delete(early);
    link.onClose((reason) => {
      if (this.links.get(peer) === link) this.links.delete(peer);
      this.emit({ type: 'link-closed', peer, reason });
    });
    this.emit({ type: 'link-open', peer });
    const waiters = this.waiters.get(peer);
    if (waiters) {
      this.waiters.delete(peer);
      for (const w of waiters) w.resolve(link);
    }
    return link;
  }

  /** The dialing side: decide the stripe count and dial the stripes beyond the first, all at once. */
  private async addStripes(link: StripedLink, first: DataConnection): Promise<void> {
    const setting = this.opts.stripes ?? 'auto';
    const rtt = setting === 'auto' ? await firstRttMs(first) : null;
    const wanted = stripesFor(setting, rtt);
    await Promise.all(
      Array.from({ length: wanted - 1 }, async () => {
        if (!link.isOpen || this.destroyed) return;
        const connection = this.peerClient.connect(link.peer, {
          reliable: true,
          serialization: 'raw',
          label: STRIPE_LABEL,
          metadata: { stripeOf: first.connectionId },
        });
        if (!connection) return;
        const opened = await new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(false), DIAL_ATTEMPT_MS);
          connection.once('open', () => {
            clearTimeout(timer);
            resolve(true);
          });
          connection.once('error', () => resolve(false));
          connection.once('close', () => resolve(false));
        });
        if (opened && link.isOpen) link.addStripe(new DataConnectionLink(connection, this.opts.link));
        else connection.close();
      }),
    );
  }

  private emit(event: PeerMeshEvent): void {
    this.listeners.emit(event);
  }
}

/** The first connection's RTT (ICE's checks measured it by the time it opened), waiting up to RTT_WAIT_MS. */
async function firstRttMs(connection: DataConnection): Promise<number | null> {
  const end = performance.now() + RTT_WAIT_MS;
  for (;;) {
    const pc = connection.peerConnection as RTCPeerConnection | undefined;
    if (!pc || pc.connectionState === 'closed') return null;
    const rtt = selectedPairRttMs((await pc.getStats()) as unknown as StatsLike);
    if (rtt !== null || performance.now() > end) return rtt;
    await new Promise((r) => setTimeout(r, 200));
  }
}
