/**
 * `SimWorker`: a plain WebSocket client speaking the control protocol. It keeps every server message in
 * an inbox, and `next(type | predicate)` takes the first matching one (waiting for it). It computes
 * nothing: tests drive it message by message (sim-trainer.ts drives whole rounds).
 */
import { createHash } from 'node:crypto';
import WebSocket from 'ws';

/**
 * The parameter hash a simulated worker reports after `step` when it does not upload checkpoints:
 * equal across ranks, different per step, 64 hex digits like `hashParams` (SHA-256 of the step's
 * decimal digits, so it is never `NO_HASH`).
 */
export function simulatedHash(step: number): string {
  return createHash('sha256').update(`simulated step ${step}`).digest('hex');
}

/** A server message: `{v, type, ...}` (typed loosely here so the helper does not pin the protocol). */
export type ServerMsg = { type: string; [key: string]: any };
type MessageMatcher = string | ((msg: ServerMsg) => boolean);

function matches(matcher: MessageMatcher | undefined, msg: ServerMsg): boolean {
  if (matcher === undefined) return true;
  return typeof matcher === 'string' ? msg.type === matcher : matcher(msg);
}

export interface CloseInfo {
  code: number;
  reason: string;
}

/**
 * A plain WebSocket control client. It computes nothing: tests drive it message by message.
 * `workerId` / `runId` are filled from the `welcome` message by `join()`.
 */
export class SimWorker {
  readonly inbox: ServerMsg[] = [];
  /** Every message received, in order (the inbox minus nothing). */
  readonly received: ServerMsg[] = [];
  readonly closed: Promise<CloseInfo>;
  runId: string | null = null;
  workerId: string | null = null;
  /** The reconnect secret of the last welcome. */
  secret: string | null = null;
  private waiters: { matcher?: MessageMatcher; resolve: (msg: ServerMsg) => void }[] = [];
  private closeInfo: CloseInfo | null = null;
  /** When set, messages go to this handler instead of the inbox (still recorded in `received`). */
  onMessage: ((msg: ServerMsg) => void) | null = null;
  /** Keep every message in `received` (turn off for long-running load to bound memory). */
  keepReceived = true;

  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data: WebSocket.RawData) => {
      let msg: ServerMsg;
      try {
        msg = JSON.parse(data.toString());
      } catch {
        msg = { type: '__unparsable', text: data.toString() };
      }
      if (this.keepReceived) this.received.push(msg);
      if (this.onMessage) {
        this.onMessage(msg);
        return;
      }
      const waiter = this.waiters.findIndex((w) => matches(w.matcher, msg));
      if (waiter >= 0) {
        const [w] = this.waiters.splice(waiter, 1);
        w.resolve(msg);
      } else {
        this.inbox.push(msg);
      }
    });
    this.closed = new Promise((resolveClose) => {
      socket.on('close', (code, reason) => {
        this.closeInfo = { code, reason: reason.toString() };
        resolveClose(this.closeInfo);
      });
    });
    socket.on('error', () => {});
  }

  /** `localAddress`: the loopback address to connect from (e.g. 127.0.0.2, a second "client"); `origin`: the Origin header. */
  static connect(
    wsUrl: string,
    opts: { timeoutMs?: number; localAddress?: string; origin?: string } = {},
  ): Promise<SimWorker> {
    return new Promise((resolveWorker, reject) => {
      const socket = new WebSocket(wsUrl, {
        handshakeTimeout: opts.timeoutMs ?? 10_000,
        ...(opts.localAddress ? { localAddress: opts.localAddress } : {}),
        ...(opts.origin ? { origin: opts.origin } : {}),
      });
      const worker = new SimWorker(socket);
      socket.once('open', () => resolveWorker(worker));
      socket.once('error', reject);
    });
  }

  get isClosed(): boolean {
    return this.closeInfo !== null;
  }

  /** Sends `{v: 1, ...msg}` as JSON. */
  send(msg: Record<string, unknown>): void {
    this.socket.send(JSON.stringify({ v: 1, ...msg }));
  }

  sendRaw(data: string | Buffer): void {
    this.socket.send(data);
  }

  /** Takes the first message matching `matcher` from the inbox, or waits for one. */
  next(matcher?: MessageMatcher, timeoutMs = 10_000): Promise<ServerMsg> {
    const index = this.inbox.findIndex((m) => matches(matcher, m));
    if (index >= 0) return Promise.resolve(this.inbox.splice(index, 1)[0]);
    return new Promise((resolveMsg, reject) => {
      const waiter = {
        matcher,
        resolve: (msg: ServerMsg) => {
          clearTimeout(timer);
          resolveMsg(msg);
        },
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(
          new Error(
            `SimWorker ${this.workerId ?? '?'}: no message matching ${typeof matcher === 'function' ? 'predicate' : (matcher ?? 'any')} within ${timeoutMs} ms; got: ${JSON.stringify(this.received.slice(-5))}`,
          ),
        );
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /** Removes and returns every inbox message of `type` (or all). */
  drain(type?: string): ServerMsg[] {
    const taken = this.inbox.filter((m) => type === undefined || m.type === type);
    const kept = this.inbox.filter((m) => !(type === undefined || m.type === type));
    this.inbox.length = 0;
    this.inbox.push(...kept);
    return taken;
  }

  /** Sends `hello` and waits for `welcome`; remembers runId and workerId. */
  async join(
    opts: {
      peerId?: string;
      haveStep?: number | null;
      haveHash?: string | null;
      pending?: { step: number; hash: string } | null;
      workerId?: string | null;
      runId?: string | null;
      secret?: string | null;
      invite?: string;
      /** The GPU it claims (default a simulated one). */
      adapter?: { vendor: string; architecture: string; description: string };
      /** The kernels report its hello carries (default none, as an older tab). */
      kernels?: Record<string, unknown>;
    } = {},
  ): Promise<ServerMsg> {
    this.send({
      type: 'hello',
      runId: opts.runId ?? null,
      workerId: opts.workerId ?? null,
      ...(opts.secret ? { secret: opts.secret } : {}),
      ...(opts.invite ? { invite: opts.invite } : {}),
      peerId: opts.peerId ?? `peer-${Math.random().toString(36).slice(2, 10)}`,
      adapter: opts.adapter ?? { vendor: 'sim', architecture: 'none', description: 'simulated worker' },
      haveStep: opts.haveStep ?? null,
      haveHash: opts.haveHash ?? null,
      ...(opts.pending ? { pending: opts.pending } : {}),
      ...(opts.kernels ? { kernels: opts.kernels } : {}),
    });
    const welcome = await this.next((m) => m.type === 'welcome' || m.type === 'error' || m.type === 'done');
    if (welcome.type !== 'welcome') throw new Error(`hello refused: ${JSON.stringify(welcome)}`);
    this.runId = welcome.runId;
    this.workerId = welcome.workerId;
    this.secret = welcome.secret ?? null;
    return welcome;
  }

  /** A heartbeat, with optional fields (peerRttMs, peerLinks, iceError). */
  heartbeat(extra: Record<string, unknown> = {}): void {
    this.send({ type: 'heartbeat', runId: this.runId, workerId: this.workerId, ...extra });
  }

  ready(round: number): void {
    this.send({ type: 'ready', runId: this.runId, workerId: this.workerId, round });
  }

  /** Reports `step` with `simulatedHash(step)` unless overridden. */
  report(fields: {
    round: number;
    rank: number;
    step: number;
    hash?: string;
    lossSum?: number;
    samples?: number;
    computeMs?: number;
    wireBytes?: number;
  }): void {
    this.send({
      type: 'step_report',
      runId: this.runId,
      workerId: this.workerId,
      round: fields.round,
      rank: fields.rank,
      step: fields.step,
      hash: fields.hash ?? simulatedHash(fields.step),
      lossSum: fields.lossSum ?? 1,
      samples: fields.samples ?? 1,
      computeMs: fields.computeMs ?? 1,
      ...(fields.wireBytes === undefined ? {} : { wireBytes: fields.wireBytes }),
    });
  }

  goodbye(): void {
    this.send({ type: 'goodbye', runId: this.runId, workerId: this.workerId });
  }

  close(): Promise<CloseInfo> {
    if (!this.isClosed) this.socket.close(1000, 'bye');
    return this.closed;
  }

  /** Drops the TCP connection without a close frame (a crashed tab). */
  terminate(): Promise<CloseInfo> {
    if (!this.isClosed) this.socket.terminate();
    return this.closed;
  }
}
