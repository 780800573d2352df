/**
 * Reading NumPy's `.npy` format (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html)
 * strictly, for tensors datasets exported with `np.save`:
 *
 *   bytes 0..6   magic `\x93NUMPY`
 *   bytes 6, 7   format version: 1.0 (header length u16 LE at 8), 2.0 or 3.0 (u32 LE at 8)
 *   then         the header: a Python dict literal, ASCII (3.0: UTF-8), padded with spaces and ending in
 *                '\n': `{'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }`
 *   then         the data, exactly prod(shape) × itemsize bytes, C order
 *
 * Accepted: exactly the keys descr, fortran_order and shape; `fortran_order: False`; a shape of
 * non-negative integers; the little-endian (or byte-sized) numeric dtypes in NPY_DTYPES, named as
 * safetensors names them so the dataset loader checks one kind of tensor. Everything else (big-endian,
 * Fortran order, objects, structured dtypes, extra keys, trailing bytes, a short file) is one error line
 * naming the file. Pure: bytes in, a tensor view out.
 */
import type { RawTensor } from '../../core/data/safetensors-read';

/** The dtypes read, by NumPy descr → [safetensors dtype name, bytes per element]. */
export const NPY_DTYPES: Readonly<Record<string, readonly [string, number]>> = {
  '<f4': ['F32', 4],
  '|u1': ['U8', 1],
  '<u1': ['U8', 1],
  '|i1': ['I8', 1],
  '<i1': ['I8', 1],
  '<u2': ['U16', 2],
  '<i2': ['I16', 2],
  '<u4': ['U32', 4],
  '<i4': ['I32', 4],
  '<i8': ['I64', 8],
};

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY

type PyValue = string | boolean | number[];

/** A tiny reader of the header's literal: `{ 'key': value, … }` with string, True/False or int-tuple values. */
class HeaderReader {
  private i = 0;
  constructor(
    private readonly s: string,
    private readonly fail: (why: string) => never,
  ) {}

  private space(): void {
    while (this.i < this.s.length && ' \t'.includes(this.s[this.i])) this.i++;
  }

  private eat(c: string): boolean {
    this.space();
    if (this.s[this.i] !== c) return false;
    this.i++;
    return true;
  }

  private expect(c: string): void {
    if (!this.eat(c)) this.fail(`expected '${c}' at character ${this.i} of the header`);
  }

  private string(): string {
    this.space();
    const quote = this.s[this.i];
    if (quote !== "'" && quote !== '"') this.fail(`expected a quoted string at character ${this.i} of the header`);
    const end = this.s.indexOf(quote, this.i + 1);
    if (end < 0) this.fail('an unterminated string in the header');
    const text = this.s.slice(this.i + 1, end);
    if (text.includes('\\')) this.fail('escapes in header strings are not supported');
    this.i = end + 1;
    return text;
  }

  private tuple(): number[] {
    this.expect('(');
    const out: number[] = [];
    while (!this.eat(')')) {
      this.space();
      const m = /^\d+/.exec(this.s.slice(this.i));
      if (!m) this.fail(`the shape holds something other than a non-negative integer at character ${this.i}`);
      const n = Number(m[0]);
      if (!Number.isSafeInteger(n)) this.fail(`shape dimension ${m[0]} is too large`);
      out.push(n);
      this.i += m[0].length;
      if (!this.eat(',')) {
        this.expect(')');
        if (out.length === 1) this.fail('a one-dimensional shape is written (n,), not (n)');
        break;
      }
    }
    return out;
  }

  private value(): PyValue {
    this.space();
    const rest = this.s.slice(this.i);
    if (rest.startsWith('True') || rest.startsWith('False')) {
      const word = rest.startsWith('True') ? 'True' : 'False';
      this.i += word.length;
      return word === 'True';
    }
    if (rest.startsWith('(')) return this.tuple();
    return this.string();
  }

  dict(): Map<string, PyValue> {
    const out = new Map<string, PyValue>();
    this.expect('{');
    while (!this.eat('}')) {
      const key = this.string();
      if (out.has(key)) this.fail(`the header names '${key}' twice`);
      this.expect(':');
      out.set(key, this.value());
      if (!this.eat(',')) {
        this.expect('}');
        break;
      }
    }
    this.space();
    if (this.s.slice(this.i) !== '\n') this.fail('the header does not end in a newline after the dict');
    return out;
  }
}

/** Parse one `.npy` file (its array as a view into `bytes`); `file` names it in every error. */
export function parseNpy(bytes: Uint8Array, file: string): RawTensor {
  const fail = (why: string): never => {
    throw new Error(`${file}: not a usable .npy file (${why})`);
  };
  if (bytes.length < 10 || MAGIC.some((b, i) => bytes[i] !== b)) fail('no \\x93NUMPY magic at the start');
  const [major, minor] = [bytes[6], bytes[7]];
  if (![1, 2, 3].includes(major) || minor !== 0) fail(`format version ${major}.${minor}; 1.0, 2.0 and 3.0 are read`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (major > 1 && bytes.length < 12) fail('the file ends inside the header length');
  const headerLength = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  if (start + headerLength > bytes.length)
    fail(`a header of ${headerLength} bytes does not fit the ${bytes.length}-byte file`);
  const raw = bytes.subarray(start, start + headerLength);
  if (major < 3 && raw.some((b) => b > 0x7f)) fail('the header is not ASCII');
  let text = '';
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(raw);
  } catch {
    fail('the header is not UTF-8');
  }
  const header = new HeaderReader(text, fail).dict();
  const keys = [...header.keys()].sort().join(', ');
  if (keys !== 'descr, fortran_order, shape') fail(`the header has keys ${keys}; expected descr, fortran_order, shape`);
  const descr = header.get('descr');
  const fortran = header.get('fortran_order');
  const shape = header.get('shape');
  if (typeof descr !== 'string') fail('descr is not a string (structured dtypes are not read)');
  if (typeof fortran !== 'boolean') fail('fortran_order is not True or False');
  if (!Array.isArray(shape)) fail('shape is not a tuple');
  if (fortran) fail('Fortran order; save np.ascontiguousarray(a) instead');
  const dtype = NPY_DTYPES[descr as string];
  if (!dtype) {
    const hint = (descr as string).startsWith('>') ? ' (big-endian: save a.astype(a.dtype.newbyteorder("<")))' : '';
    fail(`dtype '${descr}'${hint}; read are ${Object.keys(NPY_DTYPES).join(' ')}`);
  }
  const [name, size] = dtype;
  const dims = shape as number[];
  let count = 1;
  for (const d of dims) count *= d;
  if (!Number.isSafeInteger(count * size)) fail(`shape (${dims}) is too large`);
  const data = bytes.subarray(start + headerLength);
  if (data.length !== count * size)
    fail(`'${descr}' shape (${dims}) needs ${count * size} data bytes, the file has ${data.length}`);
  return { dtype: name, shape: dims, data };
}
