/**
 * An independent reference for the tree state hash (core/state/hash.ts `treeHash`), written from
 * its definition with node:crypto (OpenSSL), not with the code under test: each 4,096-byte chunk's
 * SHA-256, then SHA-256 of "tabswarm-tree-sha256-v1" ‖ u64 4096 ‖ u64 part count ‖ u64 each part's byte
 * length ‖ all chunk digests (u64 little-endian). The constants are spelled out here on purpose: a change
 * of the definition must fail the tests that pin it.
 */
import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';

const CHUNK = 4096;

const bytesOf = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** The SHA-256 of each chunk of `bytes` (4 KiB, the tree hash's, unless the kernel tests pick another size), concatenated. */
export function chunkDigestsReference(data: ArrayBufferView, chunkBytes = CHUNK): Buffer {
  const bytes = bytesOf(data);
  const out: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += chunkBytes)
    out.push(
      createHash('sha256')
        .update(bytes.subarray(at, at + chunkBytes))
        .digest(),
    );
  return Buffer.concat(out);
}

/** The tree hash of `parts` (one part: the parameters; two: parameters and outer momentum), hex. */
export function treeHashReference(...parts: ArrayBufferView[]): string {
  const lengths = Buffer.alloc(8 * (2 + parts.length));
  lengths.writeBigUInt64LE(BigInt(CHUNK), 0);
  lengths.writeBigUInt64LE(BigInt(parts.length), 8);
  parts.forEach((p, i) => {
    lengths.writeBigUInt64LE(BigInt(p.byteLength), 16 + 8 * i);
  });
  const h = createHash('sha256').update(Buffer.from('tabswarm-tree-sha256-v1', 'ascii')).update(lengths);
  for (const p of parts) h.update(chunkDigestsReference(p));
  return h.digest('hex');
}
