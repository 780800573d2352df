/**
 * The swarm's view of a coordinator: it is a separate process, reached over HTTP only.
 * `probeCoordinator` fails within `timeoutMs` with one clear message when nothing (or something that is
 * not a tabswarm coordinator) answers at the URL.
 */
import type { AuditReport, CommitsPage, CommitView } from '../../coordinator/admin/audit';
import { STATUS_PAGE_MAX, type StatusResponse, statusResponseSchema } from '../../core/protocol/views';
import type { JobPublic } from '../../core/training/job';

export class CoordinatorUnreachableError extends Error {}

export interface CoordinatorJob {
  runId: string;
  job: JobPublic;
}

function causeOf(error: unknown, timeoutMs: number): string {
  const err = error as Error & { cause?: { code?: string; message?: string } };
  if (err.name === 'TimeoutError' || err.name === 'AbortError') return `no answer within ${timeoutMs / 1000} s`;
  const code = err.cause?.code;
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'unknown host';
  if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH') return 'host unreachable';
  return err.cause?.message ?? err.message;
}

export async function getJson<T>(baseUrl: string, path: string, timeoutMs: number): Promise<T> {
  const res = await fetch(`${baseUrl}${path}`, {
    signal: AbortSignal.timeout(timeoutMs),
    headers: { accept: 'application/json' },
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`GET ${path}: HTTP ${res.status} ${text.slice(0, 200)}`);
  return JSON.parse(text) as T;
}

/** Resolves with the run and job, or rejects with a `CoordinatorUnreachableError` naming the cause and the fix. */
export async function probeCoordinator(baseUrl: string, timeoutMs = 3000): Promise<CoordinatorJob> {
  let res: Response;
  try {
    res = await fetch(`${baseUrl}/api/job`, {
      signal: AbortSignal.timeout(timeoutMs),
      headers: { accept: 'application/json' },
    });
  } catch (error) {
    throw new CoordinatorUnreachableError(
      `no coordinator at ${baseUrl} (${causeOf(error, timeoutMs)}): start one with \`tabswarm coordinator\` (or npm start) or fix --url`,
    );
  }
  const text = await res.text().catch(() => '');
  let body: Partial<CoordinatorJob> | null = null;
  try {
    body = JSON.parse(text) as Partial<CoordinatorJob>;
  } catch {
    body = null;
  }
  if (!res.ok || !body || typeof body.runId !== 'string' || !body.job) {
    throw new CoordinatorUnreachableError(
      `${baseUrl} answered ${baseUrl}/api/job with HTTP ${res.status}${body ? '' : ' and no JSON'}: not a tabswarm coordinator (fix --url)`,
    );
  }
  return body as CoordinatorJob;
}

/**
 * `/api/status` with the largest pages (the swarm looks its tabs up among the members and the waiting,
 * and a coordinator it attaches to may have other volunteers), checked against its schema
 * (core/protocol/views.ts).
 */
export const fetchStatus = async (baseUrl: string, timeoutMs = 3000): Promise<StatusResponse> =>
  statusResponseSchema.parse(
    await getJson<unknown>(baseUrl, `/api/status?limit=${STATUS_PAGE_MAX}&waitingLimit=${STATUS_PAGE_MAX}`, timeoutMs),
  );
export const fetchAudit = (baseUrl: string, timeoutMs = 15_000) =>
  getJson<AuditReport>(baseUrl, '/api/audit', timeoutMs);

/**
 * Every live commit from step `from` on, ascending, through `get` (a JSON GET of a coordinator path: a
 * test's CoordinatorProcess, a test-bed Scene's `api`), page by page (`GET /api/commits`).
 */
export async function commitsFrom(get: (path: string) => Promise<CommitsPage>, from = 0): Promise<CommitView[]> {
  const commits: CommitView[] = [];
  for (let next: number | null = from; next !== null; ) {
    const page = await get(`/api/commits?from=${next}`);
    commits.push(...page.commits);
    next = page.next;
  }
  return commits;
}
