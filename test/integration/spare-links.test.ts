/**
 * Spare links (web/net/spare-links.ts) on real peer connections: five meshes (node-datachannel, as a
 * headless worker's) on a real PeerJS signaling server form a ring; each then also links to the ranks two
 * places away. One member's mesh is really closed (its peer connections and signaling socket go), and the
 * survivors' next ring, the order without it, joins its two neighbours over the link they already had:
 * the same link object, no new dial.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WorldEntry } from '../../core/protocol/coordinator-messages';
import { installNodeGlobals } from '../../headless/node-globals';
import type { PeerMeshPort } from '../../web/elastic/peer-mesh-port';
import type { Link } from '../../web/net/link';
import type { PeerMesh } from '../../web/net/peer-mesh';
import { startPeerServer, type TestPeerServer } from '../support/peer-server';

const IDS = ['sp-a', 'sp-b', 'sp-c', 'sp-d', 'sp-e'];
const TIMEOUT_MS = 20_000;

function worldOf(ids: readonly string[]): WorldEntry[] {
  return ids.map((peerId, rank) => ({ workerId: `w-${peerId}`, peerId, rank, share: 1 / ids.length }));
}

/** The port's mesh: the test reads which links are open, which the loop's port does not expose. */
function meshOf(port: PeerMeshPort): PeerMesh {
  return (port as unknown as { mesh: PeerMesh }).mesh;
}

/** Resolves once `port` has an open link to `peer` (the spare dial runs in the background). */
function linked(port: PeerMeshPort, peer: string): Promise<Link> {
  const mesh = meshOf(port);
  const open = mesh.link(peer);
  if (open) return Promise.resolve(open);
  return new Promise((resolve) => {
    const off = mesh.on((event) => {
      const link = event.type === 'link-open' && event.peer === peer ? mesh.link(peer) : undefined;
      if (link) {
        off();
        resolve(link);
      }
    });
  });
}

/** `promise`'s value, or null once `ms` passed without it. */
async function within<T>(promise: Promise<T>, ms = 8000): Promise<T | null> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

describe('spare links on real peer connections', () => {
  let server: TestPeerServer;
  const ports = new Map<string, PeerMeshPort>();

  beforeAll(async () => {
    // PeerJS reads its WebRTC support once, as it loads: the globals first, then the mesh's module.
    installNodeGlobals();
    const { PeerMeshPort } = await import('../../web/elastic/peer-mesh-port');
    server = await startPeerServer();
    for (const id of IDS)
      ports.set(
        id,
        await PeerMeshPort.open({
          id,
          host: server.host,
          port: server.port,
          path: server.path,
          key: server.key,
          secure: false,
          stripes: 1,
          closeOnPageHide: false,
        }),
      );
  }, 30_000);

  afterAll(async () => {
    for (const port of ports.values()) port.close();
    await server?.close();
  });

  it('a lost rank’s neighbours are already linked when the survivors’ ring forms', async () => {
    const signal = new AbortController().signal;
    const world = worldOf(IDS);
    const rings = await Promise.all(
      IDS.map((id, rank) => ports.get(id)!.connectRing(world, rank, { round: 1, signal, timeoutMs: TIMEOUT_MS })),
    );
    // Round 1's ring links neighbours only: b–d (two apart) is not one of them.
    expect(rings[1]!.right).not.toBe(rings[3]!.left);
    // Every member links to the ranks two places away, both ends of each pair. A spare gets one dial
    // attempt, and on a loaded machine an attempt can stay silent: a ring start dials the missing ones again.
    let spares: (Link | null)[][] = [];
    for (let start = 1; start <= 3; start++) {
      spares = await Promise.all(
        IDS.map((id, rank) =>
          Promise.all([IDS[(rank + 2) % 5]!, IDS[(rank + 3) % 5]!].map((peer) => within(linked(ports.get(id)!, peer)))),
        ),
      );
      if (spares.flat().every((link) => link !== null)) break;
      await Promise.all(
        IDS.map((id, rank) => ports.get(id)!.connectRing(world, rank, { round: 1, signal, timeoutMs: TIMEOUT_MS })),
      );
    }
    expect(spares.flat().every((link) => link !== null)).toBe(true);
    const bToD = spares[1]![0]!;
    expect(bToD.isOpen).toBe(true);
    // The heartbeat's link stats are the round's links: two neighbours, no spares.
    const stats = await ports.get('sp-b')!.linkStats();
    expect(stats.peerLinks.map((l) => l.peer).sort()).toEqual(['sp-a', 'sp-c']);

    // Rank 2 (sp-c) is lost: its mesh really closes.
    const lost = ports.get('sp-c')!;
    ports.delete('sp-c');
    lost.close();
    const survivors = IDS.filter((id) => id !== 'sp-c');
    const next = worldOf(survivors);
    const rings2 = await Promise.all(
      survivors.map((id, rank) => ports.get(id)!.connectRing(next, rank, { round: 2, signal, timeoutMs: TIMEOUT_MS })),
    );
    // sp-b (rank 1) and sp-d (rank 2) are neighbours now, over the spare link made in round 1.
    expect(rings2[1]!.right).toBe(bToD);
    expect(rings2[1]!.right!.isOpen).toBe(true);
    // And it carries frames both ways.
    const got = new Promise<Uint8Array>((resolve) => {
      const off = rings2[2]!.left!.onMessage((bytes) => {
        off();
        resolve(new Uint8Array(bytes));
      });
    });
    rings2[1]!.right!.send(new Uint8Array([7, 1, 2]).buffer);
    expect([...(await got)]).toEqual([7, 1, 2]);
  }, 60_000);
});
