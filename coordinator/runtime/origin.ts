/**
 * The `Origin` allowlist of the WebSockets (`/ws`, `/peer`). A browser always sends `Origin` with a
 * WebSocket handshake and a page cannot forge it, so refusing foreign origins stops any other web site
 * from enlisting its visitors as workers. (A script outside a browser can send any `Origin`: this check
 * is about browsers, not about scripts; those meet the per-address caps and the penalties.)
 *
 * Allowed: the coordinator's own origin (the scheme and `Host` the request was addressed to: a page it
 * served connects back to where it came from), plus every origin given with `--allow-origin` (e.g. a
 * public URL in front of a proxy, or the Vite dev server). A handshake without `Origin` (not a browser)
 * is allowed.
 */
import type { IncomingMessage } from 'node:http';

/** `scheme://host[:port]` in the form browsers send it (lower case, no default port, no path). */
export function normalizeOrigin(text: string): string | null {
  try {
    const url = new URL(text);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') return null;
    return url.origin;
  } catch {
    return null;
  }
}

/** Parses `--allow-origin` values (comma-separated lists allowed); throws on anything that is not an origin. */
export function parseOriginList(values: readonly string[]): string[] {
  const out: string[] = [];
  for (const value of values.flatMap((v) => v.split(','))) {
    const trimmed = value.trim();
    if (trimmed === '') continue;
    const origin = normalizeOrigin(trimmed);
    if (origin === null) throw new Error(`"${trimmed}" is not an origin (expected e.g. https://example.org)`);
    out.push(origin);
  }
  return out;
}

export type OriginVerdict = { ok: true } | { ok: false; origin: string };

/**
 * Whether a WebSocket handshake's `Origin` may connect. `tls`: the request arrived over TLS (default:
 * read from the socket, so an HTTPS listener's own origin is `https://…`).
 */
export function checkOrigin(
  req: IncomingMessage,
  allowed: readonly string[],
  tls = Boolean((req.socket as { encrypted?: boolean }).encrypted),
): OriginVerdict {
  const raw = req.headers.origin;
  if (raw === undefined) return { ok: true };
  const origin = normalizeOrigin(raw);
  const host = req.headers.host;
  const own = host ? normalizeOrigin(`${tls ? 'https' : 'http'}://${host}`) : null;
  if (origin !== null && (origin === own || allowed.includes(origin))) return { ok: true };
  return { ok: false, origin: raw.slice(0, 200) };
}
