/**
 * The public `/api/*` routes, registered into the one router (router.ts); none needs a token:
 *
 *   GET  /api/status[?offset&limit&waitingOffset&waitingLimit]  aggregates and a page of the world and of the wait list
 *   GET  /api/audit, /api/job                     the audit of the commit log, the public job
 *   GET  /api/commits[?from=STEP&limit=N]         live commits, ascending; page on with `from = next`
 *   GET  /api/evaluations[?after=ID&limit=N]      accepted test-set evaluations, oldest first
 *   *    /api/health                              liveness and the origin this server thinks it has (tls.ts)
 *   GET/HEAD /api/dataset[/…]                     the job's dataset (datasets/: metadata, files, chunks)
 *   PUT  /api/verify/{runId}/{check}?token=…      a state upload for a recomputed check (trust/verification-service.ts)
 *   /api/checkpoints/…                            checkpoint-routes.ts
 *
 * Reads only, except the two uploads, which hand their bytes to the executor's grants.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { idSchema } from '../../core/protocol/control-fields';
import { jobPublic } from '../../core/training/job';
import { auditRun, commitsPage, evaluationViews, MAX_COMMITS_PAGE } from '../admin/audit';
import { parseStatusPage } from '../../core/protocol/views';
import { statusResponse } from '../machine/status-view';
import type { VerificationService } from '../trust/verification-service';
import { type CheckpointRouteDeps, registerCheckpointRoutes } from './checkpoint-routes';
import { HttpError, sendJson } from './http-util';
import type { Router } from './router';
import { requestOrigin, type TlsMaterial } from './tls';

export interface ApiRouteDeps extends CheckpointRouteDeps {
  /** Serves `/api/dataset[/…]`; false when it has no dataset (the route is then a 404). */
  datasetRoute: (req: IncomingMessage, res: ServerResponse) => boolean;
  /** Uploads for recomputed spot checks (present when the job verifies). */
  verification?: Pick<VerificationService, 'handleUpload'>;
  now?: () => number;
  /** Whether the server speaks HTTPS, the public URL behind a proxy, and whether to trust its headers: the origin `/api/health` reports (`requestOrigin`, tls.ts). */
  tls?: TlsMaterial;
  publicUrl?: string;
  trustProxy?: boolean;
}

/** The 404 of a path no route serves. */
export function noApiRoute(url: URL): HttpError {
  return new HttpError(404, 'not_found', `no API route ${url.pathname}`);
}

/** A non-negative integer query parameter written as plain digits (so "", "1e3", "0x10", "2.0" are refused). */
function integerQuery(url: URL, name: string, fallback: number, min: number, max: number): number {
  const raw = url.searchParams.get(name);
  if (raw === null) return fallback;
  const value = /^\d{1,15}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!(value >= min && value <= max)) {
    throw new HttpError(
      400,
      'bad_request',
      `${name} must be an integer from ${min} to ${max}, not "${raw.slice(0, 40)}"`,
    );
  }
  return value;
}

/**
 * Rollback rows read to filter one page of `/api/evaluations`. Each rollback follows a ban or an
 * inconclusive check (bounded per target), so a run holds far fewer; past this many, evaluations of
 * undone steps could show again.
 */
const MAX_ROLLBACK_ROWS = 10_000;

export function registerApiRoutes(router: Router, deps: ApiRouteDeps): void {
  const { executor, store, runId } = deps;
  const now = deps.now ?? Date.now;
  const page = (url: URL, name: string) => ({
    start: integerQuery(url, name, 0, 0, Number.MAX_SAFE_INTEGER),
    limit: integerQuery(url, 'limit', MAX_COMMITS_PAGE, 1, MAX_COMMITS_PAGE),
  });
  const dataset = (req: IncomingMessage, res: ServerResponse, { url }: { url: URL }) => {
    if (!deps.datasetRoute(req, res)) throw noApiRoute(url);
  };
  router
    .on('GET', '/api/status', (_req, res, { url }) => {
      const parsed = parseStatusPage(url.searchParams);
      if (!parsed.ok) throw new HttpError(400, 'bad_request', parsed.error);
      sendJson(res, 200, statusResponse(executor.state, now(), parsed.page));
    })
    .on('GET', '/api/audit', (_req, res) => {
      const all = store.commits(runId, { includeRolledBack: true });
      const live = all.filter((r) => !r.rolledBack);
      sendJson(res, 200, auditRun(executor.state, live, all.length - live.length));
    })
    .on('GET', '/api/job', (_req, res) =>
      sendJson(res, 200, { runId, job: jobPublic(executor.state.job, executor.state.datasetSize) }),
    )
    .on('GET', '/api/commits', (_req, res, { url }) => {
      const { start, limit } = page(url, 'from');
      sendJson(res, 200, commitsPage(runId, store.commitsFrom(runId, start, limit), limit));
    })
    .on('GET', '/api/evaluations', (_req, res, { url }) => {
      const { start, limit } = page(url, 'after');
      const rows = store.eventsNamed(runId, 'evaluation', { afterId: start, limit });
      // Rollbacks are rare (bounded by bans and inconclusive checks) and pruning keeps them all.
      const rollbacks = store.eventsNamed(runId, 'record_rolled_back', { afterId: start, limit: MAX_ROLLBACK_ROWS });
      sendJson(res, 200, { runId, evaluations: evaluationViews(rows, rollbacks) });
    })
    .any('/api/health', (req, res) => {
      const { tls, publicUrl, trustProxy } = deps;
      sendJson(res, 200, { ok: true, runId, origin: requestOrigin(req, { tls: !!tls, publicUrl, trustProxy }) });
    })
    .any('/api/dataset', dataset)
    .any('/api/dataset/*', dataset)
    .any('/api/verify/:run/:check', async (req, res, { url, params }) => {
      if (!deps.verification) throw new HttpError(404, 'not_found', 'this job does not verify contributions');
      let run: string;
      try {
        run = idSchema.parse(decodeURIComponent(params.run));
      } catch {
        throw new HttpError(400, 'bad_run', 'malformed run id');
      }
      await deps.verification.handleUpload(req, res, url, run, params.check);
    });
  registerCheckpointRoutes(router, deps);
}
