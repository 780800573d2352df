/**
 * The coordinator's side of a recomputed check (machine/checks.ts): the uploader PUTs the state the
 * checked commit started from; this checks the grant, decodes the snapshot (non-finite sections are
 * refused), and checks it is that state: of the commit's step, for the job's model and optimizer, its
 * committed part hashing (by the coordinator, over the bytes) to the agreed hash — every-step mode: the
 * whole state; local mode: θ_c and u — and, in local mode, the whole inner state to the uploader's own
 * commitment (`innerHash`) and its moments continuing what the members claimed at the commit before
 * (or the checkpoint stored there). Then it tells the machine (`verification_upload`), writes the bytes
 * to a file for the verifier process and hands the machine its answer (`verification_result`). A state
 * that fails any of this is a withheld upload: the machine bans the uploader.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { decodeSnapshot, type DecodedSnapshot, SnapshotError } from '../../core/state/snapshot';
import { gradientSketches } from '../../core/state/sketch';
import type { RecomputedStep, VerificationState } from '../machine/state';
import { checkedSlices, judge, sensitivityOf } from '../machine/checks';
import { grantRefusal, type MachineExecutor } from '../runtime/executor';
import { HttpError, readBody, sendJson } from '../http/http-util';
import { nodeSha256 } from '../../node/sha256';
import type { VerifyRequest } from './verifier-client';

/** What the verifier process is asked (verifier-client.ts): the request and the snapshot's file. */
export type RecomputeRequest = VerifyRequest;

export type Recompute = (request: RecomputeRequest) => Promise<RecomputedStep>;

export interface VerificationServiceDeps {
  executor: MachineExecutor;
  recompute: Recompute;
  /** Directory for the uploaded states (one file per check in flight, removed after it). */
  dir: string;
  maxBytes: number;
  onLog?: (level: 'info' | 'warn', message: string) => void;
}

export class VerificationService {
  constructor(private readonly deps: VerificationServiceDeps) {
    mkdirSync(deps.dir, { recursive: true });
  }

  /** PUT /api/verify/{runId}/{check}?token=…[&workerId=…] */
  async handleUpload(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    runId: string,
    checkPart: string,
  ): Promise<void> {
    const { executor } = this.deps;
    if ((req.method ?? 'GET') !== 'PUT') throw new HttpError(405, 'method_not_allowed', 'use PUT');
    if (runId !== executor.state.runId) throw new HttpError(409, 'wrong_run', `run ${runId} is not the current run`);
    if (!/^\d{1,15}$/.test(checkPart)) throw new HttpError(400, 'bad_check', 'the check is a non-negative integer');
    const id = Number(checkPart);
    const grant = executor.verifyGrant(id);
    const refusal = grantRefusal(grant, url, `state for check ${id}`);
    if (refusal) throw new HttpError(refusal.status, refusal.code, refusal.message);
    const body = await readBody(req, this.deps.maxBytes);
    if (executor.verifyGrant(id) !== grant) throw new HttpError(409, 'not_requested', 'the check was dropped');
    const v = executor.state.checks!.find((c) => c.id === id)!;
    let snapshot: DecodedSnapshot;
    try {
      snapshot = decodeSnapshot(new Uint8Array(body.buffer, body.byteOffset, body.byteLength), { sha256: nodeSha256 });
    } catch (error) {
      if (!(error instanceof SnapshotError)) throw error;
      return this.refuse(res, id, `not a snapshot: ${error.message}`);
    }
    const wrong = this.wrongState(v, snapshot);
    if (wrong) return this.refuse(res, id, wrong);
    executor.dispatch({ kind: 'verification_upload', check: id, ok: true });
    sendJson(res, 202, { ok: true, check: id, step: snapshot.step });
    void this.run(v, body);
  }

  /** Why the snapshot is not the state check `v`'s commit started from (as its uploader committed to it), or null. */
  private wrongState(v: VerificationState, snapshot: DecodedSnapshot): string | null {
    const { job } = this.deps.executor.state;
    const local = v.mode === 'local';
    if (snapshot.step !== v.firstStep - 1) return `snapshot of step ${snapshot.step}, not ${v.firstStep - 1}`;
    if (
      snapshot.spec.name !== job.model.name ||
      snapshot.optimizer.kind !== job.optimizer.kind ||
      !!snapshot.outer !== local
    )
      return `snapshot of ${snapshot.spec.name}/${snapshot.optimizer.kind}${snapshot.outer ? ' with an outer momentum' : ''}`;
    // The hashes the coordinator computed over the bytes (decodeSnapshot), never the header's claims.
    if (v.prevHash !== null && snapshot.stateHash !== v.prevHash)
      return `the state hashes to ${snapshot.stateHash}, step ${snapshot.step} committed ${v.prevHash}`;
    if (!local) return null;
    if (snapshot.trainingHash !== v.innerHash)
      return `its inner state hashes to ${snapshot.trainingHash}, it committed to ${v.innerHash}`;
    return discontinuity(v, snapshot);
  }

  /**
   * A recomputation that contradicts the claims is done once more from the start moved by a few roundings
   * (`perturb`), to tell a lie from a chaotic state where rounding alone moves the result as far
   * (checks.ts `judge`). A failed second run leaves the first to judge alone (0).
   */
  private async sensitivity(v: VerificationState, request: RecomputeRequest, first: RecomputedStep): Promise<number> {
    try {
      return sensitivityOf(v.mode, first, await this.deps.recompute({ ...request, perturb: true }));
    } catch (error) {
      this.deps.onLog?.(
        'warn',
        `verification of step ${v.step} (check ${v.id}), second run: ${(error as Error).message}`,
      );
      return 0;
    }
  }

  private refuse(res: ServerResponse, check: number, reason: string): void {
    this.deps.executor.dispatch({ kind: 'verification_upload', check, ok: false, reason });
    sendJson(res, 422, { error: 'wrong_state', message: reason });
  }

  private async run(v: VerificationState, bytes: Buffer): Promise<void> {
    const path = join(this.deps.dir, `check-${v.id}.tsnap`);
    let result: RecomputedStep | { error: string };
    try {
      writeFileSync(path, bytes);
      const request = requestOf(this.deps.executor.state, v, path);
      result = await this.deps.recompute(request);
      if (judge(v, result).cheaters.length > 0)
        result = { ...result, sensitivity: await this.sensitivity(v, request, result) };
    } catch (error) {
      result = { error: (error as Error).message ?? String(error) };
      this.deps.onLog?.('warn', `verification of step ${v.step} (check ${v.id}): ${result.error}`);
    } finally {
      rmSync(path, { force: true });
    }
    this.deps.executor.dispatch({ kind: 'verification_result', check: v.id, result });
  }
}

/**
 * Local mode: why the uploaded inner state does not continue the one its rank ended the previous outer
 * step with (its moments, sketched as the members sketched their claims there, match none of the
 * claims exactly; or it is not the checkpoint's state it was restored from), or null (it does, or
 * nothing is known: after a coordinator restart).
 */
function discontinuity(v: VerificationState, snapshot: DecodedSnapshot): string | null {
  const c = v.continuity;
  if (!c) return null;
  if ('trainingHash' in c)
    return snapshot.trainingHash === c.trainingHash
      ? null
      : 'its inner state is not the checkpoint it was restored from';
  const mine = momentSketches(snapshot, v.prevHash!, c.world);
  const matches = c.claims.some((claim) => claim.t === snapshot.optimizer.t && sameSketches(claim.moments, mine));
  return matches ? null : 'its optimizer moments and t are not those any rank ended the previous outer step with';
}

/** The sketches of a state's optimizer moments as a rank sketched its claim of them (seeded by the commit's hash). */
export function momentSketches(snapshot: Pick<DecodedSnapshot, 'moments'>, hash: string, world: number): number[][] {
  return gradientSketches(snapshot.moments, hash, world).map((k) => Array.from(k.values));
}

/** Whether two lists of sketches are the same, bit for bit. */
export function sameSketches(a: readonly (readonly number[])[], b: readonly (readonly number[])[]): boolean {
  return (
    a.length === b.length && a.every((x, i) => x.length === b[i].length && x.every((y, j) => Object.is(y, b[i][j])))
  );
}

/** What the verifier recomputes for check `v` (its samples from `checkedSlices`, the one place that says). */
function requestOf(s: MachineExecutor['state'], v: VerificationState, snapshotPath: string): RecomputeRequest {
  const steps = checkedSlices(s, v);
  const local = v.mode === 'local';
  const rank = v.ranks[0];
  return {
    snapshotPath,
    stepHash: v.stepHash,
    world: v.world.length,
    mode: v.mode,
    ...(local ? { rank } : {}),
    steps: steps.map((st) => ({ slices: local ? [st.slices[rank]] : st.slices, count: st.count })),
    fresh: v.prevHash === null,
    ...(local && v.claims.sum && v.claims.sumMass ? { sum: { values: v.claims.sum, mass: v.claims.sumMass } } : {}),
  };
}
