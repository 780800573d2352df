/**
 * The state hash: SHA-256 of parameter bytes, as 64 lower-case hex digits, identical in every browser and in Node.
 *
 * Ranks report this hash of their parameters after each step and the commit rule requires the
 * reports to agree (docs/ARCHITECTURE.md, invariant 2: divergence is detected); snapshots carry it too,
 * and the coordinator stores an uploaded checkpoint only if the hash it computes over the uploaded bytes
 * equals the hash the ranks reported at that commit. So it must be:
 * - defined on bytes, not on float values (-0 ≠ +0, NaN payloads differ: bit-identical parameters are
 *   the invariant);
 * - cryptographic (collision and second-preimage resistant): with a 64-bit non-cryptographic hash, a
 *   rank asked for a checkpoint could search for poisoned parameters that hash to the committed value;
 *   with SHA-256 an uploaded state that matches the reported hash is the reported state;
 * - synchronous, the same code in Node and every browser: the worker hashes the parameters inside the
 *   callback that has their staging buffer mapped (`Model.withParams`, no copy), and `decodeSnapshot`
 *   is synchronous. WebCrypto's `subtle.digest` is async (and exists only in secure contexts), so this is
 *   `@noble/hashes` (pure JS, audited, no dependencies). Its cost (~10× the old 64-bit hash in Node, ~30× in
 *   Chromium, per MB and per training step) is measured by `npm run bench:hash` (bench/RESULTS.md).
 *
 * Inputs are hashed in place (typed-array views over the caller's bytes, no copy), and multi-part
 * states are fed to one incremental hash, which equals SHA-256 of the concatenated bytes. Functions that
 * the coordinator calls on large uploads take an optional `Sha256Factory`: it passes node:crypto's native
 * SHA-256 (same digests, about 10× faster), the tabs use the default.
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

/** SHA-256 of several byte ranges in order, without joining them: equal to `hashBytes` of their concatenation. */
export function hashParts(
  parts: readonly (ArrayBuffer | ArrayBufferView)[],
  create: Sha256Factory = nobleSha256,
): string {
  const h = create();
  for (const part of parts) h.update(bytesOf(part));
  return bytesToHex(h.digest());
}

/** The parameter hash ranks report and snapshots carry: SHA-256 of the flat float32 parameter buffer's bytes. */
export function hashParams(params: Float32Array): string {
  return hashBytes(params);
}

/**
 * The hash of a committed state, what ranks report at a commit point and what a checkpoint is verified
 * against: SHA-256 of the parameters' bytes alone (every-step mode, = `hashParams`), or of the parameters'
 * bytes followed by the outer optimizer's momentum bytes (local mode: the momentum belongs to the committed
 * state, so ranks must agree on it too). The optimizer's moments are not part of it (they are not read back
 * per step); a snapshot's sections each carry their own SHA-256.
 */
export function stateHash(
  params: Float32Array,
  outerMomentum?: Float32Array | null,
  create: Sha256Factory = nobleSha256,
): string {
  return hashParts(outerMomentum ? [params, outerMomentum] : [params], create);
}
