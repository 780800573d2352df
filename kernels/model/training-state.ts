/**
 * Training state = parameters + optimizer moments + optimizer step t, as the elastic layer needs it:
 * - `exportState` reads params and every moment back with ONE mapping (all buffers copied into one
 *   staging buffer by one submission), for a snapshot or a broadcast to a joining peer;
 * - `saveBackup` / `restoreBackup` keep a second GPU copy of the last completed (committed) step and
 *   put it back after a failure, with GPU→GPU copies only (no read-back, microseconds of recording);
 * - `hashParams` / `hashState` hash the params' (and the moments') chunks on the GPU
 *   (`Model.withParamDigests`, `withStateDigests`) and read back only the digests, which the caller's
 *   hasher turns into the state hash (the coordinator's `paramsHasher` from core/state/hash.ts,
 *   injected: the tree hash's definition lives in one place), so the value a rank reports is the
 *   value a snapshot of the same state carries.
 */
import type { Model } from './model';
import { createTensor, writeTensor, type Gpu, type Tensor } from '../runtime';

/**
 * The state hash (core/state/hash.ts `paramsHasher`): of the parameters alone (`ofParams`) or of the whole
 * training state (`ofState`: params, moments, t — `trainingStateHash`) from buffers in memory, and, with
 * `digests`, from the SHA-256 digests of their `chunkBytes` chunks computed on the GPU (`root`: the
 * parameters, over `byteLength` bytes; `stateRoot`: params and each moment, then t), the same values.
 * Without `digests` the buffers are read back and hashed here (a hash with no GPU form, e.g. a
 * benchmark's reference, or the read-back a CPU-backed adapter uses).
 */
export interface ParamsHasher {
  ofParams(params: Float32Array): string;
  ofState(params: Float32Array, moments: readonly Float32Array[], t: number): string;
  readonly digests?: {
    readonly chunkBytes: number;
    root(byteLength: number, digests: Uint8Array): string;
    stateRoot(byteLength: number, digests: readonly Uint8Array[], t: number): string;
  };
}

/** `hasher`'s hash of `model`'s live parameters: chunk digests on the GPU if it has a GPU form, else a read-back. */
export function hashModelParams(model: Model, hasher: ParamsHasher): Promise<string> {
  const gpuForm = hasher.digests;
  if (!gpuForm) return model.withParams((params) => hasher.ofParams(params));
  return model.withParamDigests(gpuForm.chunkBytes, (digests) => gpuForm.root(model.totalElements * 4, digests));
}

/**
 * `hasher`'s `trainingStateHash` of `model`'s live state (params, moments, t): what an every-step rank
 * reports at each commit. Chunk digests on the GPU if the hasher has a GPU form, else a read-back.
 */
export function hashModelState(model: Model, hasher: ParamsHasher): Promise<string> {
  const gpuForm = hasher.digests;
  if (!gpuForm) return model.withState((params, moments, t) => hasher.ofState(params, moments, t));
  return model.withStateDigests(gpuForm.chunkBytes, (digests, t) =>
    gpuForm.stateRoot(model.totalElements * 4, digests, t),
  );
}

export interface ExportedState {
  /** Flat parameters, `model.totalElements` floats. */
  params: Float32Array;
  /** One flat array per moment, in `model.momentNames` order (AdamW: m, v; SGD: velocity). */
  moments: Float32Array[];
  /** Optimizer steps applied (t). */
  step: number;
}

const MAP_READ = 0x1;
const COPY_DST = 0x8;

export class TrainingState {
  private backup: { tensors: Tensor[]; step: number } | undefined;

  private readonly gpu: Gpu;

  constructor(
    readonly model: Model,
    private readonly hasher: ParamsHasher,
  ) {
    this.gpu = model.gpu;
  }

  /** Params first, then the moments: the buffers a state consists of, in export order. */
  private get stateTensors(): Tensor[] {
    return [this.model.params, ...this.model.moments];
  }

  /** Copy params and moments to the CPU with one submission and one buffer mapping. */
  async exportState(): Promise<ExportedState> {
    const tensors = this.stateTensors;
    const bytes = this.model.totalElements * 4;
    const device = this.gpu.device;
    const staging = device.createBuffer({
      label: 'training-state.export',
      size: bytes * tensors.length,
      usage: MAP_READ | COPY_DST,
    });
    const encoder = device.createCommandEncoder({ label: 'training-state.export' });
    tensors.forEach((t, i) => {
      encoder.copyBufferToBuffer(t.buffer, t.offset, staging, i * bytes, bytes);
    });
    const step = this.model.optimizerStep;
    device.queue.submit([encoder.finish()]);
    await staging.mapAsync(MAP_READ);
    const all = staging.getMappedRange().slice(0, bytes * tensors.length);
    staging.unmap();
    staging.destroy();
    const arrays = tensors.map((_, i) => new Float32Array(all, i * bytes, this.model.totalElements));
    return { params: arrays[0], moments: arrays.slice(1), step };
  }

  /** Overwrite params, moments and t (e.g. from a decoded snapshot or a peer's broadcast). */
  importState(state: ExportedState): void {
    const n = this.model.totalElements;
    const names = this.model.momentNames;
    if (state.params.length !== n)
      throw new Error(`importState: params has ${state.params.length} floats, the model has ${n}`);
    if (state.moments.length !== names.length)
      throw new Error(
        `importState: ${state.moments.length} moment buffers, the optimizer has ${names.length} (${names.join(', ')})`,
      );
    state.moments.forEach((m, i) => {
      if (m.length !== n) throw new Error(`importState: moment ${names[i]} has ${m.length} floats, the model has ${n}`);
    });
    if (!Number.isInteger(state.step) || state.step < 0)
      throw new Error(`importState: step ${state.step} must be a non-negative integer`);
    const tensors = this.stateTensors;
    [state.params, ...state.moments].forEach((data, i) => {
      writeTensor(this.gpu, tensors[i], data);
    });
    this.model.optimizerStep = state.step;
  }

  /** Record copies of params and moments into the backup buffers (allocated on first use). */
  recordSaveBackup(encoder: GPUCommandEncoder): void {
    if (!this.backup) {
      this.backup = {
        tensors: this.stateTensors.map((t) => createTensor(this.gpu, [this.model.totalElements], `${t.label}.backup`)),
        step: 0,
      };
    }
    const bytes = this.model.totalElements * 4;
    this.stateTensors.forEach((t, i) => {
      encoder.copyBufferToBuffer(t.buffer, t.offset, this.backup!.tensors[i].buffer, 0, bytes);
    });
    this.backup.step = this.model.optimizerStep;
  }

  /** Keep a GPU copy of the current state (the last completed step); no read-back. */
  saveBackup(): void {
    const encoder = this.gpu.device.createCommandEncoder({ label: 'training-state.save-backup' });
    this.recordSaveBackup(encoder);
    this.gpu.device.queue.submit([encoder.finish()]);
  }

  /** The optimizer step of the backup, or undefined before the first `saveBackup`. */
  get backupStep(): number | undefined {
    return this.backup?.step;
  }

  /** Put the backup back into params and moments, and t with it; no read-back. */
  restoreBackup(): void {
    if (!this.backup) throw new Error('restoreBackup: no backup saved');
    const backup = this.backup;
    const bytes = this.model.totalElements * 4;
    const encoder = this.gpu.device.createCommandEncoder({ label: 'training-state.restore-backup' });
    this.stateTensors.forEach((t, i) => {
      encoder.copyBufferToBuffer(backup.tensors[i].buffer, 0, t.buffer, t.offset, bytes);
    });
    this.gpu.device.queue.submit([encoder.finish()]);
    this.model.optimizerStep = backup.step;
  }

  /** The backup's parameters (the last committed step's), read back; local sync mode's θ_committed. */
  readBackupParams(): Promise<Float32Array> {
    if (!this.backup) throw new Error('readBackupParams: no backup saved');
    return this.model.readFloats(this.backup.tensors[0], this.model.totalElements);
  }

  /**
   * Overwrite the backup's parameters only (an overlapped outer step's committed consensus, which is never
   * the live state: web/worker/outer-calls.ts); its moments and t stay those of the last `saveBackup`.
   */
  writeBackupParams(params: Float32Array): void {
    const n = this.model.totalElements;
    if (!this.backup) throw new Error('writeBackupParams: no backup saved');
    if (params.length !== n) throw new Error(`writeBackupParams: ${params.length} floats, the model has ${n}`);
    writeTensor(this.gpu, this.backup.tensors[0], params);
  }

  /** Overwrite the live parameters only (the outer step of local sync mode); moments and t stay. */
  writeParams(params: Float32Array): void {
    const n = this.model.totalElements;
    if (params.length !== n) throw new Error(`writeParams: ${params.length} floats, the model has ${n}`);
    writeTensor(this.gpu, this.model.params, params);
  }

  /** Hash of the current parameter bytes: chunks hashed on the GPU, only their digests read back. */
  hashParams(): Promise<string> {
    return hashModelParams(this.model, this.hasher);
  }

  /** `trainingStateHash` of the current state (params, moments, t), as `hashModelState`. */
  hashState(): Promise<string> {
    return hashModelState(this.model, this.hasher);
  }

  /**
   * The backup (the last committed state: params, moments, t), read back: in local sync mode the state
   * a rank started its outer step from, whose `trainingStateHash` is its commitment.
   */
  async readBackup(): Promise<ExportedState> {
    if (!this.backup) throw new Error('readBackup: no backup saved');
    const n = this.model.totalElements;
    const arrays = await Promise.all(this.backup.tensors.map((t) => this.model.readFloats(t, n)));
    return { params: arrays[0], moments: arrays.slice(1), step: this.backup.step };
  }

  /** Free the backup buffers (the model's own buffers belong to the model). */
  destroy(): void {
    for (const t of this.backup?.tensors ?? []) t.buffer.destroy();
    this.backup = undefined;
  }
}

export function createTrainingState(model: Model, hasher: ParamsHasher): TrainingState {
  return new TrainingState(model, hasher);
}
