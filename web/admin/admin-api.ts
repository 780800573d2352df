/**
 * The admin token and the calls made with it. The token lives in sessionStorage (this tab only, gone
 * when it closes); a `?token=` in the page URL is accepted once, stored, and removed from the address
 * bar so it is not bookmarked or shared by accident. Calls send it as `Authorization: Bearer`; only the
 * EventSource, which cannot set headers, carries it in its URL.
 */

const STORAGE_KEY = 'tabswarm.admin-token';

/** The token from `?token=` (consumed: removed from the URL) or from this tab's storage. */
export function initialToken(): string | null {
  const url = new URL(location.href);
  const fromUrl = url.searchParams.get('token');
  if (fromUrl) {
    url.searchParams.delete('token');
    history.replaceState(null, '', `${url.pathname}${url.search}${url.hash}`);
    saveToken(fromUrl);
    return fromUrl;
  }
  try {
    return sessionStorage.getItem(STORAGE_KEY);
  } catch {
    return null;
  }
}

export function saveToken(token: string): void {
  try {
    sessionStorage.setItem(STORAGE_KEY, token);
  } catch {
    // Storage disabled: the token lasts as long as the page.
  }
}

export function forgetToken(): void {
  try {
    sessionStorage.removeItem(STORAGE_KEY);
  } catch {
    // nothing stored
  }
}

export type CallResult<T = unknown> = { ok: true; body: T } | { ok: false; status: number; message: string };

/** The server's JSON error `{error, message}` as one line. */
async function errorMessage(res: Response): Promise<string> {
  try {
    const body = (await res.json()) as { error?: string; message?: string };
    return body.message ?? body.error ?? `HTTP ${res.status}`;
  } catch {
    return `HTTP ${res.status} ${res.statusText}`;
  }
}

export class AdminApi {
  constructor(readonly token: string) {}

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return { authorization: `Bearer ${this.token}`, ...extra };
  }

  /** Checks the token: 'ok', 'unauthorized', or a problem reaching the coordinator. */
  async verify(): Promise<'ok' | 'unauthorized' | { problem: string }> {
    try {
      const res = await fetch('/api/admin/checkpoints', { headers: this.headers(), cache: 'no-store' });
      if (res.status === 401) return 'unauthorized';
      if (!res.ok) return { problem: await errorMessage(res) };
      return 'ok';
    } catch (error) {
      return { problem: `cannot reach the coordinator (${(error as Error).message})` };
    }
  }

  /** The feed's URL (EventSource cannot send headers). */
  feedUrl(): string {
    return `/api/admin/feed?token=${encodeURIComponent(this.token)}`;
  }

  /** GET /api/admin/<path> as JSON. */
  async get<T = unknown>(path: string): Promise<CallResult<T>> {
    try {
      const res = await fetch(`/api/admin/${path}`, { headers: this.headers(), cache: 'no-store' });
      if (!res.ok) return { ok: false, status: res.status, message: await errorMessage(res) };
      return { ok: true, body: (await res.json()) as T };
    } catch (error) {
      return { ok: false, status: 0, message: `cannot reach the coordinator (${(error as Error).message})` };
    }
  }

  /** POST /api/admin/<action> (pause, resume, checkpoint, kick, workers). */
  async post<T = unknown>(action: string, body: unknown = {}): Promise<CallResult<T>> {
    try {
      const res = await fetch(`/api/admin/${action}`, {
        method: 'POST',
        headers: this.headers({ 'content-type': 'application/json' }),
        body: JSON.stringify(body),
      });
      if (!res.ok) return { ok: false, status: res.status, message: await errorMessage(res) };
      return { ok: true, body: (await res.json()) as T };
    } catch (error) {
      return { ok: false, status: 0, message: `cannot reach the coordinator (${(error as Error).message})` };
    }
  }

  /** GET `url` (with the token) as bytes, e.g. a checkpoint the page reads itself. */
  async bytes(url: string): Promise<CallResult<Uint8Array>> {
    try {
      const res = await fetch(url, { headers: this.headers(), cache: 'no-store' });
      if (!res.ok) return { ok: false, status: res.status, message: await errorMessage(res) };
      return { ok: true, body: new Uint8Array(await res.arrayBuffer()) };
    } catch (error) {
      return { ok: false, status: 0, message: `cannot reach the coordinator (${(error as Error).message})` };
    }
  }

  /**
   * Downloads `url` as a file (fetched with the token in the header, then saved from a blob URL), so
   * the token never appears in a link, the history or a server log.
   */
  async download(url: string, fallbackName: string): Promise<CallResult<{ filename: string; bytes: number }>> {
    try {
      const res = await fetch(url, { headers: this.headers(), cache: 'no-store' });
      if (!res.ok) return { ok: false, status: res.status, message: await errorMessage(res) };
      const blob = await res.blob();
      const disposition = res.headers.get('content-disposition') ?? '';
      const filename = /filename="([^"]+)"/.exec(disposition)?.[1] ?? fallbackName;
      const href = URL.createObjectURL(blob);
      const link = document.createElement('a');
      link.href = href;
      link.download = filename;
      document.body.append(link);
      link.click();
      link.remove();
      // Revoke once the browser took the blob (the click handler runs synchronously; the save does not).
      setTimeout(() => URL.revokeObjectURL(href), 60_000);
      return { ok: true, body: { filename, bytes: blob.size } };
    } catch (error) {
      return { ok: false, status: 0, message: `download failed (${(error as Error).message})` };
    }
  }
}
