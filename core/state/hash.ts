/**
 * The state hash: a tree of SHA-256 over the parameter bytes (`treeHash`: each 4 KiB chunk's SHA-256,
 * then SHA-256 of a domain prefix, the lengths and those digests), as 64 lower-case hex digits, identical
 * in every browser, on every GPU and in Node. Also plain SHA-256 (`hashBytes`) for everything else.
 *
 * Ranks report the state hash after each commit point and the commit rule requires the reports to agree
 * (docs/ARCHITECTURE.md, invariant 2: divergence is detected): in every-step mode the hash of the whole
 * training state (`trainingStateHash`: parameters, every optimizer moment, t), in local mode of θ_c and the
 * outer momentum (`stateHash`; each rank also commits to its own inner state with `trainingStateHash`).
 * Snapshots carry it too, and the coordinator stores an uploaded checkpoint (or passes a verification
 * upload on) only if the hash it computes over the uploaded bytes equals the hash the ranks reported at
 * that commit: no section a restore uses can differ. So it must be:
 * - defined on bytes, not on float values (-0 ≠ +0, NaN payloads differ: bit-identical parameters are
 *   the invariant);
 * - cryptographic (collision and second-preimage resistant): with a 64-bit non-cryptographic hash, a
 *   rank asked for a checkpoint could search for poisoned parameters that hash to the committed value;
 *   the tree hash is as strong as SHA-256 (the argument is at `treeHash`), so an uploaded state that
 *   matches the reported hash is the reported state;
 * - computable where the parameters are: on a hardware GPU the tabs' workers hash the chunks there
 *   (kernels/ops/sha256.wgsl, one invocation per chunk) and read back only the digests, then finish the root
 *   here (`treeRoot`; web/worker/params-hasher.ts); the same definition runs on the CPU (`chunkDigests`)
 *   where the bytes are in memory (snapshots, verification sketches, the coordinator's checkpoint check,
 *   tabs on a software adapter, where the "GPU" is slower than JS);
 * - synchronous on the CPU, the same code in Node and every browser (`decodeSnapshot` is synchronous;
 *   WebCrypto's `subtle.digest` is async and exists only in secure contexts), so this is `@noble/hashes`
 *   (pure JS, audited, no dependencies). Costs are measured by `npm run bench:hash` (bench/RESULTS.md).
 *
 * Inputs are hashed in place (typed-array views over the caller's bytes, no copy). Functions that the
 * coordinator calls on large uploads take an optional `Sha256Factory`: it passes node:crypto's native
 * SHA-256 (same digests, about 10× faster); a tab's worker on a software adapter passes SHA-256 in
 * WebAssembly to `hashParams` each step (web/worker/params-hasher.ts, about 4× faster in Chromium);
 * everything else uses the default.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '@noble/hashes/utils.js';

/** Hex digits of every hash this module returns (SHA-256: 32 bytes). */
export const HASH_HEX_DIGITS = 64;

/** An incremental SHA-256: `@noble/hashes`' `sha256.create()` or node:crypto's `createHash('sha256')`. */
export type Sha256Factory = () => { update(data: Uint8Array): unknown; digest(): Uint8Array };

/** The pure-JS SHA-256 every runtime has (synchronous, no secure context needed). */
export const nobleSha256: Sha256Factory = () => sha256.create();

function bytesOf(data: ArrayBuffer | ArrayBufferView): Uint8Array {
  return data instanceof ArrayBuffer
    ? new Uint8Array(data)
    : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** SHA-256 of raw bytes as the 32-byte digest (a snapshot's prefix stores its header's hash raw). */
export function sha256Digest(data: ArrayBuffer | ArrayBufferView, create: Sha256Factory = nobleSha256): Uint8Array {
  const h = create();
  h.update(bytesOf(data));
  return h.digest();
}

/** SHA-256 of raw bytes (a float32 tensor, a snapshot header, a broadcast state) as 64 lower-case hex digits. */
export function hashBytes(data: ArrayBuffer | ArrayBufferView): string {
  return bytesToHex(sha256(bytesOf(data)));
}

/**
 * Bytes per chunk of the tree hash. 4 KiB: the parameters of `mlp` (0.9 MB) are 225 chunks and those of
 * `gpt-tiny` (3.2 MB) 800, one GPU invocation each (65 SHA-256 compressions apiece, serial within an
 * invocation); the digests are 32/4096 = 0.8 % of the bytes, so the root, which the tab hashes in JS
 * after reading them back, costs under 1 % of a whole-buffer hash. Smaller chunks would give more
 * invocations and shorter ones but a larger JS root and read-back; larger ones fewer, longer invocations.
 * A multiple of 64 (SHA-256's block), so a chunk is whole blocks plus the padding block.
 */
export const HASH_CHUNK_BYTES = 4096;

/** The ASCII domain prefix of the tree hash's root message (a new definition gets a new prefix). */
export const TREE_HASH_DOMAIN = 'tabswarm-tree-sha256-v1';

/** Bytes of the chunk digests of `byteLength` bytes: 32 per chunk, the last chunk possibly short. */
export function chunkDigestBytes(byteLength: number, chunkBytes = HASH_CHUNK_BYTES): number {
  return Math.ceil(byteLength / chunkBytes) * 32;
}

/**
 * The SHA-256 of each `HASH_CHUNK_BYTES` chunk of `data`, concatenated (32 bytes per chunk, none for
 * no bytes): what the GPU kernel (kernels/ops/sha256.wgsl) computes with one invocation per chunk.
 */
export function chunkDigests(data: ArrayBuffer | ArrayBufferView, create: Sha256Factory = nobleSha256): Uint8Array {
  const bytes = bytesOf(data);
  const out = new Uint8Array(chunkDigestBytes(bytes.length));
  for (let c = 0; c * HASH_CHUNK_BYTES < bytes.length; c++) {
    const h = create();
    h.update(bytes.subarray(c * HASH_CHUNK_BYTES, (c + 1) * HASH_CHUNK_BYTES));
    out.set(h.digest(), c * 32);
  }
  return out;
}

/** One part of a tree-hashed state: its length in bytes and its `chunkDigests`. */
export interface HashedPart {
  readonly byteLength: number;
  readonly digests: Uint8Array;
}

/**
 * The root of the tree hash over parts given by their chunk digests (from `chunkDigests` on the CPU or
 * from the GPU kernel): SHA-256 of
 *
 *   TREE_HASH_DOMAIN (ASCII) ‖ u64 HASH_CHUNK_BYTES ‖ u64 part count ‖ u64 byteLength of each part
 *   ‖ the chunk digests of part 1 ‖ … ‖ those of the last part            (u64: little-endian)
 *
 * as 64 lower-case hex digits. Throws if a part's digests do not have the length its byte length needs.
 */
export function treeRoot(parts: readonly HashedPart[], create: Sha256Factory = nobleSha256): string {
  const prefix = new Uint8Array(TREE_HASH_DOMAIN.length + 8 * (2 + parts.length));
  const view = new DataView(prefix.buffer);
  for (let i = 0; i < TREE_HASH_DOMAIN.length; i++) prefix[i] = TREE_HASH_DOMAIN.charCodeAt(i);
  let at = TREE_HASH_DOMAIN.length;
  for (const n of [HASH_CHUNK_BYTES, parts.length, ...parts.map((p) => p.byteLength)]) {
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`treeRoot: ${n} is not a byte length`);
    view.setBigUint64(at, BigInt(n), true);
    at += 8;
  }
  const h = create();
  h.update(prefix);
  for (const p of parts) {
    if (p.digests.length !== chunkDigestBytes(p.byteLength)) {
      throw new Error(
        `treeRoot: ${p.digests.length} digest bytes for ${p.byteLength} bytes, expected ${chunkDigestBytes(p.byteLength)}`,
      );
    }
    h.update(p.digests);
  }
  return bytesToHex(h.digest());
}

/**
 * The tree hash of byte arrays (one part each): `treeRoot` of their `chunkDigests`. This is the state
 * hash, and the hash of every snapshot section. Why not plain SHA-256 of the bytes: SHA-256 of one long
 * message is a chain of compressions, so only a CPU can compute it, and a tab would have to read every
 * parameter back every step to report its hash. Chunks can be hashed in parallel, on the GPU, and only
 * the digests (0.8 % of the bytes) read back (kernels/ops/sha256.wgsl, docs/performance.md "The hash").
 *
 * It is as collision resistant as SHA-256 (a Merkle tree of fixed depth with length and domain binding):
 * suppose two different lists of parts have the same root. If the two root messages differ, they are a
 * SHA-256 collision. If they are equal, their fixed-width prefixes are equal, so the lists have the same
 * number of parts with the same byte lengths, hence the same chunk boundaries; and the same digests at
 * every position. The lists differ, so some chunk differs in content at a position where both have the
 * same length and the same digest: two different messages with one SHA-256, a collision again. So a
 * collision (or a second preimage) of the tree hash yields one of SHA-256, and a rank cannot find other
 * parameters that hash to the committed value. The lengths in the prefix also bind where a part ends
 * (params ‖ momentum cannot be re-split), and the domain string keeps the root distinct from the plain
 * SHA-256 (`hashBytes`) used elsewhere.
 */
export function treeHash(
  parts: readonly (ArrayBuffer | ArrayBufferView)[],
  create: Sha256Factory = nobleSha256,
): string {
  return treeRoot(
    parts.map((p) => ({ byteLength: bytesOf(p).length, digests: chunkDigests(p, create) })),
    create,
  );
}

/** The parameter hash ranks report and snapshots carry: the tree hash of the flat float32 parameter buffer. */
export function hashParams(params: Float32Array, create: Sha256Factory = nobleSha256): string {
  return treeHash([params], create);
}

/** The bytes a training state's optimizer step count `t` is hashed as: 8 bytes, a little-endian u64. */
export function stepCountBytes(t: number): Uint8Array {
  if (!Number.isSafeInteger(t) || t < 0) throw new Error(`stepCountBytes: ${t} is not a step count`);
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(t), true);
  return out;
}

/**
 * The hash of a whole training state: the tree hash of the parameters, each optimizer moment buffer
 * (AdamW's m and v, SGD's velocity, in `OPTIMIZER_MOMENTS` order) and the optimizer's step count t
 * (`stepCountBytes`), one part each: everything a restore puts back (core/state/snapshot.ts). In
 * every-step mode this is the agreed hash, what every rank reports at every commit: all ranks apply
 * the same sums to the same state, so their moments and t are bit-identical too, and a checkpoint or a
 * verification upload that differs in ANY section from what the ranks hold cannot match it. In local
 * mode it is one rank's commitment to its own inner state (docs/local-steps.md, "What is committed").
 */
export function trainingStateHash(
  params: Float32Array,
  moments: readonly Float32Array[],
  t: number,
  create: Sha256Factory = nobleSha256,
): string {
  return treeHash([params, ...moments, stepCountBytes(t)], create);
}

/**
 * `trainingStateHash` with the float buffers given by their chunk digests (params, then each moment,
 * each of `byteLength` bytes, hashed on the GPU by kernels/ops/sha256.wgsl): the same value.
 */
export function trainingStateHashOfDigests(
  byteLength: number,
  digests: readonly Uint8Array[],
  t: number,
  create: Sha256Factory = nobleSha256,
): string {
  const count = stepCountBytes(t);
  return treeRoot(
    [
      ...digests.map((d) => ({ byteLength, digests: d })),
      { byteLength: count.length, digests: chunkDigests(count, create) },
    ],
    create,
  );
}

/**
 * The committed state of local sync mode, what its ranks report at an outer step and what a local-mode
 * checkpoint is verified against: the tree hash of the parameters θ_c and the outer optimizer's momentum
 * u (two parts; without a momentum, of the parameters alone). The inner optimizer's moments and t are
 * each rank's own there (DiLoCo), so they are in each rank's own commitment (`trainingStateHash`), not
 * in this one.
 */
export function stateHash(
  params: Float32Array,
  outerMomentum?: Float32Array | null,
  create: Sha256Factory = nobleSha256,
): string {
  return treeHash(outerMomentum ? [params, outerMomentum] : [params], create);
}

/**
 * `stateHash` with the parameters given by their chunk digests (`paramsDigests`, computed on the GPU by
 * kernels/ops/sha256.wgsl over `paramsByteLength` bytes) instead of their bytes: the same value, so a tab
 * reports what a snapshot of its state hashes to. The outer momentum (local mode) lives in the worker's
 * memory and is hashed here.
 */
export function stateHashOfDigests(
  paramsByteLength: number,
  paramsDigests: Uint8Array,
  outerMomentum?: Float32Array | null,
  create: Sha256Factory = nobleSha256,
): string {
  const parts: HashedPart[] = [{ byteLength: paramsByteLength, digests: paramsDigests }];
  if (outerMomentum) parts.push({ byteLength: outerMomentum.byteLength, digests: chunkDigests(outerMomentum, create) });
  return treeRoot(parts, create);
}

/**
 * The state hash both ways, as the training worker and kernels/model/training-state.ts take it (injected:
 * `ParamsHasher` there): of the parameters alone or of the whole training state, from buffers in memory
 * or from the GPU's chunk digests of them.
 */
export const paramsHasher = {
  ofParams: (params: Float32Array): string => hashParams(params),
  ofState: (params: Float32Array, moments: readonly Float32Array[], t: number): string =>
    trainingStateHash(params, moments, t),
  digests: {
    chunkBytes: HASH_CHUNK_BYTES,
    root: (byteLength: number, digests: Uint8Array): string => stateHashOfDigests(byteLength, digests),
    stateRoot: (byteLength: number, digests: readonly Uint8Array[], t: number): string =>
      trainingStateHashOfDigests(byteLength, digests, t),
  },
} as const;
