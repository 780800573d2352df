/**
 * The safetensors export, checked with a reader written here from the format's description (not with
 * the encoder's own code): 8-byte little-endian header length, a JSON header starting with '{' and
 * padded with spaces, tensors whose data_offsets are contiguous and fill the data section, F32 values
 * bit-equal to the snapshot's parameters at the layout's offsets. Expected names and shapes are written
 * out by hand from the model specs.
 */
import { describe, expect, it } from 'vitest';
import { hashParams } from '../../../../core/state/hash';
import {
  CNN_SPEC,
  MLP_SPEC,
  TINY_MLP_SPEC,
  parameterLayout,
  type ModelSpec,
} from '../../../../core/training/model-spec';
import { encodeSnapshot } from '../../../../core/state/snapshot';
import {
  checkpointToSafetensors,
  encodeSafetensors,
  SafetensorsError,
} from '../../../../coordinator/datasets/safetensors';
import { mulberry32 } from '../../../support/rng';

interface ParsedTensor {
  dtype: string;
  shape: number[];
  begin: number;
  end: number;
  values: Float32Array;
}

/** An independent safetensors reader (what safetensors.torch.load_file checks, minus torch). */
function readSafetensors(file: Uint8Array): {
  headerLength: number;
  metadata: Record<string, string>;
  tensors: Map<string, ParsedTensor>;
  order: string[];
} {
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const n = view.getBigUint64(0, true);
  expect(n).toBeLessThan(100_000_000n);
  const headerLength = Number(n);
  const headerText = new TextDecoder('utf-8', { fatal: true }).decode(file.subarray(8, 8 + headerLength));
  expect(headerText.startsWith('{')).toBe(true);
  // Only spaces may follow the JSON object.
  expect(headerText.trimEnd().endsWith('}')).toBe(true);
  const header = JSON.parse(headerText) as Record<string, any>;
  const dataStart = 8 + headerLength;
  const dataLength = file.length - dataStart;
  const metadata = (header.__metadata__ ?? {}) as Record<string, string>;
  const tensors = new Map<string, ParsedTensor>();
  const entries = Object.entries(header).filter(([name]) => name !== '__metadata__');
  for (const [name, info] of entries) {
    const [begin, end] = info.data_offsets as [number, number];
    const values = new Float32Array((end - begin) / 4);
    for (let i = 0; i < values.length; i++) values[i] = view.getFloat32(dataStart + begin + 4 * i, true);
    tensors.set(name, { dtype: info.dtype, shape: info.shape, begin, end, values });
  }
  // Contiguous, no holes, the whole data section covered (the reference reader refuses anything else).
  const sorted = [...tensors.entries()].sort((a, b) => a[1].begin - b[1].begin);
  let expectedBegin = 0;
  for (const [name, t] of sorted) {
    expect(t.begin, `${name} begins where the previous tensor ended`).toBe(expectedBegin);
    expectedBegin = t.end;
  }
  expect(expectedBegin).toBe(dataLength);
  return { headerLength, metadata, tensors, order: sorted.map(([name]) => name) };
}

function seededParams(spec: ModelSpec, seed: number): Float32Array {
  const params = new Float32Array(parameterLayout(spec).totalElements);
  const random = mulberry32(seed);
  for (let i = 0; i < params.length; i++) params[i] = (random() - 0.5) * 2;
  return params;
}

function snapshotBytes(spec: ModelSpec, params: Float32Array, step = 42): Uint8Array {
  return new Uint8Array(
    encodeSnapshot({
      spec,
      step,
      epoch: 1,
      cursor: 17,
      optimizer: { kind: 'adamw', t: step },
      params,
      moments: [new Float32Array(params.length).fill(0.5), new Float32Array(params.length).fill(0.25)],
    }),
  );
}

/** Hand-derived from the specs: dense [in, out], conv [kh, kw, cin, cout]. */
const EXPECTED_SHAPES: Record<string, [string, number[]][]> = {
  mlp: [
    ['layers.0.weight', [784, 256]],
    ['layers.0.bias', [256]],
    ['layers.1.weight', [256, 128]],
    ['layers.1.bias', [128]],
    ['layers.2.weight', [128, 10]],
    ['layers.2.bias', [10]],
  ],
  cnn: [
    ['layers.0.weight', [5, 5, 1, 16]],
    ['layers.0.bias', [16]],
    ['layers.2.weight', [5, 5, 16, 32]],
    ['layers.2.bias', [32]],
    // 28 → pool 14 → pool 7: 7·7·32 inputs.
    ['layers.4.weight', [1568, 128]],
    ['layers.4.bias', [128]],
    ['layers.5.weight', [128, 10]],
    ['layers.5.bias', [10]],
  ],
};

describe('safetensors export', () => {
  it.each([
    ['mlp', MLP_SPEC],
    ['cnn', CNN_SPEC],
  ] as const)('names and shapes of %s follow the model spec, with byte sizes of F32 tensors', (name, spec) => {
    const file = encodeSafetensors({ spec, params: seededParams(spec, 1), step: 3, epoch: 0, cursor: 384 });
    const parsed = readSafetensors(file);
    expect(parsed.order).toEqual(EXPECTED_SHAPES[name].map(([n]) => n));
    for (const [tensorName, shape] of EXPECTED_SHAPES[name]) {
      const t = parsed.tensors.get(tensorName)!;
      expect(t.dtype).toBe('F32');
      expect(t.shape).toEqual(shape);
      expect(t.end - t.begin).toBe(shape.reduce((a, b) => a * b, 1) * 4);
    }
    // Header padded to 8 bytes, so the data starts aligned.
    expect((8 + parsed.headerLength) % 8).toBe(0);
    const parameterCount = EXPECTED_SHAPES[name].reduce((sum, [, s]) => sum + s.reduce((a, b) => a * b, 1), 0);
    expect(file.length).toBe(8 + parsed.headerLength + parameterCount * 4);
  });

  it('tensor values are bit-equal to the checkpoint parameters at the layout offsets', () => {
    const spec = TINY_MLP_SPEC;
    const params = seededParams(spec, 7);
    // Values whose bits a careless conversion would change.
    params[0] = -0;
    params[1] = 1.401298464324817e-45; // smallest denormal
    params[2] = 3.4028234663852886e38;
    const layout = parameterLayout(spec);
    const lastBias = layout.entries[layout.entries.length - 1];
    params[lastBias.offset + lastBias.size - 1] = -123.5;
    // Alignment padding after a tensor must not leak into the file.
    params[lastBias.offset + lastBias.size] = 999;
    const exported = checkpointToSafetensors(snapshotBytes(spec, params, 42));
    expect(exported.filename).toBe('tabswarm-tiny-mlp-step42.safetensors');
    expect(exported.step).toBe(42);
    const parsed = readSafetensors(exported.bytes);
    const paramBits = new Uint32Array(params.buffer);
    // Offsets written by hand: tiny-mlp is 784·32 (aligned to 64) then 32 (→ 64) then 32·10 (→ 320) then 10.
    const offsets: Record<string, [number, number]> = {
      'layers.0.weight': [0, 784 * 32],
      'layers.0.bias': [25088, 32],
      'layers.1.weight': [25152, 320],
      'layers.1.bias': [25472, 10],
    };
    for (const [name, [offset, size]] of Object.entries(offsets)) {
      const t = parsed.tensors.get(name)!;
      expect(t.values.length).toBe(size);
      const bits = new Uint32Array(t.values.buffer);
      for (let i = 0; i < size; i++) {
        if (bits[i] !== paramBits[offset + i])
          throw new Error(`${name}[${i}]: ${t.values[i]} != ${params[offset + i]}`);
      }
    }
    expect(Object.is(parsed.tensors.get('layers.0.weight')!.values[0], -0)).toBe(true);
    expect(parsed.tensors.get('layers.1.bias')!.values[9]).toBe(-123.5);
    expect([...parsed.tensors.values()].some((t) => t.values.includes(999))).toBe(false);
  });

  it('metadata is all strings and identifies the step, the model and the parameter hash', () => {
    const spec = TINY_MLP_SPEC;
    const params = seededParams(spec, 9);
    const { bytes } = checkpointToSafetensors(snapshotBytes(spec, params, 5), { 'tabswarm.run': 'run-1' });
    const { metadata } = readSafetensors(bytes);
    for (const value of Object.values(metadata)) expect(typeof value).toBe('string');
    expect(metadata.format).toBe('pt');
    expect(metadata['tabswarm.model']).toBe('tiny-mlp');
    expect(metadata['tabswarm.step']).toBe('5');
    expect(metadata['tabswarm.epoch']).toBe('1');
    expect(metadata['tabswarm.cursor']).toBe('17');
    expect(metadata['tabswarm.run']).toBe('run-1');
    expect(metadata['tabswarm.params_hash']).toBe(hashParams(params));
    expect(JSON.parse(metadata['tabswarm.spec'])).toEqual(spec);
    expect(metadata['tabswarm.layout']).toMatch(/\[in, out\]/);
  });

  it('refuses parameters that do not fit the spec, naming both sizes', () => {
    const spec = TINY_MLP_SPEC;
    const total = parameterLayout(spec).totalElements;
    const call = () => encodeSafetensors({ spec, params: new Float32Array(total - 1), step: 1, epoch: 0, cursor: 0 });
    expect(call).toThrow(SafetensorsError);
    expect(call).toThrow(`params has ${total - 1} floats, the layout of model "tiny-mlp" has ${total}`);
  });

  it('refuses an invalid model spec and non-string metadata', () => {
    const bad = { ...TINY_MLP_SPEC, classes: 3 };
    expect(() => encodeSafetensors({ spec: bad, params: new Float32Array(10), step: 1, epoch: 0, cursor: 0 })).toThrow(
      /invalid model spec: .*last layer/,
    );
    const params = new Float32Array(parameterLayout(TINY_MLP_SPEC).totalElements);
    expect(() =>
      encodeSafetensors(
        { spec: TINY_MLP_SPEC, params, step: 1, epoch: 0, cursor: 0 },
        { answer: 42 as unknown as string },
      ),
    ).toThrow(/metadata value of "answer" must be a string/);
  });

  it('reports a corrupted or foreign checkpoint with the reason, never a half-written file', () => {
    const bytes = snapshotBytes(TINY_MLP_SPEC, seededParams(TINY_MLP_SPEC, 3));
    const flipped = bytes.slice();
    flipped[flipped.length - 5] ^= 0x40; // inside the last moment section
    expect(() => checkpointToSafetensors(flipped)).toThrow(SafetensorsError);
    expect(() => checkpointToSafetensors(flipped)).toThrow(/checkpoint cannot be read: .*hash mismatch/);
    expect(() => checkpointToSafetensors(bytes.subarray(0, bytes.length - 4))).toThrow(/truncated/);
    expect(() => checkpointToSafetensors(new TextEncoder().encode('PK\u0003\u0004 not a snapshot at all'))).toThrow(
      /not a tabswarm snapshot/,
    );
  });

  it('reads a checkpoint held in a Node Buffer slice (a view into a larger pool)', () => {
    const bytes = snapshotBytes(TINY_MLP_SPEC, seededParams(TINY_MLP_SPEC, 4));
    const pool = Buffer.alloc(bytes.length + 13);
    pool.set(bytes, 13);
    const slice = pool.subarray(13);
    expect(checkpointToSafetensors(slice).step).toBe(42);
  });
});
