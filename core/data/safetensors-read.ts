/**
 * Reading a `.safetensors` file (u64 LE header length, a JSON header of tensors and an optional
 * `__metadata__` of strings, then the data): strict about every offset, since the bytes may come from
 * anyone. Pure (no Node), so the coordinator (user datasets) and the admin page (the model it samples
 * from) read with the same code. The writer of model weights is coordinator/datasets/safetensors.ts.
 */

// TextDecoder exists wherever the core runs; the core's tsconfig has no DOM or Node types (as snapshot.ts).
declare const TextDecoder: { new (label: 'utf-8', options: { fatal: boolean }): { decode(bytes: Uint8Array): string } };

/** Bytes per element of the dtypes read here. */
export const SAFETENSORS_DTYPE_BYTES: Readonly<Record<string, number>> = {
  F32: 4,
  U8: 1,
  I32: 4,
  I64: 8,
  U16: 2,
  I16: 2,
  U32: 4,
  I8: 1,
};

export interface RawTensor {
  dtype: string;
  shape: number[];
  /** A view into the file's bytes. */
  data: Uint8Array;
}

export interface SafetensorsContents {
  tensors: Record<string, RawTensor>;
  /** `__metadata__` (string values only; others are dropped), empty when absent. */
  metadata: Record<string, string>;
}

/** Parse a safetensors file's header and tensors (views into `bytes`); `file` names it in every error. */
export function readSafetensors(bytes: Uint8Array, file: string): SafetensorsContents {
  if (bytes.length < 8) throw new Error(`${file}: not a safetensors file (${bytes.length} bytes)`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerBytes = Number(view.getBigUint64(0, true));
  if (headerBytes < 2 || 8 + headerBytes > bytes.length)
    throw new Error(`${file}: not a safetensors file (header length ${headerBytes} of a ${bytes.length}-byte file)`);
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(8, 8 + headerBytes)));
  } catch {
    throw new Error(`${file}: not a safetensors file (the header is not JSON)`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header))
    throw new Error(`${file}: not a safetensors file (the header is not a JSON object)`);
  const data = bytes.subarray(8 + headerBytes);
  const tensors: Record<string, RawTensor> = {};
  const metadata: Record<string, string> = {};
  for (const [name, value] of Object.entries(header)) {
    if (name === '__metadata__') {
      for (const [k, v] of Object.entries((value ?? {}) as Record<string, unknown>))
        if (typeof v === 'string') metadata[k] = v;
      continue;
    }
    const t = (value ?? {}) as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    const shape = t.shape as number[];
    const offsets = t.data_offsets as number[];
    const size = SAFETENSORS_DTYPE_BYTES[String(t.dtype)];
    if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0) || !Array.isArray(offsets) || !size)
      throw new Error(`${file}: tensor ${name} has a malformed entry (dtype ${String(t.dtype)})`);
    const [begin, end] = offsets;
    const need = shape.reduce((a, b) => a * b, 1) * size;
    if (!(Number.isInteger(begin) && Number.isInteger(end) && 0 <= begin && begin <= end && end <= data.length))
      throw new Error(`${file}: tensor ${name}: data offsets [${offsets}] outside the ${data.length} data bytes`);
    if (end - begin !== need)
      throw new Error(
        `${file}: tensor ${name}: ${String(t.dtype)} [${shape}] needs ${need} bytes, the offsets give ${end - begin}`,
      );
    tensors[name] = { dtype: String(t.dtype), shape, data: data.subarray(begin, end) };
  }
  return { tensors, metadata };
}
