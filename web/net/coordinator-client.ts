/**
 * The tab's control channel to the coordinator: one WebSocket to `/ws`, the protocol's hello/welcome
 * handshake, heartbeats, and reconnection with backoff, so a coordinator that restarts (or a network
 * blip) sees the tab again with the state it holds (`hello.haveStep/haveHash/pending` are asked for
 * at every (re)connect). Only `stop()`, `goodbye()` or the coordinator's final word ends the
 * reconnecting: the next attempt is scheduled before any listener hears of the close, and a listener
 * or a `hello()` that throws is logged as an error and the client goes on.
 *
 * Every incoming frame is validated with the protocol's zod schemas (`parseServerMessage`); frames
 * that fail are logged and dropped, never handed to the training loop. Outgoing messages are sent
 * only while welcomed: a message for a round that the disconnect ended is worthless after a
 * reconnect (the coordinator closed that round), so it is dropped rather than queued.
 *
 * `goodbye()` sends synchronously (for `pagehide`, where no later task runs) and closes the socket.
 */
import { PROTOCOL_VERSION } from '../../core/protocol/control-fields';
import type { ClientMessage, HelloMessage } from '../../core/protocol/tab-messages';
import { CloseCode, type ServerMessage } from '../../core/protocol/coordinator-messages';
import { parseServerMessage } from '../../core/protocol/control-parse';
import type { JobPublic } from '../../core/training/job';

/** The part of the DOM `WebSocket` this client uses (the `ws` package's WebSocket fits in Node tests). */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  // biome-ignore lint/suspicious/noExplicitAny: the DOM WebSocket and the `ws` package type their events differently; both must fit
  onopen: ((ev: any) => void) | null;
  // biome-ignore lint/suspicious/noExplicitAny: the DOM WebSocket and the `ws` package type their events differently; both must fit
  onmessage: ((ev: { data: any }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  // biome-ignore lint/suspicious/noExplicitAny: the DOM WebSocket and the `ws` package type their events differently; both must fit
  onerror: ((ev: any) => void) | null;
}
export type WebSocketFactory = (url: string) => WebSocketLike;

const WS_OPEN = 1;

/** What the tab holds, asked for at every hello. */
export type HelloState = Pick<HelloMessage, 'peerId' | 'adapter' | 'kernels' | 'haveStep' | 'haveHash' | 'pending'>;

/** A client message without the fields the client fills in (`v`, `runId`, `workerId`). */
export type OutgoingMessage = ClientMessage extends infer M
  ? M extends ClientMessage
    ? Omit<M, 'v' | 'runId' | 'workerId'>
    : never
  : never;

export type ConnectionPhase = 'connecting' | 'handshaking' | 'welcomed' | 'backoff' | 'stopped';

export interface CoordinatorClientOptions {
  /** The `/ws` URL; default: `/ws` on the page's origin. */
  url?: string;
  /** Build the hello fields; called at every (re)connect. */
  hello(): HelloState;
  /** A validated server message (welcome included, after the client recorded it). */
  onMessage(msg: ServerMessage): void;
  /** Optional extra heartbeat fields (e.g. the ring links' RTT), called once per heartbeat; must not block. */
  heartbeatFields?(): Pick<Extract<OutgoingMessage, { type: 'heartbeat' }>, 'peerRttMs' | 'peerLinks' | 'iceError'>;
  /** The socket closed (before any reconnect); the round it was in is over from this tab's view. */
  onDisconnect?(info: { code: number; reason: string; reconnecting: boolean }): void;
  onPhase?(phase: ConnectionPhase): void;
  log?(level: 'info' | 'warn' | 'error', text: string): void;
  /** Default: the global WebSocket. */
  createSocket?: WebSocketFactory;
  /** First reconnect delay (ms), doubled per failed attempt up to `maxBackoffMs`, ±20 % jitter. */
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** Give up an attempt whose socket did not open / was not welcomed within this long. Default 10 s. */
  handshakeTimeoutMs?: number;
  /** Heartbeat period before a welcome told the job's (ms). */
  defaultHeartbeatMs?: number;
  /** Random source for jitter (tests pass a fixed one). */
  random?: () => number;
  /** The invite token to join with; default: the page URL's `?invite=` (none: no invite). */
  invite?: string | null;
}

/** The page URL's `?invite=` token, or null. */
export function inviteFromPage(loc: { search: string } | undefined = globalThis.location): string | null {
  if (!loc) return null;
  const token = new URLSearchParams(loc.search).get('invite');
  return token && token.length <= 128 ? token : null;
}

/** Backoff before reconnect attempt `attempt` (0-based): initial·2^attempt, capped, with ±20 % jitter. */
export function backoffDelay(
  attempt: number,
  initialMs: number,
  maxMs: number,
  random: () => number = Math.random,
): number {
  const base = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 30));
  return Math.round(base * (0.8 + 0.4 * random()));
}

/** What a thrown value says, for the log (an `Error`'s message, anything else as a string). */
function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Close codes after which reconnecting is pointless: the coordinator is done with this tab. */
const FINAL_CLOSE_CODES: ReadonlySet<number> = new Set([CloseCode.kicked, CloseCode.jobOver, CloseCode.noInvite]);

export function defaultCoordinatorUrl(loc: { protocol: string; host: string } = location): string {
  return `${loc.protocol === 'https:' ? 'wss:' : 'ws:'}//${loc.host}/ws`;
}

export class CoordinatorClient {
  runId: string | null = null;
  workerId: string | null = null;
  job: JobPublic | null = null;
  private socket: WebSocketLike | null = null;
  private phaseValue: ConnectionPhase = 'stopped';
  private attempt = 0;
  private stopped = true;
  private heartbeatTimer: ReturnType<typeof setInterval> | null = null;
  private reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  private handshakeTimer: ReturnType<typeof setTimeout> | null = null;
  /** Set when the coordinator refused our id: the next hello comes as a new worker. */
  private forgetWorkerId = false;
  /** The reconnect secret of the last welcome (proves the worker id is ours when we say hello again). */
  private secret: string | null = null;
  private readonly invite: string | null;
  private readonly url: string;
  private readonly createSocket: WebSocketFactory;
  private readonly random: () => number;
  /** Frames dropped because they failed validation (for tests and the UI). */
  invalidFrames = 0;

  constructor(private readonly opts: CoordinatorClientOptions) {
    this.url = opts.url ?? defaultCoordinatorUrl();
    this.createSocket = opts.createSocket ?? ((url) => new WebSocket(url) as unknown as WebSocketLike);
    this.random = opts.random ?? Math.random;
    this.invite = opts.invite === undefined ? inviteFromPage() : opts.invite;
  }

  get phase(): ConnectionPhase {
    return this.phaseValue;
  }

  get welcomed(): boolean {
    return this.phaseValue === 'welcomed';
  }

  /** Connect (and keep reconnecting until `stop()`/`goodbye()` or a final close). */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.attempt = 0;
    this.connect();
  }

  /**
   * Send a message with `v`, `runId` and `workerId` filled in. Returns false (and drops it) when not
   * welcomed: a reconnect begins a new relationship in which old round messages mean nothing.
   */
  send(body: OutgoingMessage): boolean {
    const socket = this.socket;
    if (!socket || socket.readyState !== WS_OPEN || !this.welcomed || !this.runId || !this.workerId) return false;
    const msg = { v: PROTOCOL_VERSION, ...body, runId: this.runId, workerId: this.workerId };
    try {
      socket.send(JSON.stringify(msg));
      return true;
    } catch (err) {
      this.opts.log?.('warn', `send ${body.type} failed: ${(err as Error).message}`);
      return false;
    }
  }

  /**
   * Say goodbye and stop, synchronously: `send` hands the frame to the browser before `close`, and no
   * later task is needed (a `pagehide` handler gets none). The coordinator closes the round at once.
   */
  goodbye(): void {
    if (this.welcomed) this.send({ type: 'goodbye' });
    this.stop(1000, 'goodbye');
  }

  /** Close without goodbye and stop reconnecting. */
  stop(code = 1000, reason = 'stopped'): void {
    this.stopped = true;
    this.clearTimers();
    const socket = this.socket;
    this.socket = null;
    if (socket) {
      this.detach(socket);
      try {
        socket.close(code, reason);
      } catch {
        // Already closed.
      }
    }
    this.setPhase('stopped');
  }

  private connect(): void {
    if (this.stopped) return;
    this.clearTimers();
    this.setPhase('connecting');
    let socket: WebSocketLike;
    try {
      socket = this.createSocket(this.url);
    } catch (err) {
      this.opts.log?.('warn', `cannot open ${this.url}: ${(err as Error).message}`);
      this.scheduleReconnect();
      return;
    }
    this.socket = socket;
    const handshakeMs = this.opts.handshakeTimeoutMs ?? 10_000;
    this.handshakeTimer = setTimeout(() => {
      this.opts.log?.('warn', `no welcome from the coordinator within ${handshakeMs} ms; reconnecting`);
      this.dropSocket(socket, 4000, 'handshake timeout');
    }, handshakeMs);
    socket.onopen = () => {
      if (socket !== this.socket) return;
      this.setPhase('handshaking');
      let state: HelloState;
      try {
        state = this.opts.hello();
      } catch (err) {
        // No hello to send: try again after the backoff rather than wait out the handshake timeout.
        this.opts.log?.('error', `cannot build hello: ${errorText(err)}`);
        this.dropSocket(socket, 4000, 'no hello');
        return;
      }
      const hello: HelloMessage = {
        v: PROTOCOL_VERSION,
        type: 'hello',
        runId: this.runId,
        workerId: this.forgetWorkerId ? null : this.workerId,
        ...(!this.forgetWorkerId && this.workerId && this.secret ? { secret: this.secret } : {}),
        ...(this.invite ? { invite: this.invite } : {}),
        peerId: state.peerId,
        adapter: state.adapter,
        ...(state.kernels ? { kernels: state.kernels } : {}),
        haveStep: state.haveStep,
        haveHash: state.haveHash,
        ...(state.pending ? { pending: state.pending } : {}),
      };
      this.forgetWorkerId = false;
      socket.send(JSON.stringify(hello));
    };
    socket.onmessage = (ev) => {
      if (socket !== this.socket) return;
      this.receive(ev.data);
    };
    socket.onerror = () => {
      // A close event always follows; reconnecting happens there.
    };
    socket.onclose = (ev) => {
      if (socket !== this.socket) return;
      this.socketClosed(ev.code, ev.reason);
    };
  }

  private receive(data: unknown): void {
    if (typeof data !== 'string') {
      this.invalidFrames++;
      this.opts.log?.('warn', 'dropped a binary frame on the control socket');
      return;
    }
    const parsed = parseServerMessage(data);
    if (!parsed.ok) {
      this.invalidFrames++;
      this.opts.log?.('warn', `dropped an invalid coordinator message (${parsed.code}): ${parsed.message}`);
      return;
    }
    const msg = parsed.msg;
    if (msg.type === 'welcome') {
      this.runId = msg.runId;
      this.workerId = msg.workerId;
      this.secret = msg.secret ?? null;
      this.job = msg.job;
      this.attempt = 0;
      if (this.handshakeTimer !== null) clearTimeout(this.handshakeTimer);
      this.handshakeTimer = null;
      this.setPhase('welcomed');
      this.startHeartbeats(msg.job.heartbeatMs);
    } else if (msg.type === 'error') {
      this.opts.log?.('warn', `coordinator error ${msg.code}: ${msg.message}`);
      if (msg.code === 'id_in_use' || msg.code === 'forged_worker') this.forgetWorkerId = true;
      if (msg.code === 'job_done' || msg.code === 'job_failed' || msg.code === 'kicked') this.stopped = true;
    }
    this.opts.onMessage(msg);
  }

  /** Send a heartbeat now, with `heartbeatFields()` (false when not welcomed). */
  heartbeat(): boolean {
    return this.send({ type: 'heartbeat', ...this.opts.heartbeatFields?.() });
  }

  private startHeartbeats(periodMs: number): void {
    if (this.heartbeatTimer !== null) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = setInterval(() => this.heartbeat(), Math.max(10, periodMs));
  }

  private socketClosed(code: number, reason: string): void {
    const socket = this.socket;
    if (socket) this.detach(socket);
    this.socket = null;
    this.clearTimers();
    if (FINAL_CLOSE_CODES.has(code)) this.stopped = true;
    if (code === CloseCode.replaced) this.forgetWorkerId = true;
    const reconnecting = !this.stopped;
    this.opts.log?.(
      reconnecting ? 'warn' : 'info',
      `coordinator socket closed (${code}${reason ? ` ${reason}` : ''})${reconnecting ? '; reconnecting' : ''}`,
    );
    // The reconnect is scheduled first: a listener that throws (a page's status callback) must not
    // leave the tab disconnected for good.
    if (reconnecting) this.scheduleReconnect();
    else this.setPhase('stopped');
    this.notify('onDisconnect', () => this.opts.onDisconnect?.({ code, reason, reconnecting }));
  }

  /** Run a listener; one that throws is logged as an error, and the client goes on. */
  private notify(what: string, listener: () => void): void {
    try {
      listener();
    } catch (err) {
      this.opts.log?.('error', `${what} listener failed: ${errorText(err)}`);
    }
  }

  /** Close a socket we gave up on and go through the same path as a close from the other side. */
  private dropSocket(socket: WebSocketLike, code: number, reason: string): void {
    if (socket !== this.socket) return;
    try {
      socket.close(code === 4000 ? 1000 : code, reason);
    } catch {
      // Already closing.
    }
    this.socketClosed(code, reason);
  }

  private scheduleReconnect(): void {
    this.setPhase('backoff');
    const delay = backoffDelay(
      this.attempt++,
      this.opts.initialBackoffMs ?? 250,
      this.opts.maxBackoffMs ?? 5000,
      this.random,
    );
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connect();
    }, delay);
  }

  private detach(socket: WebSocketLike): void {
    socket.onopen = null;
    socket.onmessage = null;
    socket.onclose = null;
    // A no-op rather than null: Node's `ws` throws on an 'error' event nobody listens to.
    socket.onerror = () => {};
  }

  private clearTimers(): void {
    if (this.heartbeatTimer !== null) clearInterval(this.heartbeatTimer);
    if (this.reconnectTimer !== null) clearTimeout(this.reconnectTimer);
    if (this.handshakeTimer !== null) clearTimeout(this.handshakeTimer);
    this.heartbeatTimer = this.reconnectTimer = this.handshakeTimer = null;
  }

  private setPhase(phase: ConnectionPhase): void {
    if (phase === this.phaseValue) return;
    this.phaseValue = phase;
    this.opts.onPhase?.(phase);
  }
}
