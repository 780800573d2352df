/**
 * Durable checkpoints over HTTP: download (a joiner when no peer holds the committed state) with a
 * sha256 check before anything is restored, and upload (rank 0 on `checkpoint_request`) in the
 * background with progress. Both are bounded by a deadline; a download also by the round's signal.
 */
import { TimeoutError } from './async-tools';

export interface HttpPort {
  /** Base for relative URLs (the page's origin). */
  readonly baseUrl: string;
  fetch(url: string, init?: RequestInit): Promise<Response>;
  /** PUT with upload progress (XMLHttpRequest in browsers); without it, `fetch` is used. */
  put?(
    url: string,
    body: ArrayBuffer,
    opts: { timeoutMs: number; onProgress?: (loaded: number, total: number) => void },
  ): Promise<void>;
}

export async function sha256Hex(bytes: ArrayBuffer): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}

/** An AbortController fired by `signal` or after `timeoutMs`; `dispose` removes both. */
function deadline(
  signal: AbortSignal | undefined,
  timeoutMs: number,
  what: string,
): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new TimeoutError(`${what} timed out after ${timeoutMs} ms`)),
    timeoutMs,
  );
  const onAbort = () => controller.abort(signal!.reason);
  if (signal?.aborted) controller.abort(signal.reason);
  else signal?.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    dispose() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    },
  };
}

function rethrowAbort(err: unknown, signal: AbortSignal): never {
  if (signal.aborted && signal.reason instanceof Error) throw signal.reason;
  throw err;
}

/** GET a checkpoint and verify its sha256; resolves with the bytes (never unverified ones). */
export async function downloadCheckpoint(
  http: HttpPort,
  url: string,
  sha256: string,
  opts: { signal?: AbortSignal; timeoutMs: number; onProgress?: (loaded: number, total: number) => void },
): Promise<ArrayBuffer> {
  const target = new URL(url, http.baseUrl).href;
  const limit = deadline(opts.signal, opts.timeoutMs, `checkpoint download ${url}`);
  try {
    const res = await http.fetch(target, { signal: limit.signal, cache: 'no-store' });
    if (!res.ok)
      throw new Error(
        `checkpoint download ${url}: HTTP ${res.status} ${(await res.text().catch(() => '')).slice(0, 200)}`,
      );
    const total = Number(res.headers.get('content-length') ?? 0);
    let bytes: ArrayBuffer;
    if (res.body && opts.onProgress) {
      const parts: Uint8Array[] = [];
      let loaded = 0;
      const reader = res.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        parts.push(value);
        loaded += value.byteLength;
        opts.onProgress(loaded, total);
      }
      const whole = new Uint8Array(loaded);
      let offset = 0;
      for (const p of parts) {
        whole.set(p, offset);
        offset += p.byteLength;
      }
      bytes = whole.buffer;
    } else {
      bytes = await res.arrayBuffer();
    }
    const actual = await sha256Hex(bytes);
    if (actual !== sha256)
      throw new Error(`checkpoint download ${url}: sha256 ${actual} differs from the announced ${sha256}`);
    return bytes;
  } catch (err) {
    rethrowAbort(err, limit.signal);
  } finally {
    limit.dispose();
  }
}

/** PUT a checkpoint snapshot to the URL the coordinator gave (it verifies and stores it). */
export async function uploadCheckpoint(
  http: HttpPort,
  url: string,
  bytes: ArrayBuffer,
  opts: { timeoutMs: number; onProgress?: (loaded: number, total: number) => void },
): Promise<void> {
  const target = new URL(url, http.baseUrl).href;
  if (http.put) {
    await http.put(target, bytes, opts);
    return;
  }
  const limit = deadline(undefined, opts.timeoutMs, `checkpoint upload ${url}`);
  try {
    const res = await http.fetch(target, {
      method: 'PUT',
      body: bytes,
      headers: { 'content-type': 'application/octet-stream' },
      signal: limit.signal,
    });
    if (!res.ok)
      throw new Error(`checkpoint upload: HTTP ${res.status} ${(await res.text().catch(() => '')).slice(0, 300)}`);
    opts.onProgress?.(bytes.byteLength, bytes.byteLength);
  } catch (err) {
    rethrowAbort(err, limit.signal);
  } finally {
    limit.dispose();
  }
}

/** The browser's HTTP port: fetch for downloads, XMLHttpRequest for uploads (it reports upload progress). */
export function browserHttp(baseUrl: string = location.origin): HttpPort {
  return {
    baseUrl,
    fetch: (url, init) => fetch(url, init),
    put: (url, body, opts) =>
      new Promise<void>((resolve, reject) => {
        const xhr = new XMLHttpRequest();
        xhr.open('PUT', url);
        xhr.timeout = opts.timeoutMs;
        xhr.setRequestHeader('content-type', 'application/octet-stream');
        xhr.upload.onprogress = (e) => opts.onProgress?.(e.loaded, e.lengthComputable ? e.total : body.byteLength);
        xhr.onload = () =>
          xhr.status >= 200 && xhr.status < 300
            ? resolve()
            : reject(new Error(`checkpoint upload: HTTP ${xhr.status} ${String(xhr.responseText).slice(0, 300)}`));
        xhr.onerror = () => reject(new Error('checkpoint upload: network error'));
        xhr.ontimeout = () => reject(new TimeoutError(`checkpoint upload timed out after ${opts.timeoutMs} ms`));
        xhr.send(body);
      }),
  };
}
