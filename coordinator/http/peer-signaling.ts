/**
 * PeerJS signaling (the `peer` package) on the coordinator's own http server, under `/peer`.
 *
 * `ExpressPeerServer(server, options)` sets itself up when its express app is mounted (the 'mount'
 * event) and by default attaches a `ws` server to the http server, which would answer 400 to every
 * upgrade that is not its own (our `/ws` included). So we hand it a `noServer` WebSocketServer through
 * `createWebSocketServer` and route upgrades ourselves, and we mount it at the root of an express app
 * with `path: '/peer'` in its options, so its REST API answers `/peer/:key/id` and its socket lives at
 * `/peer/peerjs`. A PeerJS client then uses `{host, port, path: '/peer', key: 'peerjs'}`. express is
 * loaded from where `peer` resolves it (it is peer's dependency, not ours).
 */
import type express from 'express';
import { createRequire } from 'node:module';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { ExpressPeerServer, type IClient } from 'peer';
import { WebSocketServer, type ServerOptions } from 'ws';

export const PEER_PATH = '/peer';
export const PEER_KEY = 'peerjs';
/** Signaling messages are SDP offers/answers and ICE candidates: a few KiB. */
const PEER_MAX_PAYLOAD = 64 * 1024;

export interface PeerSignaling {
  /** Handles an HTTP request whose path is under `/peer`. */
  handleRequest(req: IncomingMessage, res: ServerResponse): void;
  /** Takes over the upgrade when it is PeerJS's socket path; returns false otherwise. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, pathname: string): boolean;
  /** Number of PeerJS clients connected. */
  readonly clientCount: number;
  close(): void;
}

export function mountPeerSignaling(server: Server): PeerSignaling {
  let socketServer: WebSocketServer | null = null;
  let socketPath = `${PEER_PATH}/peerjs`;
  const app = ExpressPeerServer(server, {
    path: PEER_PATH,
    key: PEER_KEY,
    allow_discovery: false,
    createWebSocketServer: (options: ServerOptions) => {
      socketPath = options.path ?? socketPath;
      socketServer = new WebSocketServer({ noServer: true, path: socketPath, maxPayload: PEER_MAX_PAYLOAD });
      return socketServer;
    },
  });
  // Signaling errors (a client's socket reset) are the client's problem, not a reason to crash.
  app.on('error', () => {});
  announceDepartures(app);
  const requireFromPeer = createRequire(createRequire(import.meta.url).resolve('peer'));
  const createExpressApp = requireFromPeer('express') as typeof express;
  const root = createExpressApp();
  root.disable('x-powered-by');
  root.use(app);
  if (!socketServer) throw new Error('peer: ExpressPeerServer did not create its WebSocket server');
  const wss: WebSocketServer = socketServer;

  return {
    handleRequest(req, res) {
      root(req, res);
    },
    handleUpgrade(req, socket, head, pathname) {
      if (pathname !== socketPath && pathname !== `${socketPath}/`) return false;
      wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
      return true;
    },
    get clientCount() {
      return wss.clients.size;
    },
    close() {
      for (const client of wss.clients) client.terminate();
      wss.close();
    },
  };
}

/**
 * Tell every PeerJS client when another one's signaling socket goes away (a crashed or killed tab):
 * PeerJS closes its connections to that peer on LEAVE at once, where ICE alone takes 5–7 s to notice.
 * Measured in test/browser/collectives.test.ts: crash detection went from ~6 s to ~0.3 s.
 */
function announceDepartures(app: ReturnType<typeof ExpressPeerServer>): void {
  const clients = new Map<string, IClient>();
  app.on('connection', (client: IClient) => clients.set(client.getId(), client));
  app.on('disconnect', (client: IClient) => {
    const id = client.getId();
    if (clients.get(id) === client) clients.delete(id);
    for (const other of clients.values()) other.send({ type: 'LEAVE', src: id, dst: other.getId() });
  });
}
