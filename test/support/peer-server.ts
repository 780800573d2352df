/**
 * A PeerJS signaling server (the `peer` package's `PeerServer`) on a free port of 127.0.0.1, laid out
 * like the coordinator's: path `/peer`, key `peerjs`, so pages connect with the same options.
 *
 * It also announces departures: when a client's signaling socket closes, every other client gets a
 * PeerJS `LEAVE` from it, on which PeerJS closes its connections to that peer. A tab that is closed
 * or crashes cannot reliably say goodbye itself (its last packets race the renderer's teardown, see
 * web/net/README.md), but its WebSocket is closed by the browser's network process at once, so the
 * server knows within milliseconds — whereas the neighbours' ICE consent checks take ~5 s.
 */
import type { Server } from 'node:http';
import { PeerServer, type IClient } from 'peer';

export interface TestPeerServer {
  readonly host: string;
  readonly port: number;
  readonly path: string;
  readonly key: string;
  close(): Promise<void>;
}

/** Make a PeerServer app tell every client when another one disconnects. */
export function announceDepartures(app: ReturnType<typeof PeerServer>): void {
  const clients = new Map<string, IClient>();
  app.on('connection', (client) => clients.set(client.getId(), client));
  app.on('disconnect', (client) => {
    const id = client.getId();
    if (clients.get(id) === client) clients.delete(id);
    for (const other of clients.values()) other.send({ type: 'LEAVE', src: id, dst: other.getId() });
  });
}

export async function startPeerServer(opts: { announceDepartures?: boolean } = {}): Promise<TestPeerServer> {
  const server = await new Promise<Server>((resolve, reject) => {
    const app = PeerServer({ host: '127.0.0.1', port: 0, path: '/peer', key: 'peerjs', allow_discovery: false }, (s) =>
      resolve(s as Server),
    );
    app.on('error', (err: Error) => reject(err));
    if (opts.announceDepartures ?? true) announceDepartures(app);
  });
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('peer server has no port');
  return {
    host: '127.0.0.1',
    port: address.port,
    path: '/peer',
    key: 'peerjs',
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
