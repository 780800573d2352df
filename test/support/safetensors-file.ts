/**
 * A `.safetensors` file written by hand from the format (u64 LE header length, JSON header, data back to
 * back), for any tensors a test makes up — what a user exporting data from Python would produce. The
 * product's own writer (coordinator/datasets/safetensors.ts) exports model weights only.
 */
export interface RawTensor {
  dtype: string;
  shape: number[];
  data: Uint8Array;
}

export function safetensorsFile(tensors: Record<string, RawTensor>, metadata = { by: 'test' }): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const [name, t] of Object.entries(tensors)) {
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.length] };
    offset += t.data.length;
  }
  const json = Buffer.from(JSON.stringify(header));
  const out = Buffer.alloc(8 + json.length + offset);
  out.writeBigUInt64LE(BigInt(json.length), 0);
  json.copy(out, 8);
  let at = 8 + json.length;
  for (const t of Object.values(tensors)) {
    out.set(t.data, at);
    at += t.data.length;
  }
  return out;
}
