/**
 * The public checkpoint routes, registered into the one router (router.ts):
 *
 *   GET      /api/checkpoints                                  the current run's checkpoints
 *   GET/HEAD /api/checkpoints/{step|latest}, /api/checkpoints/{runId}/{step|latest}   the snapshot bytes
 *   PUT      /api/checkpoints/[{runId}/]{step}?token=…[&workerId=…]   rank 0's upload of a requested checkpoint
 *
 * An upload is stored only when the machine asked for it (a grant) and the snapshot is what the step
 * committed: its step, sampler position, model and optimizer, and the state hash the coordinator
 * computes over the uploaded bytes itself, compared with the hash every rank reported.
 */
import { createReadStream } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { idSchema } from '../../core/protocol/control-fields';
import { type DecodedSnapshot, decodeSnapshot, SnapshotError } from '../../core/state/snapshot';
import { nodeSha256 } from '../../node/sha256';
import { publicCheckpoint } from '../admin/admin-feed-projection';
import type { CoordinatorMetrics } from '../admin/server-metrics';
import { committedPosition, type CoordinatorState } from '../machine/machine';
import { grantRefusal, type MachineExecutor } from '../runtime/executor';
import type { CheckpointRow, Store } from '../runtime/store';
import { momentSketches, sameSketches } from '../trust/verification-service';
import { HttpError, readBody, sendJson } from './http-util';
import type { RouteHandler, Router } from './router';

export interface CheckpointRouteDeps {
  runId: string;
  store: Store;
  executor: MachineExecutor;
  metrics: CoordinatorMetrics;
  /** Largest accepted checkpoint upload, in bytes. */
  maxCheckpointBytes: number;
}

/** Refuses an upload: counts it by its code, then throws the HttpError. */
type Reject = (status: number, code: string, message: string) => never;

export function registerCheckpointRoutes(router: Router, deps: CheckpointRouteDeps): void {
  const list: RouteHandler = (_req, res) =>
    sendJson(res, 200, { runId: deps.runId, checkpoints: deps.store.checkpoints(deps.runId).map(publicCheckpoint) });
  const download: RouteHandler = (req, res, { params }) =>
    serveCheckpoint(req, res, deps.store, runIdOf(params.run ?? deps.runId), params.step);
  const upload: RouteHandler = (req, res, { url, params }) =>
    uploadCheckpoint(deps, req, res, url, runIdOf(params.run ?? deps.runId), params.step);
  router
    .on('GET', '/api/checkpoints', list)
    .on('GET', '/api/checkpoints/', list)
    .on(['GET', 'HEAD'], '/api/checkpoints/:step', download)
    .on('PUT', '/api/checkpoints/:step', upload)
    .on(['GET', 'HEAD'], '/api/checkpoints/:run/:step', download)
    .on('PUT', '/api/checkpoints/:run/:step', upload)
    .any('/api/checkpoints/*', () => {
      throw new HttpError(404, 'not_found', 'checkpoint URLs are /api/checkpoints/[runId/]{step|latest}');
    });
}

function runIdOf(raw: string): string {
  try {
    return idSchema.parse(decodeURIComponent(raw));
  } catch {
    throw new HttpError(400, 'bad_run', 'malformed run id');
  }
}

/** GET/HEAD of a stored checkpoint: its bytes, with its hash as a strong ETag (304 when the client has it). */
function serveCheckpoint(
  req: IncomingMessage,
  res: ServerResponse,
  store: Store,
  runId: string,
  stepPart: string,
): void {
  let row: CheckpointRow | null;
  if (stepPart === 'latest') row = store.latestCheckpoint(runId);
  else {
    if (!/^\d+$/.test(stepPart) || !(Number(stepPart) <= Number.MAX_SAFE_INTEGER))
      throw new HttpError(
        400,
        'bad_step',
        `step must be a non-negative integer or "latest", not "${stepPart.slice(0, 40)}"`,
      );
    row = store.checkpoint(runId, Number(stepPart));
  }
  if (!row) throw new HttpError(404, 'no_checkpoint', `no checkpoint ${stepPart} in run ${runId}`);
  const etag = `"sha256-${row.sha256}"`;
  const headers = {
    'content-type': 'application/octet-stream',
    'cache-control': 'no-cache',
    etag,
    'x-checkpoint-sha256': row.sha256,
    'x-checkpoint-step': String(row.step),
    'x-checkpoint-epoch': String(row.epoch),
    'x-checkpoint-cursor': String(row.cursor),
    'access-control-expose-headers':
      'x-checkpoint-sha256, x-checkpoint-step, x-checkpoint-epoch, x-checkpoint-cursor, etag',
  };
  if (req.headers['if-none-match'] === etag) {
    res.writeHead(304, headers).end();
    return;
  }
  res.writeHead(200, { ...headers, 'content-length': row.bytes });
  if (req.method === 'HEAD') {
    res.end();
    return;
  }
  const stream = createReadStream(row.path);
  stream.on('error', () => res.destroy());
  stream.pipe(res);
}

/** PUT of a requested checkpoint: checked against the grant and the committed step, then stored and announced. */
async function uploadCheckpoint(
  deps: CheckpointRouteDeps,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  runId: string,
  stepPart: string,
): Promise<void> {
  const { executor, store, metrics } = deps;
  const reject: Reject = (status, code, message) => {
    metrics.checkpointUploads.inc(1, { result: code });
    throw new HttpError(status, code, message);
  };
  if (runId !== deps.runId) reject(409, 'wrong_run', `run ${runId} is not the current run`);
  if (!/^\d+$/.test(stepPart)) reject(400, 'bad_step', 'step must be a non-negative integer');
  const step = Number(stepPart);
  const grant = executor.checkpointGrant(step);
  const refusal = grantRefusal(grant, url, `checkpoint of step ${step}`);
  if (refusal) reject(refusal.status, refusal.code, refusal.message);
  const body = await readBody(req, deps.maxCheckpointBytes).catch((error: unknown) => {
    if (error instanceof HttpError) metrics.checkpointUploads.inc(1, { result: error.code });
    throw error;
  });
  const snapshot = checkedSnapshot(body, step, executor.state, reject);
  // The coordinator hashes the uploaded state itself (the header's hash is the sender's claim) and
  // stores it only if that equals the hash every rank reported for the committed step (parameters,
  // and in local mode the outer momentum: core/state/hash.ts `stateHash`, a tree of SHA-256, so other bytes cannot match it).
  if (grant!.hash === null) reject(409, 'no_hash', `step ${step} has no committed hash to verify against`);
  // decodeSnapshot hashed the bytes itself (core/state/hash.ts `stateHash`); the header's hashes are only checked against them.
  const computed = snapshot.stateHash;
  if (computed !== grant!.hash) {
    reject(422, 'hash_mismatch', `snapshot parameters hash to ${computed}, step ${step} committed ${grant!.hash}`);
  }
  const inner = localInnerStateProblem(executor.state, step, grant!, snapshot);
  if (inner) reject(422, 'hash_mismatch', inner);
  // The machine may have moved on (rolled back past this step) while the body streamed in.
  if (executor.checkpointGrant(step) !== grant)
    reject(409, 'not_requested', `the checkpoint of step ${step} is no longer wanted`);
  const row = store.putCheckpoint(runId, { step, epoch: snapshot.epoch, cursor: snapshot.cursor }, body);
  executor.settleGrant(step);
  const trainingHash = snapshot.outer ? snapshot.trainingHash : null;
  executor.dispatch({
    kind: 'checkpoint_stored',
    step,
    epoch: row.epoch,
    cursor: row.cursor,
    sha256: row.sha256,
    trainingHash,
  });
  metrics.checkpointUploads.inc(1, { result: 'stored' });
  // The machine keeps the few checkpoints it may restore from; older files only take disk space.
  const kept = executor.state.checkpoints.map((c) => c.step);
  if (kept.includes(step)) store.pruneCheckpoints(runId, kept);
  sendJson(res, 201, publicCheckpoint(row));
}

/**
 * Local mode: the inner state in a checkpoint (its optimizer moments and t, each rank's own) is its
 * uploader's, and must be what the uploader said it ended the outer step with (the sketches of its
 * moments and its t in its report of `step`); why not, or null. Every-step mode: nothing to add (the
 * agreed hash covers every section).
 */
function localInnerStateProblem(
  state: CoordinatorState,
  step: number,
  grant: { workerId: string | null; hash: string | null },
  snapshot: DecodedSnapshot,
): string | null {
  if (state.job.sync.mode !== 'local' || !state.job.verify) return null;
  // The claims as they were when the checkpoint was asked for (a later commit replaces `momentClaims`).
  const claims = state.checkpointRequests.find((r) => r.step === step)?.claims;
  const claim =
    claims && grant.workerId && Object.hasOwn(claims.byWorker, grant.workerId)
      ? claims.byWorker[grant.workerId]
      : undefined;
  if (!claims || !claim || !grant.hash)
    return `no claim of its inner state at step ${step} to check the checkpoint's against`;
  const mine = momentSketches(snapshot, grant.hash, claims.world);
  if (claim.t !== snapshot.optimizer.t || !sameSketches(claim.moments, mine))
    return `the checkpoint's optimizer moments or t are not those its uploader reported at step ${step}`;
  return null;
}

/** The uploaded snapshot, decoded, if it is of `step` at the position that step ends at, for the job's model. */
function checkedSnapshot(body: Buffer, step: number, state: CoordinatorState, reject: Reject): DecodedSnapshot {
  let snapshot: DecodedSnapshot;
  try {
    // A plain Uint8Array view: Buffer#slice returns a view, not a copy, which decodeSnapshot does not expect.
    snapshot = decodeSnapshot(new Uint8Array(body.buffer, body.byteOffset, body.byteLength), { sha256: nodeSha256 });
  } catch (error) {
    if (error instanceof SnapshotError) reject(422, 'bad_snapshot', error.message);
    throw error;
  }
  if (snapshot.step !== step) reject(422, 'wrong_step', `snapshot is of step ${snapshot.step}, the URL says ${step}`);
  // Where the record stood after that commit, as the machine knows it (a requested checkpoint's commit).
  const expected = committedPosition(state, step) ?? { epoch: -1, cursor: -1 };
  if (snapshot.epoch !== expected.epoch || snapshot.cursor !== expected.cursor) {
    reject(
      422,
      'wrong_position',
      `snapshot says epoch ${snapshot.epoch} cursor ${snapshot.cursor}; step ${step} ends at epoch ${expected.epoch} cursor ${expected.cursor}`,
    );
  }
  const localMode = state.job.sync.mode === 'local';
  if (
    snapshot.spec.name !== state.job.model.name ||
    snapshot.optimizer.kind !== state.job.optimizer.kind ||
    !!snapshot.outer !== localMode
  ) {
    reject(
      422,
      'wrong_model',
      `snapshot of ${snapshot.spec.name}/${snapshot.optimizer.kind}${snapshot.outer ? ' with an outer momentum' : ''}, the job trains ${state.job.model.name}/${state.job.optimizer.kind}${localMode ? ' in local sync mode (outer momentum expected)' : ''}`,
    );
  }
  return snapshot;
}
