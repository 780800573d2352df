import { Buffer } from 'node:buffer';
import { describe, expect, it } from 'vitest';
import { hashParams, murmur3Words } from '../../coordinator/core/hash';
import { MLP_SPEC, parameterLayout, type ModelSpec } from '../../coordinator/core/model-spec';
import { decodeSnapshot, encodeSnapshot, SnapshotError, type TrainingSnapshot } from '../../coordinator/core/snapshot';
import { mulberry32, randomArray } from '../support/rng';

/** Small enough that decoding every single-byte corruption of the file takes well under a second. */
const SMALL_SPEC: ModelSpec = {
  name: 'small',
  input: [2, 3, 1],
  classes: 2,
  layers: [
    { type: 'dense', units: 5, activation: 'relu' },
    { type: 'dense', units: 2, activation: 'none' },
  ],
};

function snapshotOf(spec: ModelSpec, kind: 'adamw' | 'sgd', seed: number): TrainingSnapshot {
  const rand = mulberry32(seed);
  const n = parameterLayout(spec).totalElements;
  const moments = kind === 'adamw' ? [randomArray(rand, n), randomArray(rand, n, 0, 1)] : [randomArray(rand, n)];
  return {
    spec,
    step: 1234,
    epoch: 3,
    cursor: 40_960,
    optimizer: { kind, t: 1234 },
    params: randomArray(rand, n),
    moments,
  };
}

const bytesOf = (a: Float32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** Index of the first differing byte, or -1 (vitest's deep equality is too slow for megabytes). */
function firstByteDifference(a: Float32Array, b: Float32Array): number {
  const x = bytesOf(a);
  const y = bytesOf(b);
  if (x.length !== y.length) return Math.min(x.length, y.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
  return -1;
}

/** Rewrite the JSON header of an encoded snapshot (keeping the prefix checksum valid) to reach deeper checks. */
function withHeader(encoded: ArrayBuffer, edit: (header: any) => void): Uint8Array {
  const bytes = new Uint8Array(encoded);
  const view = new DataView(encoded);
  const headerLength = view.getUint32(8, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(16, 16 + headerLength)));
  edit(header);
  const json = new TextEncoder().encode(JSON.stringify(header));
  if (json.length > headerLength) throw new Error('test edit made the header longer than its padding');
  const out = bytes.slice();
  out.fill(0x20, 16, 16 + headerLength);
  out.set(json, 16);
  new DataView(out.buffer).setUint32(12, murmur3Words(new Uint32Array(out.buffer.slice(16, 16 + headerLength))), true);
  return out;
}

function expectSnapshotError(fn: () => unknown, pattern: RegExp): void {
  let error: unknown;
  try {
    fn();
  } catch (e) {
    error = e;
  }
  expect(error, 'decode should have thrown').toBeInstanceOf(SnapshotError);
  expect((error as Error).message).toMatch(pattern);
}

describe('snapshot round trip', () => {
  it.each(['adamw', 'sgd'] as const)('restores every field and every bit (%s, mlp)', (kind) => {
    const original = snapshotOf(MLP_SPEC, kind, 7);
    original.params[0] = -0; // bit patterns, not values, must survive
    const encoded = encodeSnapshot(original);
    const decoded = decodeSnapshot(encoded);
    expect(decoded.spec).toEqual(MLP_SPEC);
    expect(decoded.layout).toEqual(parameterLayout(MLP_SPEC));
    expect({ step: decoded.step, epoch: decoded.epoch, cursor: decoded.cursor, optimizer: decoded.optimizer }).toEqual({
      step: 1234,
      epoch: 3,
      cursor: 40_960,
      optimizer: { kind, t: 1234 },
    });
    expect(firstByteDifference(decoded.params, original.params)).toBe(-1);
    expect(decoded.moments.length).toBe(original.moments.length);
    decoded.moments.forEach((m, i) => {
      expect(firstByteDifference(m, original.moments[i])).toBe(-1);
    });
    expect(decoded.paramsHash).toBe(hashParams(original.params));
    expect(decoded.header.sections.map((s) => s.name)).toEqual(
      kind === 'adamw' ? ['params', 'm', 'v'] : ['params', 'velocity'],
    );
    // Sections are 4-byte aligned so they decode as views, without copying a large checkpoint.
    expect(decoded.params.buffer).toBe(encoded);
    expect(encoded.byteLength).toBe(
      decoded.header.sections[0].byteOffset + (1 + original.moments.length) * original.params.byteLength,
    );
  });

  it('decodes from a Uint8Array at an unaligned offset (a received message slice)', () => {
    const original = snapshotOf(SMALL_SPEC, 'adamw', 3);
    const encoded = new Uint8Array(encodeSnapshot(original));
    const holder = new Uint8Array(encoded.length + 3);
    holder.set(encoded, 1);
    const decoded = decodeSnapshot(holder.subarray(1, 1 + encoded.length));
    expect(firstByteDifference(decoded.params, original.params)).toBe(-1);
    expect(firstByteDifference(decoded.moments[1], original.moments[1])).toBe(-1);
  });

  it('starts with the magic, version 1 and a header length that is a multiple of 4', () => {
    const encoded = encodeSnapshot(snapshotOf(SMALL_SPEC, 'sgd', 1));
    const view = new DataView(encoded);
    expect(new TextDecoder().decode(new Uint8Array(encoded, 0, 4))).toBe('TSWS');
    expect(view.getUint32(4, true)).toBe(1);
    expect(view.getUint32(8, true) % 4).toBe(0);
  });

  it('refuses to encode buffers that do not fit the layout or the optimizer', () => {
    const good = snapshotOf(SMALL_SPEC, 'adamw', 1);
    expect(() => encodeSnapshot({ ...good, params: good.params.subarray(1) })).toThrow(/params has/);
    expect(() => encodeSnapshot({ ...good, moments: [good.moments[0]] })).toThrow(/needs 2 moment buffers/);
    expect(() => encodeSnapshot({ ...good, step: -1 })).toThrow(/invalid header/);
  });
});

describe('snapshot corruption is detected', () => {
  const encoded = encodeSnapshot(snapshotOf(SMALL_SPEC, 'adamw', 11));
  const bytes = new Uint8Array(encoded);

  it('rejects a single flipped bit anywhere in the file', () => {
    const undetected: number[] = [];
    for (let i = 0; i < bytes.length; i++) {
      const copy = bytes.slice();
      copy[i] ^= 1 << (i % 8);
      try {
        decodeSnapshot(copy);
        undetected.push(i);
      } catch (e) {
        if (!(e instanceof SnapshotError)) throw e;
      }
    }
    expect(undetected).toEqual([]);
  });

  it('names the problem: magic, version, truncation, trailing bytes, hashes', () => {
    const badMagic = bytes.slice();
    badMagic[0] = 'X'.charCodeAt(0);
    expectSnapshotError(() => decodeSnapshot(badMagic), /bad magic "XSWS"/);

    const badVersion = bytes.slice();
    new DataView(badVersion.buffer).setUint32(4, 2, true);
    expectSnapshotError(() => decodeSnapshot(badVersion), /unsupported version 2/);

    expectSnapshotError(() => decodeSnapshot(bytes.subarray(0, 10)), /truncated/);
    expectSnapshotError(() => decodeSnapshot(bytes.subarray(0, 40)), /truncated: header needs/);
    expectSnapshotError(() => decodeSnapshot(bytes.subarray(0, bytes.length - 4)), /truncated: section v ends/);
    const longer = new Uint8Array(bytes.length + 4);
    longer.set(bytes);
    expectSnapshotError(() => decodeSnapshot(longer), /4 unexpected bytes/);

    const headerLength = new DataView(encoded).getUint32(8, true);
    const badParams = bytes.slice();
    badParams[16 + headerLength + 5] ^= 0x10;
    expectSnapshotError(() => decodeSnapshot(badParams), /section params hash mismatch/);
    const badMoment = bytes.slice();
    badMoment[bytes.length - 1] ^= 0x01;
    expectSnapshotError(() => decodeSnapshot(badMoment), /section v hash mismatch/);
    const badHeader = bytes.slice();
    badHeader[20] ^= 0x01;
    expectSnapshotError(() => decodeSnapshot(badHeader), /header checksum mismatch/);
  });

  it('checks the header against the model and the optimizer, even when its checksum is valid', () => {
    expectSnapshotError(
      () => decodeSnapshot(withHeader(encoded, (h) => (h.layout[1].offset = 0))),
      /layout in the header does not match/,
    );
    expectSnapshotError(
      () => decodeSnapshot(withHeader(encoded, (h) => (h.optimizer.kind = 'sgd'))),
      /do not match optimizer sgd/,
    );
    expectSnapshotError(
      () => decodeSnapshot(withHeader(encoded, (h) => (h.model.spec.layers[1].units = 3))),
      /invalid model spec/,
    );
    expectSnapshotError(
      () => decodeSnapshot(withHeader(encoded, (h) => (h.model.name = 'mlp'))),
      /differs from its spec's name/,
    );
    expectSnapshotError(
      () => decodeSnapshot(withHeader(encoded, (h) => (h.paramsHash = '0'.repeat(16)))),
      /paramsHash differs/,
    );
    expectSnapshotError(() => decodeSnapshot(withHeader(encoded, (h) => (h.step = 'x'))), /invalid header: step/);
    expectSnapshotError(
      () => decodeSnapshot(withHeader(encoded, (h) => (h.sections[1].byteOffset += 4))),
      /section m starts at byte/,
    );
  });
});

describe('decodeSnapshot on a Node Buffer inside a larger allocation', () => {
  it('decodes it (Buffer#slice is a view, not a copy)', () => {
    const n = parameterLayout(MLP_SPEC).totalElements;
    const params = new Float32Array(n).map((_, i) => Math.sin(i));
    const encoded = encodeSnapshot({
      spec: MLP_SPEC,
      step: 3,
      epoch: 0,
      cursor: 384,
      optimizer: { kind: 'sgd', t: 3 },
      params,
      moments: [new Float32Array(n)],
    });
    const pool = Buffer.alloc(encoded.byteLength + 100);
    Buffer.from(encoded).copy(pool, 37);
    const view = pool.subarray(37, 37 + encoded.byteLength);
    expect(decodeSnapshot(view).step).toBe(3);
  });
});
