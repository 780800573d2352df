/**
 * The I/O side of recomputed spot checks (machine/verification.ts decides): the chosen member PUTs the
 * state before the checked step to `/api/verify/{runId}/{step}?token=…`; this checks the grant, decodes
 * the snapshot, compares the hash the coordinator computes over its bytes with the committed hash,
 * tells the machine (`verification_upload`), writes the bytes to a file for the verifier process and
 * hands the machine its answer (`verification_result`). One check at a time: the machine opens no
 * second one while one is in flight.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { decodeSnapshot, type DecodedSnapshot, SnapshotError } from '../../core/state/snapshot';
import type { RecomputedStep } from '../machine/state';
import { checkedSlices } from '../machine/verification';
import { grantRefusal, type MachineExecutor } from '../runtime/executor';
import { HttpError, readBody, sendJson } from '../http/http-util';
import { nodeSha256 } from '../../node/sha256';

/** What the verifier process is asked (verifier-client.ts). */
export interface RecomputeRequest {
  snapshotPath: string;
  /** Committed hash of the step checked (the sketches' seed). */
  stepHash: string;
  world: number;
  /** Sample indices of the step, by rank. */
  slices: Uint32Array[];
  /** Samples in the step (Σ slice lengths). */
  count: number;
}

export type Recompute = (request: RecomputeRequest) => Promise<RecomputedStep>;

export interface VerificationServiceDeps {
  executor: MachineExecutor;
  recompute: Recompute;
  /** Directory for the uploaded states (one file at a time, removed after the check). */
  dir: string;
  maxBytes: number;
  onLog?: (level: 'info' | 'warn', message: string) => void;
}

export class VerificationService {
  constructor(private readonly deps: VerificationServiceDeps) {
    mkdirSync(deps.dir, { recursive: true });
  }

  /** PUT /api/verify/{runId}/{step}?token=…[&workerId=…] */
  async handleUpload(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    runId: string,
    stepPart: string,
  ): Promise<void> {
    const { executor } = this.deps;
    if ((req.method ?? 'GET') !== 'PUT') throw new HttpError(405, 'method_not_allowed', 'use PUT');
    if (runId !== executor.state.runId) throw new HttpError(409, 'wrong_run', `run ${runId} is not the current run`);
    if (!/^\d{1,15}$/.test(stepPart)) throw new HttpError(400, 'bad_step', 'step must be a non-negative integer');
    const step = Number(stepPart);
    const grant = executor.verifyGrant(step);
    const refusal = grantRefusal(grant, url, `state of step ${step} for a check`);
    if (refusal) throw new HttpError(refusal.status, refusal.code, refusal.message);
    const body = await readBody(req, this.deps.maxBytes);
    if (executor.verifyGrant(step) !== grant) throw new HttpError(409, 'not_requested', 'the check was dropped');
    let snapshot: DecodedSnapshot;
    try {
      snapshot = decodeSnapshot(new Uint8Array(body.buffer, body.byteOffset, body.byteLength), { sha256: nodeSha256 });
    } catch (error) {
      if (!(error instanceof SnapshotError)) throw error;
      return this.refuse(res, step, `not a snapshot: ${error.message}`);
    }
    const state = executor.state;
    if (snapshot.step !== step) return this.refuse(res, step, `snapshot of step ${snapshot.step}`);
    if (snapshot.spec.name !== state.job.model.name || snapshot.optimizer.kind !== state.job.optimizer.kind)
      return this.refuse(res, step, `snapshot of ${snapshot.spec.name}/${snapshot.optimizer.kind}`);
    // The hash the coordinator computed over the bytes (decodeSnapshot), never the header's claim.
    if (snapshot.stateHash !== grant!.hash)
      return this.refuse(res, step, `the state hashes to ${snapshot.stateHash}, step ${step} committed ${grant!.hash}`);
    const v = state.verification!;
    const { slices, count } = checkedSlices(state, v);
    executor.dispatch({ kind: 'verification_upload', step, ok: true });
    sendJson(res, 202, { ok: true, step });
    void this.run(v.step, body, { stepHash: v.stepHash, world: v.world.length, slices, count });
  }

  private refuse(res: ServerResponse, step: number, reason: string): void {
    this.deps.executor.dispatch({ kind: 'verification_upload', step, ok: false, reason });
    sendJson(res, 422, { error: 'wrong_state', message: reason });
  }

  private async run(step: number, bytes: Buffer, request: Omit<RecomputeRequest, 'snapshotPath'>): Promise<void> {
    const path = join(this.deps.dir, `state-${step - 1}.tsnap`);
    let result: RecomputedStep | { error: string };
    try {
      writeFileSync(path, bytes);
      result = await this.deps.recompute({ ...request, snapshotPath: path });
    } catch (error) {
      result = { error: (error as Error).message ?? String(error) };
      this.deps.onLog?.('warn', `verification of step ${step}: ${result.error}`);
    } finally {
      rmSync(path, { force: true });
    }
    this.deps.executor.dispatch({ kind: 'verification_result', step, result });
  }
}
