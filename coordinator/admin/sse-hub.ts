/**
 * Server-Sent Events fan-out: holds open `text/event-stream` responses and writes one JSON message per
 * `data:` frame to all of them. Knows nothing of what it sends (the admin feed decides that).
 *
 * A client that does not read (more than `maxBufferedBytes` unsent) is disconnected rather than
 * buffered without bound; an `EventSource` reconnects by itself and its server sends a fresh start.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

export class SseHub<M> {
  private readonly clients = new Set<ServerResponse>();
  private closed = false;

  constructor(private readonly maxBufferedBytes: number) {}

  get size(): number {
    return this.clients.size;
  }

  /** Starts a stream on `res` whose first message is `first()`; answers 503 once the hub is closed. */
  attach(req: IncomingMessage, res: ServerResponse, first: () => M): void {
    if (this.closed) {
      res.writeHead(503, { 'content-type': 'text/plain; charset=utf-8' }).end('feed closed\n');
      return;
    }
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      // Proxies (nginx) buffer responses unless told not to; a feed must flow.
      'x-accel-buffering': 'no',
    });
    res.socket?.setNoDelay(true);
    // Reconnect after 2 s when the connection drops (a coordinator restart, say).
    res.write('retry: 2000\n\n');
    this.writeFrame(res, frameOf(first()));
    this.clients.add(res);
    const drop = () => this.clients.delete(res);
    req.on('close', drop);
    res.on('close', drop);
    res.on('error', drop);
  }

  broadcast(msg: M): void {
    if (this.clients.size === 0) return;
    const frame = frameOf(msg);
    for (const res of this.clients) this.writeFrame(res, frame);
  }

  /** Ends every stream; later `attach` calls get 503. */
  close(): void {
    this.closed = true;
    for (const res of this.clients) res.end();
    this.clients.clear();
  }

  private writeFrame(res: ServerResponse, frame: string): void {
    if (res.destroyed || res.writableEnded) {
      this.clients.delete(res);
      return;
    }
    if (res.writableLength > this.maxBufferedBytes) {
      this.clients.delete(res);
      res.destroy();
      return;
    }
    res.write(frame);
  }
}

function frameOf(msg: unknown): string {
  return `data: ${JSON.stringify(msg)}\n\n`;
}
