/**
 * The control WebSocket (`/ws`): turns sockets into machine events and executes `send`/`close`.
 *
 * Limits enforced here, before the machine: frames above `hardMaxBytes` are cut by `ws` itself
 * (close 1009) — frames between the protocol limit and that bound still reach `parseClientMessage`, so
 * an oversized message normally gets an `error {code:'too_large'}` like every other bad input; binary
 * frames are refused; each socket has a token bucket (a tab sends a heartbeat and a step report now
 * and then, not hundreds of frames a second) and a socket that keeps flooding is closed (1008); a
 * socket whose send buffer backs up (a client that does not read) is dropped.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import WebSocket, { WebSocketServer } from 'ws';
import { PROTOCOL_VERSION } from '../../core/protocol/control-fields';
import type { ClientMessage } from '../../core/protocol/tab-messages';
import type { ErrorCode } from '../../core/protocol/coordinator-messages';
import { MAX_CONTROL_MESSAGE_BYTES, parseClientMessage } from '../../core/protocol/control-parse';
import type { Event } from '../machine/machine';
import type { SocketSink } from './executor';
import type { CoordinatorMetrics } from '../admin/server-metrics';
import { clientAddress } from './socket-gate';

export interface ControlChannelOptions {
  dispatch: (event: Event) => void;
  metrics: CoordinatorMetrics;
  /** Frames larger than this are dropped by ws with close 1009. Default 4× the protocol limit. */
  hardMaxBytes?: number;
  /** Token bucket per socket: burst size and refill per second. */
  rateBurst?: number;
  ratePerSecond?: number;
  /** Frames refused for rate before the socket is closed. */
  rateStrikes?: number;
  /** Open sockets allowed; more are refused with 503 at upgrade. */
  maxSockets?: number;
  /** A socket whose unsent bytes exceed this is dropped. */
  maxBufferedBytes?: number;
  /**
   * A last look at each valid message before the machine sees it (join rate per address, reconnect
   * secrets, invites: trust.ts). A refusal is sent as `error` and closes the socket.
   */
  screen?: (addr: string, msg: ClientMessage) => ScreenResult;
}

export type ScreenResult =
  | { ok: true; msg: ClientMessage }
  | { ok: false; code: ErrorCode; closeCode: number; message: string };

const NONCE_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

function nonce(length = 10): string {
  const bytes = randomBytes(length);
  let out = '';
  for (const b of bytes) out += NONCE_ALPHABET[b % NONCE_ALPHABET.length];
  return out;
}

interface SocketEntry {
  ws: WebSocket;
  tokens: number;
  refilledAt: number;
  strikes: number;
}

export class ControlChannel implements SocketSink {
  private readonly wss: WebSocketServer;
  private readonly sockets = new Map<string, SocketEntry>();
  private nextConn = 1;
  private readonly rateBurst: number;
  private readonly ratePerSecond: number;
  private readonly rateStrikes: number;
  private readonly maxSockets: number;
  private readonly maxBufferedBytes: number;
  /** The last text sent and its UTF-8 bytes (see `send`). */
  private lastText = '';
  private lastBytes = Buffer.alloc(0);

  constructor(private readonly options: ControlChannelOptions) {
    // Generous: an honest tab sends a heartbeat a second and a report per step (tens per second at
    // most); a dropped report would stall its round, so the limit only catches floods.
    this.rateBurst = options.rateBurst ?? 1000;
    this.ratePerSecond = options.ratePerSecond ?? 500;
    this.rateStrikes = options.rateStrikes ?? 50;
    this.maxSockets = options.maxSockets ?? 10_000;
    this.maxBufferedBytes = options.maxBufferedBytes ?? 8 * 1024 * 1024;
    this.wss = new WebSocketServer({
      noServer: true,
      maxPayload: options.hardMaxBytes ?? 4 * MAX_CONTROL_MESSAGE_BYTES,
      perMessageDeflate: false,
    });
  }

  get size(): number {
    return this.sockets.size;
  }

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.sockets.size >= this.maxSockets) {
      socket.end('HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    const addr = clientAddress(req);
    this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws, addr));
  }

  private accept(ws: WebSocket, addr: string): void {
    const conn = `c${this.nextConn++}`;
    const entry: SocketEntry = { ws, tokens: this.rateBurst, refilledAt: performance.now(), strikes: 0 };
    this.sockets.set(conn, entry);
    const { dispatch, metrics } = this.options;
    ws.on('message', (data: WebSocket.RawData, isBinary: boolean) => {
      if (!this.sockets.has(conn)) return;
      metrics.framesReceived.inc();
      if (!this.takeToken(conn, entry)) return;
      if (isBinary) {
        dispatch({
          kind: 'invalid',
          conn,
          code: 'bad_message',
          message: 'binary frames are not accepted on the control channel',
        });
        return;
      }
      const text = Buffer.isBuffer(data)
        ? data.toString('utf8')
        : Array.isArray(data)
          ? Buffer.concat(data).toString('utf8')
          : Buffer.from(data).toString('utf8');
      const parsed = parseClientMessage(text);
      if (!parsed.ok) {
        dispatch({ kind: 'invalid', conn, code: parsed.code, message: parsed.message });
        return;
      }
      const screened = this.options.screen
        ? this.options.screen(addr, parsed.msg)
        : { ok: true as const, msg: parsed.msg };
      if (!screened.ok) {
        metrics.messageErrors.inc(1, { code: screened.code });
        ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'error', code: screened.code, message: screened.message }));
        this.close(conn, screened.closeCode, screened.code);
        return;
      }
      dispatch({ kind: 'message', conn, msg: screened.msg });
    });
    ws.on('error', (error: Error & { code?: string }) => {
      // ws reports an oversized frame as an error and closes with 1009; the machine never saw the frame.
      if (error.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') metrics.messageErrors.inc(1, { code: 'too_large' });
    });
    ws.on('close', () => {
      if (!this.sockets.delete(conn)) return;
      dispatch({ kind: 'disconnected', conn });
    });
    dispatch({ kind: 'connected', conn, nonce: nonce(), addr });
  }

  /** Token bucket; a socket that keeps hitting the limit is closed. */
  private takeToken(conn: string, entry: SocketEntry): boolean {
    const now = performance.now();
    entry.tokens = Math.min(this.rateBurst, entry.tokens + ((now - entry.refilledAt) / 1000) * this.ratePerSecond);
    entry.refilledAt = now;
    if (entry.tokens >= 1) {
      entry.tokens -= 1;
      return true;
    }
    entry.strikes += 1;
    this.options.metrics.messageErrors.inc(1, { code: 'rate_limited' });
    if (entry.strikes >= this.rateStrikes) this.close(conn, 1008, 'rate limit exceeded');
    return false;
  }

  send(conn: string, text: string): boolean {
    const entry = this.sockets.get(conn);
    if (!entry || entry.ws.readyState !== WebSocket.OPEN) return false;
    if (entry.ws.bufferedAmount > this.maxBufferedBytes) {
      // The client does not read; dropping it is a disconnect the machine handles like any other.
      entry.ws.terminate();
      return false;
    }
    // The same text to many sockets (the machine sends a round's `round`, ~20 kB at a world of 256, to
    // every member): encoded once and sent as a text frame from the bytes, not re-encoded per socket.
    if (text !== this.lastText) {
      this.lastText = text;
      this.lastBytes = Buffer.from(text, 'utf8');
    }
    entry.ws.send(this.lastBytes, { binary: false });
    return true;
  }

  close(conn: string, code: number, reason: string): void {
    const entry = this.sockets.get(conn);
    if (!entry) return;
    if (entry.ws.readyState === WebSocket.OPEN || entry.ws.readyState === WebSocket.CONNECTING) {
      entry.ws.close(code, reason.slice(0, 120));
      // A peer that never answers the close handshake is cut after a grace period.
      setTimeout(() => entry.ws.terminate(), 2000).unref();
    }
  }

  /** Closes every socket (shutdown) without dispatching disconnects. */
  closeAll(code = 1001, reason = 'coordinator shutting down'): void {
    const entries = [...this.sockets.values()];
    this.sockets.clear();
    for (const entry of entries) {
      try {
        entry.ws.close(code, reason);
      } catch {
        entry.ws.terminate();
      }
    }
    this.wss.close();
  }

  terminateAll(): void {
    for (const entry of this.sockets.values()) entry.ws.terminate();
  }
}
