/**
 * The coordinator client against a real WebSocket server in this process (the `ws` package), with
 * the server scripted message by message: handshake, validation, heartbeats, reconnect with the held
 * state, final close codes, goodbye.
 */
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { jobPublic, parseJobSpec } from '../../../../core/training/job';
import type { ClientMessage } from '../../../../core/protocol/tab-messages';
import { CloseCode, type ServerMessage } from '../../../../core/protocol/coordinator-messages';
import { parseClientMessage } from '../../../../core/protocol/control-parse';
import {
  backoffDelay,
  CoordinatorClient,
  type HelloState,
  type WebSocketLike,
} from '../../../../web/net/coordinator-client';

const job = jobPublic(parseJobSpec({ model: 'tiny-mlp', heartbeatMs: 40 }), 300);

interface ServerSide {
  url: string;
  /** Connections in order of arrival, each with its parsed messages. */
  conns: { socket: WebSocket; messages: ClientMessage[]; raw: string[] }[];
  nextMessage(conn: number, type: ClientMessage['type']): Promise<ClientMessage>;
  nextConnection(index: number): Promise<void>;
  close(): Promise<void>;
}

async function startServer(): Promise<ServerSide> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((r) => wss.once('listening', () => r()));
  const conns: ServerSide['conns'] = [];
  const waiters: (() => void)[] = [];
  const wake = () =>
    waiters.splice(0).forEach((w) => {
      w();
    });
  wss.on('connection', (socket) => {
    const conn = { socket, messages: [] as ClientMessage[], raw: [] as string[] };
    conns.push(conn);
    socket.on('message', (data) => {
      const text = data.toString();
      conn.raw.push(text);
      const parsed = parseClientMessage(text);
      if (!parsed.ok) throw new Error(`client sent an invalid message: ${parsed.message}`);
      conn.messages.push(parsed.msg);
      wake();
    });
    wake();
  });
  const until = async (check: () => boolean, what: string) => {
    const deadline = Date.now() + 5000;
    while (!check()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise<void>((r) => {
        waiters.push(r);
        setTimeout(r, 100);
      });
    }
  };
  const address = wss.address() as { port: number };
  return {
    url: `ws://127.0.0.1:${address.port}/ws`,
    conns,
    async nextMessage(conn, type) {
      const seen = 0;
      let found: ClientMessage | undefined;
      await until(() => {
        const list = conns[conn]?.messages ?? [];
        found = list.slice(seen).find((m) => m.type === type);
        return !!found;
      }, `${type} on connection ${conn}`);
      return found!;
    },
    nextConnection: (index) => until(() => conns.length > index, `connection ${index}`),
    close: () =>
      new Promise<void>((r) => {
        for (const c of wss.clients) c.terminate();
        wss.close(() => r());
      }),
  };
}

type ServerBody = ServerMessage extends infer M ? (M extends ServerMessage ? Omit<M, 'v'> : never) : never;

function sendTo(socket: WebSocket, msg: ServerBody | string): void {
  socket.send(typeof msg === 'string' ? msg : JSON.stringify({ v: 1, ...msg }));
}

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function makeClient(
  url: string,
  hello: () => HelloState,
  extra: Partial<ConstructorParameters<typeof CoordinatorClient>[0]> = {},
) {
  const received: ServerMessage[] = [];
  const disconnects: { code: number; reconnecting: boolean }[] = [];
  const logs: string[] = [];
  const client = new CoordinatorClient({
    url,
    hello,
    onMessage: (m) => received.push(m),
    onDisconnect: (d) => disconnects.push({ code: d.code, reconnecting: d.reconnecting }),
    log: (_level, text) => logs.push(text),
    createSocket: (u) => new WebSocket(u) as unknown as WebSocketLike,
    initialBackoffMs: 20,
    maxBackoffMs: 100,
    random: () => 0.5,
    ...extra,
  });
  cleanups.push(() => client.stop());
  return { client, received, disconnects, logs };
}

const adapter = { vendor: 'test', architecture: 'none', description: 'unit test' };

describe('CoordinatorClient', () => {
  it('says hello with what the tab holds, records the welcome, and heartbeats at the job period', async () => {
    const server = await startServer();
    cleanups.push(() => server.close());
    const { client, received } = makeClient(server.url, () => ({
      peerId: 'peer-a',
      adapter,
      haveStep: null,
      haveHash: null,
      pending: null,
    }));
    expect(client.send({ type: 'heartbeat' })).toBe(false); // not welcomed: dropped
    client.start();
    const hello = await server.nextMessage(0, 'hello');
    expect(hello).toMatchObject({
      type: 'hello',
      runId: null,
      workerId: null,
      peerId: 'peer-a',
      haveStep: null,
      haveHash: null,
    });
    sendTo(server.conns[0].socket, { type: 'welcome', runId: 'run-1', workerId: 'w-1', job });
    const t0 = Date.now();
    await server.nextMessage(0, 'heartbeat');
    await new Promise((r) => setTimeout(r, 200));
    const beats = server.conns[0].messages.filter((m) => m.type === 'heartbeat');
    // 40 ms period over ~200+ ms: several beats, not a flood.
    expect(beats.length).toBeGreaterThanOrEqual(3);
    expect(beats.length).toBeLessThanOrEqual(Math.ceil((Date.now() - t0) / 40) + 1);
    expect(beats[0]).toEqual({ v: 1, type: 'heartbeat', runId: 'run-1', workerId: 'w-1' });
    expect(client.welcomed).toBe(true);
    expect(client.job).toEqual(job);
    expect(received.map((m) => m.type)).toEqual(['welcome']);
  });

  it('drops invalid frames without handing them on', async () => {
    const server = await startServer();
    cleanups.push(() => server.close());
    const { client, received, logs } = makeClient(server.url, () => ({
      peerId: 'peer-a',
      adapter,
      haveStep: null,
      haveHash: null,
    }));
    client.start();
    await server.nextMessage(0, 'hello');
    const socket = server.conns[0].socket;
    sendTo(socket, 'not json');
    sendTo(socket, JSON.stringify({ v: 2, type: 'train', round: 1 }));
    sendTo(socket, JSON.stringify({ v: 1, type: 'train', round: -1 }));
    sendTo(socket, JSON.stringify({ v: 1, type: 'train', round: 1, extra: true }));
    sendTo(socket, JSON.stringify({ v: 1, type: 'committed', round: 1, step: 1, epoch: 0, cursor: 0, hash: 'NOTHEX' }));
    sendTo(socket, { type: 'train', round: 3 });
    const deadline = Date.now() + 3000;
    while (received.length < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(received).toEqual([{ v: 1, type: 'train', round: 3 }]);
    expect(client.invalidFrames).toBe(5);
    expect(logs.filter((l) => l.includes('dropped an invalid')).length).toBe(5);
  });

  it('reconnects after the socket drops and says hello again with its ids and current state', async () => {
    const server = await startServer();
    cleanups.push(() => server.close());
    let state: HelloState = { peerId: 'peer-a', adapter, haveStep: null, haveHash: null, pending: null };
    const { client, disconnects } = makeClient(server.url, () => state);
    client.start();
    await server.nextMessage(0, 'hello');
    sendTo(server.conns[0].socket, { type: 'welcome', runId: 'run-1', workerId: 'w-7', job });
    await server.nextMessage(0, 'heartbeat');
    state = {
      peerId: 'peer-a',
      adapter,
      haveStep: 12,
      haveHash: '00112233aabbccdd'.repeat(4),
      pending: { step: 13, hash: '0123456789abcdef'.repeat(4) },
    };
    server.conns[0].socket.terminate(); // a coordinator crash: no close frame
    await server.nextConnection(1);
    const hello = await server.nextMessage(1, 'hello');
    expect(hello).toMatchObject({
      runId: 'run-1',
      workerId: 'w-7',
      haveStep: 12,
      haveHash: '00112233aabbccdd'.repeat(4),
      pending: { step: 13, hash: '0123456789abcdef'.repeat(4) },
    });
    expect(disconnects).toEqual([{ code: 1006, reconnecting: true }]);
    expect(client.send({ type: 'heartbeat' })).toBe(false); // not welcomed again yet
  });

  it('reconnects even when its disconnect listener throws, and logs the listener as an error', async () => {
    const server = await startServer();
    cleanups.push(() => server.close());
    const levels: string[] = [];
    const { client } = makeClient(
      server.url,
      () => ({ peerId: 'peer-a', adapter, haveStep: null, haveHash: null, pending: null }),
      {
        onDisconnect: () => {
          throw new Error('the page failed to draw');
        },
        log: (level, text) => levels.push(`${level}: ${text}`),
      },
    );
    client.start();
    await server.nextMessage(0, 'hello');
    sendTo(server.conns[0].socket, { type: 'welcome', runId: 'run-1', workerId: 'w-7', job });
    await server.nextMessage(0, 'heartbeat');
    server.conns[0].socket.terminate();
    await server.nextConnection(1);
    expect(await server.nextMessage(1, 'hello')).toMatchObject({ runId: 'run-1', workerId: 'w-7' });
    expect(levels).toContain('error: onDisconnect listener failed: the page failed to draw');
  });

  it('a hello it cannot build is logged and tried again at the next connection, not left to the handshake timeout', async () => {
    const server = await startServer();
    cleanups.push(() => server.close());
    let calls = 0;
    const levels: string[] = [];
    const { client } = makeClient(
      server.url,
      () => {
        calls++;
        if (calls === 1) throw new Error('held states unreadable');
        return { peerId: 'peer-a', adapter, haveStep: null, haveHash: null, pending: null };
      },
      { handshakeTimeoutMs: 60_000, log: (level, text) => levels.push(`${level}: ${text}`) },
    );
    client.start();
    await server.nextConnection(1);
    expect(await server.nextMessage(1, 'hello')).toMatchObject({ type: 'hello', peerId: 'peer-a' });
    expect(server.conns[0].messages).toEqual([]);
    expect(levels).toContain('error: cannot build hello: held states unreadable');
  });

  it('keeps retrying with backoff while the coordinator is down', async () => {
    const server = await startServer();
    const url = server.url;
    await server.close();
    const { client, disconnects } = makeClient(url, () => ({
      peerId: 'peer-a',
      adapter,
      haveStep: null,
      haveHash: null,
    }));
    client.start();
    const deadline = Date.now() + 3000;
    while (disconnects.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(disconnects.length).toBeGreaterThanOrEqual(3);
    expect(disconnects.every((d) => d.reconnecting)).toBe(true);
    expect(client.phase === 'backoff' || client.phase === 'connecting').toBe(true);
  });

  it('stops for good when the coordinator says the job is over', async () => {
    const server = await startServer();
    cleanups.push(() => server.close());
    const { client, disconnects } = makeClient(server.url, () => ({
      peerId: 'peer-a',
      adapter,
      haveStep: null,
      haveHash: null,
    }));
    client.start();
    await server.nextMessage(0, 'hello');
    sendTo(server.conns[0].socket, { type: 'welcome', runId: 'run-1', workerId: 'w-1', job });
    server.conns[0].socket.close(CloseCode.jobOver, 'done');
    const deadline = Date.now() + 3000;
    while (disconnects.length < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(disconnects).toEqual([{ code: CloseCode.jobOver, reconnecting: false }]);
    await new Promise((r) => setTimeout(r, 150)); // several backoff periods: no new connection
    expect(server.conns.length).toBe(1);
    expect(client.phase).toBe('stopped');
  });

  it('comes back as a new worker when the coordinator refused its id', async () => {
    const server = await startServer();
    cleanups.push(() => server.close());
    const { client } = makeClient(server.url, () => ({ peerId: 'peer-a', adapter, haveStep: null, haveHash: null }));
    client.start();
    await server.nextMessage(0, 'hello');
    sendTo(server.conns[0].socket, { type: 'welcome', runId: 'run-1', workerId: 'w-1', job });
    sendTo(server.conns[0].socket, { type: 'error', code: 'id_in_use', message: 'taken' });
    server.conns[0].socket.close(CloseCode.replaced, 'replaced');
    await server.nextConnection(1);
    expect(await server.nextMessage(1, 'hello')).toMatchObject({ runId: 'run-1', workerId: null });
  });

  it('goodbye is sent before the socket closes, and nothing reconnects', async () => {
    const server = await startServer();
    cleanups.push(() => server.close());
    const { client } = makeClient(server.url, () => ({ peerId: 'peer-a', adapter, haveStep: null, haveHash: null }));
    client.start();
    await server.nextMessage(0, 'hello');
    sendTo(server.conns[0].socket, { type: 'welcome', runId: 'run-1', workerId: 'w-1', job });
    await server.nextMessage(0, 'heartbeat');
    const closed = new Promise<number>((r) => server.conns[0].socket.once('close', (code) => r(code)));
    client.goodbye();
    expect(await closed).toBe(1000);
    expect(server.conns[0].messages.at(-1)).toEqual({ v: 1, type: 'goodbye', runId: 'run-1', workerId: 'w-1' });
    await new Promise((r) => setTimeout(r, 150));
    expect(server.conns.length).toBe(1);
  });
});

describe('backoffDelay', () => {
  it('doubles up to the cap, with jitter within ±20 %', () => {
    expect([0, 1, 2, 3, 10].map((a) => backoffDelay(a, 100, 1000, () => 0.5))).toEqual([100, 200, 400, 800, 1000]);
    expect(backoffDelay(0, 100, 1000, () => 0)).toBe(80);
    expect(backoffDelay(0, 100, 1000, () => 0.9999)).toBe(120);
  });
});
