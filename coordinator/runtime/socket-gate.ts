/**
 * What a WebSocket (`/ws` or `/peer`) must pass before it is accepted, all per client address:
 * - its `Origin` is allowed (origin.ts);
 * - the address is not cooling off (the machine's penalties: too many restarts charged to it);
 * - the address has fewer than `maxSocketsPerAddress` sockets open;
 * and, for each `hello` on `/ws`, the address has not exceeded `joinsPerMinute` (a token bucket with a
 * burst of the same size). Every refusal is counted by reason (`tabswarm_ws_refused_total`).
 *
 * Behind a reverse proxy every client has the proxy's address; then raise the caps (or they bind the
 * proxy as a whole). The address is the TCP peer's, never a header a client could forge.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { checkOrigin } from './origin';

export interface SocketGateOptions {
  /** Origins allowed besides the coordinator's own (origin.ts). */
  allowedOrigins: readonly string[];
  /** Open WebSockets (control and signaling together) per client address. */
  maxSocketsPerAddress: number;
  /** `hello`s per client address per minute (burst of the same size). */
  joinsPerMinute: number;
  /** When the address is cooling off: the time it is refused until (ms), else null. */
  bannedUntil: (addr: string) => number | null;
  /** Counts refusals by reason. */
  onRefused?: (reason: RefusalReason) => void;
  now?: () => number;
}

export type RefusalReason = 'origin' | 'banned' | 'sockets_per_address' | 'joins_per_address';
export type GateVerdict =
  | { ok: true; addr: string }
  | { ok: false; status: number; reason: RefusalReason; message: string };

/** The TCP peer's address, IPv4-mapped IPv6 written as IPv4 ('' when unknown). */
export function clientAddress(req: IncomingMessage): string {
  const raw = req.socket.remoteAddress ?? '';
  return raw.startsWith('::ffff:') && raw.includes('.') ? raw.slice(7) : raw;
}

export class SocketGate {
  private readonly open = new Map<string, number>();
  private readonly joins = new Map<string, { tokens: number; at: number }>();
  private readonly now: () => number;

  constructor(private readonly options: SocketGateOptions) {
    this.now = options.now ?? Date.now;
  }

  /** Sockets open from `addr`. */
  openFrom(addr: string): number {
    return this.open.get(addr) ?? 0;
  }

  /**
   * Decide on an upgrade. When accepted, the socket is counted against its address until `socket`
   * closes.
   */
  admit(req: IncomingMessage, socket: Duplex): GateVerdict {
    const addr = clientAddress(req);
    // Its own origin is https://host on a TLS socket (checkOrigin reads that from the socket).
    const origin = checkOrigin(req, this.options.allowedOrigins);
    if (!origin.ok) return this.refuse(403, 'origin', `origin ${origin.origin} is not allowed`);
    const until = this.options.bannedUntil(addr);
    if (until !== null)
      return this.refuse(403, 'banned', `address cooling off for ${Math.ceil((until - this.now()) / 1000)} s`);
    if (this.openFrom(addr) >= this.options.maxSocketsPerAddress)
      return this.refuse(429, 'sockets_per_address', `more than ${this.options.maxSocketsPerAddress} sockets`);
    this.open.set(addr, this.openFrom(addr) + 1);
    socket.once('close', () => {
      const left = this.openFrom(addr) - 1;
      if (left > 0) this.open.set(addr, left);
      else this.open.delete(addr);
    });
    return { ok: true, addr };
  }

  /** Takes one join token of `addr`; false when its joins per minute are used up. */
  allowJoin(addr: string): boolean {
    const rate = this.options.joinsPerMinute;
    const now = this.now();
    const bucket = this.joins.get(addr) ?? { tokens: rate, at: now };
    bucket.tokens = Math.min(rate, bucket.tokens + ((now - bucket.at) / 60_000) * rate);
    bucket.at = now;
    if (this.joins.size > 100_000) this.joins.clear(); // bounded memory under an address-spraying flood
    this.joins.set(addr, bucket);
    if (bucket.tokens < 1) {
      this.options.onRefused?.('joins_per_address');
      return false;
    }
    bucket.tokens -= 1;
    return true;
  }

  private refuse(status: number, reason: RefusalReason, message: string): GateVerdict {
    this.options.onRefused?.(reason);
    return { ok: false, status, reason, message };
  }
}
