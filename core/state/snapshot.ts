/**
 * The binary training-state checkpoint shared by tabs (upload, peer broadcast) and the coordinator
 * (durable store): one `ArrayBuffer`, pure encode/decode, every byte covered by a SHA-256.
 *
 * Format, version 3 (all integers little-endian u32, all floats little-endian float32):
 *
 *   offset 0   'TSWS'                  magic
 *   offset 4   version                 3
 *   offset 8   headerLength            bytes of the JSON header including its padding (a multiple of 4)
 *   offset 12  headerHash              32 bytes: SHA-256 of the padded header bytes
 *   offset 44  header                  UTF-8 JSON (`SnapshotHeader`), padded with spaces to a multiple of 4
 *   then       sections                raw float32 arrays, contiguous, in header order: params, then the
 *                                      optimizer's moments (`m`, `v` for AdamW; `velocity` for SGD), then
 *                                      in local sync mode the outer optimizer's momentum (`outer`)
 *
 * The header hash is there so that a flipped digit in `step` or `cursor` cannot parse: the coordinator
 * would resume at the wrong place. Sections carry their own tree hash (core/state/hash.ts `treeHash`, SHA-256
 * of 4 KiB chunks, 64 hex digits); the params section's hash is `paramsHash` (= `hashParams`), the value
 * ranks report at commit in every-step mode, so a checkpoint can be matched to a committed step without
 * decoding it.
 * Each section is the whole flat buffer (`layout.totalElements` floats, alignment padding included),
 * so the layout's offsets index it directly.
 *
 * Version 1 (until issue 12) had a 32-bit MurmurHash3 header checksum at offset 12 and 64-bit
 * non-cryptographic section hashes; it is refused with a message saying so (its hashes cannot be
 * compared with the SHA-256 the ranks now report, and a 64-bit hash cannot vouch for hostile bytes).
 * Version 2 (until issue 9) had the same layout with plain SHA-256 section hashes; its `paramsHash` is not
 * the tree hash the ranks report since the hash moved to the GPU, so it is refused too, saying so.
 */
import { z } from 'zod';
import {
  HASH_HEX_DIGITS,
  nobleSha256,
  type Sha256Factory,
  sha256Digest,
  stateHash,
  trainingStateHash,
  treeHash,
} from './hash';
import { modelSpecSchema, parameterLayout, type ModelSpec, type ParamLayout } from '../training/model-spec';

// TextEncoder/TextDecoder exist in every runtime the core runs in (browsers, workers, Node), but the
// core's tsconfig has no DOM or Node types: declare just what is used, for this module only.
declare const TextEncoder: { new (): { encode(text: string): Uint8Array } };
declare const TextDecoder: { new (label: 'utf-8', options: { fatal: boolean }): { decode(bytes: Uint8Array): string } };

export const SNAPSHOT_MAGIC = 'TSWS';
export const SNAPSHOT_VERSION = 3;
/** Offset of the header hash in the prefix, and its length (a SHA-256 digest). */
const HEADER_HASH_OFFSET = 12;
const HEADER_HASH_BYTES = 32;
/** magic, version, headerLength, header hash: 44 bytes, a multiple of 4 so sections stay float32-aligned. */
const PREFIX_BYTES = HEADER_HASH_OFFSET + HEADER_HASH_BYTES;

const sha256HexSchema = z
  .string()
  .regex(
    new RegExp(`^[0-9a-f]{${HASH_HEX_DIGITS}}$`),
    `hashes are ${HASH_HEX_DIGITS} lower-case hex digits (SHA-256 trees)`,
  );

export type OptimizerKind = 'adamw' | 'sgd';
export type SectionName = 'params' | 'm' | 'v' | 'velocity' | 'outer';

/** The moment buffers of each optimizer, in the order they are stored and returned. */
export const OPTIMIZER_MOMENTS: Readonly<Record<OptimizerKind, readonly ('m' | 'v' | 'velocity')[]>> = {
  adamw: ['m', 'v'],
  sgd: ['velocity'],
};

const count = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

export const snapshotHeaderSchema = z.strictObject({
  /** The model as a job names it, and its full spec (a restore needs no registry of built-ins). */
  model: z.strictObject({ name: z.string(), spec: z.unknown() }),
  /** Every parameter tensor's name, shape and offset (float32 elements) in the flat sections. */
  layout: z.array(z.strictObject({ name: z.string(), shape: z.array(count), offset: count })),
  /** Length of every section in float32 elements. */
  totalElements: count,
  /** Committed global step the state belongs to. */
  step: count,
  epoch: count,
  /** Position in the epoch's sample order up to which samples are processed. */
  cursor: count,
  /**
   * The optimizer and its own step counter (bias correction uses it; may differ from `step`); `outer`:
   * the state has an outer (local-mode Nesterov) momentum section.
   */
  optimizer: z.strictObject({ kind: z.enum(['adamw', 'sgd']), t: count, outer: z.literal('nesterov').optional() }),
  sections: z.array(
    z.strictObject({
      name: z.enum(['params', 'm', 'v', 'velocity', 'outer']),
      /** From the start of the snapshot. */
      byteOffset: count,
      byteLength: count,
      hash: sha256HexSchema,
    }),
  ),
  /** `hashParams` of the params section. */
  paramsHash: sha256HexSchema,
});

export type SnapshotHeader = z.infer<typeof snapshotHeaderSchema>;

export interface TrainingSnapshot {
  spec: ModelSpec;
  step: number;
  epoch: number;
  cursor: number;
  optimizer: { kind: OptimizerKind; t: number };
  /** Flat parameters, `parameterLayout(spec).totalElements` floats. */
  params: Float32Array;
  /** Moment buffers in `OPTIMIZER_MOMENTS[optimizer.kind]` order, each as long as `params`. */
  moments: Float32Array[];
  /** Local sync mode: the outer optimizer's momentum, as long as `params` (part of the committed state). */
  outer?: Float32Array | null;
}

export interface DecodedSnapshot extends TrainingSnapshot {
  header: SnapshotHeader;
  layout: ParamLayout;
  paramsHash: string;
  /**
   * The agreed hash of this state, what the ranks reported when it was committed: in every-step mode
   * `trainingStateHash` of every section and t (= `trainingHash`), in local mode (with an outer momentum)
   * `stateHash(params, outer)`.
   */
  stateHash: string;
  /**
   * `trainingStateHash(params, moments, t)`: every section but the outer momentum. In local mode, the
   * commitment of the rank whose state this is (its inner optimizer state is its own).
   */
  trainingHash: string;
}

export class SnapshotError extends Error {
  override name = 'SnapshotError';
}

function fail(message: string): never {
  throw new SnapshotError(`snapshot: ${message}`);
}

/** Why `snapshot` does not fit its model's layout and optimizer, thrown as a SnapshotError. */
function checkSizes(snapshot: TrainingSnapshot, layout: ParamLayout, names: readonly SectionName[]): void {
  if (snapshot.params.length !== layout.totalElements) {
    fail(`params has ${snapshot.params.length} floats, the ${snapshot.spec.name} layout has ${layout.totalElements}`);
  }
  if (snapshot.moments.length !== names.length) {
    fail(
      `${snapshot.optimizer.kind} needs ${names.length} moment buffers (${names.join(', ')}), got ${snapshot.moments.length}`,
    );
  }
  snapshot.moments.forEach((m, i) => {
    if (m.length !== layout.totalElements)
      fail(`moment ${names[i]} has ${m.length} floats, expected ${layout.totalElements}`);
  });
  if (snapshot.outer && snapshot.outer.length !== layout.totalElements)
    fail(`outer momentum has ${snapshot.outer.length} floats, expected ${layout.totalElements}`);
}

/**
 * The JSON header, padded with spaces to a multiple of 4 bytes. Section offsets depend on the header's
 * length, which depends on the offsets' digits: iterate until the padded length is stable (twice at
 * most in practice).
 */
function headerBytesOf(
  snapshot: TrainingSnapshot,
  layout: ParamLayout,
  arrays: [SectionName, Float32Array][],
  sectionHashes: string[],
): Uint8Array {
  let headerLength = 0;
  let headerBytes = new Uint8Array(0);
  for (let attempt = 0; attempt < 4; attempt++) {
    let offset = PREFIX_BYTES + headerLength;
    const header: SnapshotHeader = {
      model: { name: snapshot.spec.name, spec: snapshot.spec },
      layout: layout.entries.map((e) => ({ name: e.name, shape: e.shape, offset: e.offset })),
      totalElements: layout.totalElements,
      step: snapshot.step,
      epoch: snapshot.epoch,
      cursor: snapshot.cursor,
      optimizer: {
        kind: snapshot.optimizer.kind,
        t: snapshot.optimizer.t,
        ...(snapshot.outer ? { outer: 'nesterov' as const } : {}),
      },
      sections: arrays.map(([name, data], i) => {
        const section = { name, byteOffset: offset, byteLength: data.byteLength, hash: sectionHashes[i] };
        offset += data.byteLength;
        return section;
      }),
      paramsHash: sectionHashes[0],
    };
    const parsed = snapshotHeaderSchema.safeParse(header);
    if (!parsed.success) fail(`invalid header: ${describeIssues(parsed.error)}`);
    const json = new TextEncoder().encode(JSON.stringify(header));
    const padded = Math.ceil(json.length / 4) * 4;
    headerBytes = new Uint8Array(padded).fill(0x20);
    headerBytes.set(json);
    if (padded === headerLength) break;
    headerLength = padded;
  }
  if (headerBytes.length !== headerLength) fail('header length did not settle');
  return headerBytes;
}

/** A training state as a snapshot file (the format above): prefix, hashed JSON header, sections. */
export function encodeSnapshot(snapshot: TrainingSnapshot): ArrayBuffer {
  const layout = parameterLayout(snapshot.spec);
  const names = OPTIMIZER_MOMENTS[snapshot.optimizer.kind];
  checkSizes(snapshot, layout, names);
  const arrays: [SectionName, Float32Array][] = [
    ['params', snapshot.params],
    ...names.map((n, i): [SectionName, Float32Array] => [n, snapshot.moments[i]]),
    ...(snapshot.outer ? [['outer', snapshot.outer] as [SectionName, Float32Array]] : []),
  ];
  const sectionHashes = arrays.map(([, data]) => treeHash([data]));
  const headerBytes = headerBytesOf(snapshot, layout, arrays, sectionHashes);
  const headerLength = headerBytes.length;

  const total = PREFIX_BYTES + headerLength + arrays.reduce((sum, [, data]) => sum + data.byteLength, 0);
  const out = new Uint8Array(total);
  const prefix = new DataView(out.buffer);
  for (let i = 0; i < 4; i++) out[i] = SNAPSHOT_MAGIC.charCodeAt(i);
  prefix.setUint32(4, SNAPSHOT_VERSION, true);
  prefix.setUint32(8, headerLength, true);
  out.set(sha256Digest(headerBytes), HEADER_HASH_OFFSET);
  out.set(headerBytes, PREFIX_BYTES);
  let offset = PREFIX_BYTES + headerLength;
  for (const [, data] of arrays) {
    out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), offset);
    offset += data.byteLength;
  }
  return out.buffer;
}

/**
 * Decode and verify a snapshot. The returned float arrays are views into `input` when it is 4-byte
 * aligned (no copy of a large checkpoint), copies otherwise. Throws `SnapshotError` saying what is wrong,
 * including a section holding NaN or ±Infinity (named): every restore (a tab's, the coordinator's check
 * of an upload, the verifier's) decodes here, so none puts a non-finite state back.
 * `sha256`: the SHA-256 to verify with (the coordinator passes node:crypto's; the digests are the same).
 */
export function decodeSnapshot(
  input: ArrayBuffer | Uint8Array,
  opts: { sha256?: Sha256Factory } = {},
): DecodedSnapshot {
  const sha256 = opts.sha256 ?? nobleSha256;
  // A plain Uint8Array view even for subclasses (Node's Buffer#slice returns a view, not a copy).
  const bytes =
    input instanceof Uint8Array
      ? new Uint8Array(input.buffer, input.byteOffset, input.byteLength)
      : new Uint8Array(input);
  const { header, headerLength } = readHeader(bytes, sha256);
  const { spec, layout } = checkModel(header);
  const arrays = readSections(bytes, header, PREFIX_BYTES + headerLength, layout, sha256);
  if (header.sections[0].hash !== header.paramsHash) fail('paramsHash differs from the params section hash');
  const moments = OPTIMIZER_MOMENTS[header.optimizer.kind].length;
  const outer = header.optimizer.outer ? arrays[1 + moments] : null;
  const trainingHash = trainingStateHash(arrays[0], arrays.slice(1, 1 + moments), header.optimizer.t, sha256);
  return {
    header,
    spec,
    layout,
    step: header.step,
    epoch: header.epoch,
    cursor: header.cursor,
    optimizer: { kind: header.optimizer.kind, t: header.optimizer.t },
    params: arrays[0],
    moments: arrays.slice(1, 1 + moments),
    outer,
    paramsHash: header.paramsHash,
    stateHash: outer ? stateHash(arrays[0], outer, sha256) : trainingHash,
    trainingHash,
  };
}

/** Index of the first NaN or ±Infinity in `data`, or −1. */
export function firstNonFinite(data: Float32Array): number {
  for (let i = 0; i < data.length; i++) if (!Number.isFinite(data[i])) return i;
  return -1;
}

function describeIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
}

/** Check the prefix (magic, version, header length and hash) and parse the JSON header it covers. */
function readHeader(bytes: Uint8Array, sha256: Sha256Factory): { header: SnapshotHeader; headerLength: number } {
  // The magic first: a short foreign file is named as foreign, not as a truncated snapshot.
  const magic = String.fromCharCode(...bytes.subarray(0, 4));
  if (magic !== SNAPSHOT_MAGIC && bytes.length >= 4)
    fail(`bad magic ${JSON.stringify(magic)}: not a tabswarm snapshot (expected "${SNAPSHOT_MAGIC}")`);
  if (bytes.length < PREFIX_BYTES) fail(`truncated: ${bytes.length} bytes, the prefix alone is ${PREFIX_BYTES}`);
  const prefix = new DataView(bytes.buffer, bytes.byteOffset, PREFIX_BYTES);
  const version = prefix.getUint32(4, true);
  if (version === 1)
    fail(
      `unsupported version 1: a checkpoint from before SHA-256 state hashes (its 64-bit hashes cannot be verified); this build reads version ${SNAPSHOT_VERSION} only`,
    );
  if (version === 2)
    fail(
      `unsupported version 2: a checkpoint from before tree state hashes (its hashes are plain SHA-256 of whole sections, not the tree hash the ranks now report); this build reads version ${SNAPSHOT_VERSION} only`,
    );
  if (version !== SNAPSHOT_VERSION)
    fail(`unsupported version ${version} (this build reads version ${SNAPSHOT_VERSION})`);
  const headerLength = prefix.getUint32(8, true);
  if (headerLength % 4 !== 0) fail(`corrupt prefix: header length ${headerLength} is not a multiple of 4`);
  if (PREFIX_BYTES + headerLength > bytes.length) {
    fail(`truncated: header needs ${PREFIX_BYTES + headerLength} bytes, the snapshot has ${bytes.length}`);
  }
  const headerBytes = bytes.subarray(PREFIX_BYTES, PREFIX_BYTES + headerLength);
  const want = bytes.subarray(HEADER_HASH_OFFSET, PREFIX_BYTES);
  const got = sha256Digest(headerBytes, sha256);
  if (got.some((b, i) => b !== want[i])) fail('header hash mismatch: the header is corrupted');
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(headerBytes));
  } catch (e) {
    fail(`header is not valid JSON: ${(e as Error).message}`);
  }
  const parsedHeader = snapshotHeaderSchema.safeParse(json);
  if (!parsedHeader.success) fail(`invalid header: ${describeIssues(parsedHeader.error)}`);
  return { header: parsedHeader.data, headerLength };
}

/** The header's model spec, validated, and its layout, which must equal the one the header lists. */
function checkModel(header: SnapshotHeader): { spec: ModelSpec; layout: ParamLayout } {
  const parsedSpec = modelSpecSchema.safeParse(header.model.spec);
  if (!parsedSpec.success) fail(`invalid model spec: ${describeIssues(parsedSpec.error)}`);
  const spec = parsedSpec.data;
  if (spec.name !== header.model.name)
    fail(`model name "${header.model.name}" differs from its spec's name "${spec.name}"`);
  const layout = parameterLayout(spec);
  const layoutMatches =
    header.totalElements === layout.totalElements &&
    header.layout.length === layout.entries.length &&
    layout.entries.every((e, i) => {
      const h = header.layout[i];
      return (
        h.name === e.name &&
        h.offset === e.offset &&
        h.shape.length === e.shape.length &&
        h.shape.every((d, j) => d === e.shape[j])
      );
    });
  if (!layoutMatches) fail(`layout in the header does not match the layout of model "${spec.name}"`);
  return { spec, layout };
}

/**
 * The float32 sections (params first, then the optimizer's moments), each checked for its place,
 * length and hash; `firstOffset` is where the first must start. Nothing may follow the last.
 */
function readSections(
  bytes: Uint8Array,
  header: SnapshotHeader,
  firstOffset: number,
  layout: ParamLayout,
  sha256: Sha256Factory,
) {
  const expectedNames: SectionName[] = [
    'params',
    ...OPTIMIZER_MOMENTS[header.optimizer.kind],
    ...(header.optimizer.outer ? ['outer' as const] : []),
  ];
  const names = header.sections.map((s) => s.name);
  if (names.join(',') !== expectedNames.join(',')) {
    fail(
      `sections [${names.join(', ')}] do not match optimizer ${header.optimizer.kind} (expected [${expectedNames.join(', ')}])`,
    );
  }
  let offset = firstOffset;
  const arrays = header.sections.map((s) => {
    if (s.byteOffset !== offset) fail(`section ${s.name} starts at byte ${s.byteOffset}, expected ${offset}`);
    if (s.byteLength !== layout.totalElements * 4)
      fail(`section ${s.name} is ${s.byteLength} bytes, expected ${layout.totalElements * 4}`);
    if (s.byteOffset + s.byteLength > bytes.length) {
      fail(
        `truncated: section ${s.name} ends at byte ${s.byteOffset + s.byteLength}, the snapshot has ${bytes.length}`,
      );
    }
    offset += s.byteLength;
    const start = bytes.byteOffset + s.byteOffset;
    const data =
      start % 4 === 0
        ? new Float32Array(bytes.buffer, start, s.byteLength / 4)
        : new Float32Array(bytes.slice(s.byteOffset, s.byteOffset + s.byteLength).buffer);
    if (treeHash([data], sha256) !== s.hash) fail(`section ${s.name} hash mismatch: its data is corrupted`);
    const bad = firstNonFinite(data);
    if (bad >= 0) fail(`section ${s.name} holds a non-finite value (${data[bad]}) at [${bad}]: no honest state does`);
    return data;
  });
  if (offset !== bytes.length) fail(`${bytes.length - offset} unexpected bytes after the last section`);
  return arrays;
}
