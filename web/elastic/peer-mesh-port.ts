/**
 * The loop's `MeshPort` over `PeerMesh` (PeerJS through the coordinator's signaling server).
 *
 * The tab keeps one peer id for its whole life, because the coordinator learns it from `hello` and
 * hands it to the other ranks. When the signaling connection is lost (the coordinator restarted,
 * taking its PeerServer with it) the mesh is re-opened under the same id, retrying with backoff until
 * the server is back; a ring connect in the meantime waits for that (within its own deadline).
 * Re-opening closes the old links, which only ends a round the coordinator's restart ended anyway.
 * Once a round's ring is up, the links two places away open in the background (web/net/spare-links.ts).
 */
import type { WorldEntry } from '../../core/protocol/coordinator-messages';
import { groupPartners } from '../../core/training/group-geometry';
import type { GroupLinks } from '../net/group-allreduce';
import type { Ring } from '../net/link';
import { PeerMesh, type PeerMeshOptions } from '../net/peer-mesh';
import { linkStats, type LinkStats } from '../net/link-rtt';
import { spareRanks } from '../net/spare-links';
import { backoffDelay } from '../net/coordinator-client';
import { bounded } from './async-tools';
import type { MeshPort } from './ports';

export class PeerMeshPort implements MeshPort {
  private mesh: PeerMesh | null;
  private reopening: Promise<PeerMesh> | null = null;
  /** The current round's spare links (spare-links.ts): kept open, but not the round's links, so not in `linkStats`. */
  private spares = new Set<string>();
  private closed = false;

  private constructor(
    mesh: PeerMesh,
    private readonly opts: PeerMeshOptions,
    private readonly log: (level: 'info' | 'warn', text: string) => void,
  ) {
    this.mesh = mesh;
    this.watch(mesh);
  }

  /** Register a fresh random id with the signaling server at the page's origin (or `opts`). */
  static async open(
    opts: Partial<PeerMeshOptions> = {},
    log: (level: 'info' | 'warn', text: string) => void = () => {},
  ): Promise<PeerMeshPort> {
    const full: PeerMeshOptions = {
      id: opts.id ?? `tab-${crypto.randomUUID().replace(/-/g, '').slice(0, 20)}`,
      host: opts.host ?? location.hostname,
      port: opts.port ?? Number(location.port || (location.protocol === 'https:' ? 443 : 80)),
      secure: opts.secure ?? location.protocol === 'https:',
      ...opts,
    };
    return new PeerMeshPort(await PeerMesh.open(full), full, log);
  }

  get peerId(): string {
    return this.opts.id;
  }

  async connectRing(
    world: readonly WorldEntry[],
    rank: number,
    opts: { round: number; signal: AbortSignal; timeoutMs: number },
  ): Promise<Ring> {
    const mesh =
      this.mesh ??
      (await bounded(this.reopen(), {
        signal: opts.signal,
        timeoutMs: opts.timeoutMs,
        what: 'reconnecting to the signaling server',
      }));
    const members = world.map((w) => w.peerId);
    // Links to tabs that left the round are of no further use; links to members are reused.
    mesh.retain(members);
    const ring = await bounded(mesh.ring(members, { timeoutMs: opts.timeoutMs }), {
      signal: opts.signal,
      what: `ring of round ${opts.round}`,
    });
    // In the background: the links a lost neighbour's round will need (spare-links.ts), one attempt each.
    // One that does not open costs nothing but that attempt, which is all a round that needs the link
    // meanwhile waits for (peer-mesh.ts `dialShared`) before it dials again.
    const spares = spareRanks(members.length, rank).map((r) => members[r]!);
    this.spares = new Set(spares);
    if (spares.length > 0) void mesh.connect(spares, { timeoutMs: mesh.firstAttemptMs }).catch(() => {});
    return ring;
  }

  async groupLinks(
    world: readonly WorldEntry[],
    rank: number,
    groups: readonly number[],
    n: number,
    opts: { round: number; signal: AbortSignal; timeoutMs: number },
  ): Promise<GroupLinks> {
    const mesh = this.mesh;
    if (!mesh) throw new Error(`round ${opts.round}: the signaling connection is gone`);
    const members = world.map((w) => w.peerId);
    const layout = { sizes: [...groups] };
    const { ring, cross } = groupPartners(layout, n, rank);
    // A partner that is also a spare is one of the round's links (and in `linkStats`).
    for (const r of [...ring, ...cross]) this.spares.delete(members[r]!);
    await bounded(
      mesh.connect(
        [...ring, ...cross].map((r) => members[r]),
        { timeoutMs: opts.timeoutMs },
      ),
      { signal: opts.signal, what: `group links of round ${opts.round}` },
    );
    return mesh.groupLinks(members, rank, layout);
  }

  /**
   * The open links' RTT (the MAX over them; null when there is none: world of 1, waiting, or no stats
   * yet) and selected ICE candidate types, from one `getStats()` per link. The mesh holds links to the
   * current round's members only (`retain`): its ring neighbours and, in a round in groups, its partners
   * of the grouped allreduce, whose RTTs feed the coordinator's topology planner; and its spare links,
   * left out here (the admin page shows the ring's RTT).
   */
  async linkStats(): Promise<LinkStats> {
    const mesh = this.mesh;
    if (!mesh) return { peerRttMs: null, peerLinks: [] };
    return linkStats(
      mesh.connectedPeers.flatMap((peer) => {
        if (this.spares.has(peer)) return [];
        const link = mesh.link(peer);
        return link ? [{ peer, link }] : [];
      }),
    );
  }

  close(): void {
    this.closed = true;
    this.mesh?.destroy();
    this.mesh = null;
  }

  private watch(mesh: PeerMesh): void {
    mesh.on((event) => {
      if (event.type === 'signaling-lost' && this.mesh === mesh && !this.closed) {
        this.log('warn', `signaling lost (${event.reason}); re-registering ${this.opts.id}`);
        this.mesh = null;
        mesh.destroy();
        void this.reopen().catch(() => {});
      }
    });
  }

  private reopen(): Promise<PeerMesh> {
    this.reopening ??= (async () => {
      for (let attempt = 0; !this.closed; attempt++) {
        try {
          const mesh = await PeerMesh.open({ ...this.opts, openTimeoutMs: 5000 });
          if (this.closed) {
            mesh.destroy();
            break;
          }
          this.mesh = mesh;
          this.watch(mesh);
          this.log('info', `re-registered ${this.opts.id} with the signaling server`);
          return mesh;
        } catch (err) {
          if (attempt % 10 === 0) this.log('warn', `signaling server not reachable yet: ${(err as Error).message}`);
          await new Promise((r) => setTimeout(r, backoffDelay(attempt, 200, 3000)));
        }
      }
      throw new Error('mesh closed');
    })().finally(() => {
      this.reopening = null;
    });
    return this.reopening;
  }
}
