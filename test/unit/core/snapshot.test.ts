import { Buffer } from 'node:buffer';
import { describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { hashParams, stateHash, trainingStateHash } from '../../../core/state/hash';
import { nodeSha256 } from '../../../node/sha256';
import { treeHashReference } from '../../support/tree-hash-reference';
import { MLP_SPEC, parameterLayout, type ModelSpec } from '../../../core/training/model-spec';
import { decodeSnapshot, encodeSnapshot, SnapshotError, type TrainingSnapshot } from '../../../core/state/snapshot';
import { mulberry32, randomArray } from '../../support/rng';

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

/** The prefix (versions 2 and 3): magic, version, header length, then the header's SHA-256 (32 bytes) at 12..44. */
const HEADER_AT = 44;
const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest();

/** Rewrite the JSON header of an encoded snapshot (keeping the prefix's header hash valid) to reach deeper checks. */
function withHeader(encoded: ArrayBuffer, edit: (header: any) => void): Uint8Array {
  const bytes = new Uint8Array(encoded);
  const view = new DataView(encoded);
  const headerLength = view.getUint32(8, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(HEADER_AT, HEADER_AT + headerLength)));
  edit(header);
  const json = new TextEncoder().encode(JSON.stringify(header));
  if (json.length > headerLength) throw new Error('test edit made the header longer than its padding');
  const out = bytes.slice();
  out.fill(0x20, HEADER_AT, HEADER_AT + headerLength);
  out.set(json, HEADER_AT);
  out.set(sha256(out.subarray(HEADER_AT, HEADER_AT + headerLength)), 12);
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

  it('starts with the magic, version 3, a header length that is a multiple of 4 and the header SHA-256', () => {
    const encoded = encodeSnapshot(snapshotOf(SMALL_SPEC, 'sgd', 1));
    const view = new DataView(encoded);
    const bytes = new Uint8Array(encoded);
    expect(new TextDecoder().decode(bytes.subarray(0, 4))).toBe('TSWS');
    expect(view.getUint32(4, true)).toBe(3);
    const headerLength = view.getUint32(8, true);
    expect(headerLength % 4).toBe(0);
    // Checked with node:crypto, not with the hash module under test.
    expect(
      Buffer.from(bytes.subarray(12, HEADER_AT)).equals(sha256(bytes.subarray(HEADER_AT, HEADER_AT + headerLength))),
    ).toBe(true);
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(HEADER_AT, HEADER_AT + headerLength)));
    for (const s of header.sections) {
      expect(s.hash).toBe(treeHashReference(bytes.subarray(s.byteOffset, s.byteOffset + s.byteLength)));
    }
    expect(header.paramsHash).toBe(header.sections[0].hash);
  });

  it('carries the local-mode state hash: the tree hash of params and outer momentum, checked with node:crypto', () => {
    const original = snapshotOf(SMALL_SPEC, 'sgd', 5);
    const outer = original.params.map((x) => -x / 3);
    const decoded = decodeSnapshot(encodeSnapshot({ ...original, outer }));
    expect(decoded.stateHash).toBe(treeHashReference(original.params, outer));
    expect(decoded.stateHash).toBe(stateHash(original.params, outer));
    expect(decoded.stateHash).not.toBe(decoded.paramsHash);
    // The coordinator decodes with node:crypto: the same hashes.
    const native = decodeSnapshot(encodeSnapshot({ ...original, outer }), { sha256: nodeSha256 });
    expect({ params: native.paramsHash, state: native.stateHash }).toEqual({
      params: decoded.paramsHash,
      state: decoded.stateHash,
    });
  });

  it('carries the every-step state hash: params, every moment and t (a forged moment or t is another hash)', () => {
    const original = snapshotOf(SMALL_SPEC, 'adamw', 9);
    const decoded = decodeSnapshot(encodeSnapshot(original));
    const t = Buffer.alloc(8);
    t.writeBigUInt64LE(1234n);
    expect(decoded.stateHash).toBe(treeHashReference(original.params, ...original.moments, t));
    expect(decoded.trainingHash).toBe(decoded.stateHash);
    const forgedM = original.moments[0].slice();
    forgedM[3] = 1e6;
    expect(decodeSnapshot(encodeSnapshot({ ...original, moments: [forgedM, original.moments[1]] })).stateHash).not.toBe(
      decoded.stateHash,
    );
    const forgedT = decodeSnapshot(encodeSnapshot({ ...original, optimizer: { kind: 'adamw', t: 1 } }));
    expect(forgedT.stateHash).not.toBe(decoded.stateHash);
    expect(forgedT.paramsHash).toBe(decoded.paramsHash); // the old, parameters-only hash could not tell
    // Local mode: the agreed hash is params and outer momentum; the training hash stays the rank's own.
    const local = decodeSnapshot(encodeSnapshot({ ...original, outer: original.params.map((x) => x / 2) }));
    expect(local.trainingHash).toBe(trainingStateHash(original.params, original.moments, 1234));
    expect(local.stateHash).not.toBe(local.trainingHash);
  });

  it.each([
    ['params', 0, Number.NaN],
    ['m', 1, Number.POSITIVE_INFINITY],
    ['v', 2, Number.NEGATIVE_INFINITY],
    ['outer', 3, Number.NaN],
  ] as const)('refuses a state whose %s section holds a non-finite value, naming the section', (name, index, value) => {
    const original = { ...snapshotOf(SMALL_SPEC, 'adamw', 4) };
    const outer = original.params.map((x) => x / 2);
    const arrays = [original.params, ...original.moments, outer].map((a) => a.slice());
    arrays[index][5] = value;
    const bytes = encodeSnapshot({ ...original, params: arrays[0], moments: [arrays[1], arrays[2]], outer: arrays[3] });
    expect(() => decodeSnapshot(bytes)).toThrow(SnapshotError);
    expect(() => decodeSnapshot(bytes)).toThrow(new RegExp(`section ${name} holds a non-finite value .* at \\[5\\]`));
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

  it.each([
    ['the core default SHA-256', undefined],
    ['node:crypto (the coordinator)', nodeSha256],
  ])('rejects a single flipped bit anywhere in the file, verified with %s', (_, sha256) => {
    const undetected: number[] = [];
    for (let i = 0; i < bytes.length; i++) {
      const copy = bytes.slice();
      copy[i] ^= 1 << (i % 8);
      try {
        decodeSnapshot(copy, { sha256 });
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
    new DataView(badVersion.buffer).setUint32(4, 4, true);
    expectSnapshotError(() => decodeSnapshot(badVersion), /unsupported version 4 \(this build reads version 3\)/);
    // A version 2 file (plain SHA-256 section hashes, before the tree hash) is refused by name.
    const version2 = bytes.slice();
    new DataView(version2.buffer).setUint32(4, 2, true);
    expectSnapshotError(
      () => decodeSnapshot(version2),
      /unsupported version 2: a checkpoint from before tree state hashes .*reads version 3 only/,
    );
    // A version 1 file (64-bit hashes, before SHA-256) is refused by name, not misread as version 3.
    const version1 = bytes.slice();
    new DataView(version1.buffer).setUint32(4, 1, true);
    expectSnapshotError(() => decodeSnapshot(version1), /unsupported version 1: a checkpoint from before SHA-256/);

    expectSnapshotError(() => decodeSnapshot(bytes.subarray(0, 10)), /truncated/);
    expectSnapshotError(() => decodeSnapshot(bytes.subarray(0, 40)), /truncated: 40 bytes, the prefix alone is 44/);
    expectSnapshotError(() => decodeSnapshot(bytes.subarray(0, 60)), /truncated: header needs/);
    expectSnapshotError(() => decodeSnapshot(bytes.subarray(0, bytes.length - 4)), /truncated: section v ends/);
    const longer = new Uint8Array(bytes.length + 4);
    longer.set(bytes);
    expectSnapshotError(() => decodeSnapshot(longer), /4 unexpected bytes/);

    const headerLength = new DataView(encoded).getUint32(8, true);
    const badParams = bytes.slice();
    badParams[HEADER_AT + headerLength + 5] ^= 0x10;
    expectSnapshotError(() => decodeSnapshot(badParams), /section params hash mismatch/);
    const badMoment = bytes.slice();
    badMoment[bytes.length - 1] ^= 0x01;
    expectSnapshotError(() => decodeSnapshot(badMoment), /section v hash mismatch/);
    const badHeader = bytes.slice();
    badHeader[HEADER_AT + 4] ^= 0x01;
    expectSnapshotError(() => decodeSnapshot(badHeader), /header hash mismatch/);
    const badHeaderHash = bytes.slice();
    badHeaderHash[12 + 31] ^= 0x80;
    expectSnapshotError(() => decodeSnapshot(badHeaderHash), /header hash mismatch/);
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
      () => decodeSnapshot(withHeader(encoded, (h) => (h.paramsHash = '0'.repeat(64)))),
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
