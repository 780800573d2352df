/**
 * A `.npy` file written by hand from NumPy's format description (magic, version, header length, a
 * Python dict literal padded with spaces to a multiple of 64 bytes and ending in '\n', then the data),
 * as `np.save` writes it: for arrays a test makes up, e.g. a Fashion-MNIST export. test/unit/coordinator/datasets/npy.test.ts
 * checks it against bytes NumPy itself wrote.
 */
export function npyFile(
  descr: string,
  shape: readonly number[],
  data: Uint8Array,
  options: { fortranOrder?: boolean; version?: 1 | 2 } = {},
): Uint8Array {
  const version = options.version ?? 1;
  const tuple = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  const dict = `{'descr': '${descr}', 'fortran_order': ${options.fortranOrder ? 'True' : 'False'}, 'shape': ${tuple}, }`;
  const prefix = version === 1 ? 10 : 12;
  const padded = Math.ceil((prefix + dict.length + 1) / 64) * 64 - prefix;
  return npyWithHeader(dict.padEnd(padded - 1, ' '), data, version);
}

/** The bytes of a `.npy` file whose header is `dict` (taken as it is, unpadded) and a '\n', then `data`. */
export function npyWithHeader(dict: string, data: Uint8Array, version = 1): Uint8Array {
  const prefix = version === 1 ? 10 : 12;
  const header = Buffer.from(`${dict}\n`, 'latin1');
  const out = Buffer.alloc(prefix + header.length + data.length);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, version, 0]);
  if (version === 1) out.writeUInt16LE(header.length, 8);
  else out.writeUInt32LE(header.length, 8);
  out.set(header, prefix);
  out.set(data, prefix + header.length);
  return new Uint8Array(out);
}
