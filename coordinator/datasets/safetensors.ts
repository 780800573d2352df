/**
 * The trained model as a `safetensors` file (https://github.com/huggingface/safetensors), built from a
 * checkpoint snapshot, so `safetensors.torch.load_file(path)` (or `safetensors.numpy.load_file`) reads it.
 *
 * File layout:
 *   bytes 0..8     N: the header's length, unsigned 64-bit little-endian
 *   bytes 8..8+N   UTF-8 JSON: `{"<tensor>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, …,
 *                  "__metadata__": {"<key>": "<string>", …}}`, padded with spaces so the data starts at a
 *                  multiple of 8 bytes (what the reference serializer does)
 *   then           the tensors' raw little-endian float32 data, back to back in the layout's order;
 *                  `data_offsets` are relative to the start of this data. The reference reader refuses
 *                  holes, so the flat buffer's 64-element alignment padding is NOT copied.
 *
 * Tensor names and shapes are the model spec's parameter layout (`parameterLayout`: `layers.<i>.weight`,
 * `layers.<i>.bias`), in its conventions, which the metadata spells out: a dense weight is `[in, out]`
 * (y = x·W + b; `W.T` is a `torch.nn.Linear` weight), a conv weight is `[kh, kw, cin, cout]` (HWIO;
 * `permute(3, 2, 0, 1)` gives `torch.nn.Conv2d`'s OIHW), and a dense layer after convolutions reads the
 * NHWC-flattened activation. Metadata values are strings, as the format requires.
 */
import { isTransformer, modelSpecSchema, parameterLayout, type ModelSpec } from '../../core/training/model-spec';
import { type DecodedSnapshot, decodeSnapshot, SnapshotError } from '../../core/state/snapshot';
import { nodeSha256 } from '../../node/sha256';

/** What the encoder needs of a snapshot (a `DecodedSnapshot` has all of it). */
export interface ModelWeights {
  spec: ModelSpec;
  /** The flat parameter buffer: `parameterLayout(spec).totalElements` floats, tensors at their layout offsets. */
  params: Float32Array;
  step: number;
  epoch: number;
  cursor: number;
  /** `hashParams` of `params`, if known (recorded in the metadata so the file can be matched to a commit). */
  paramsHash?: string;
}

export interface SafetensorsTensorInfo {
  dtype: 'F32';
  shape: number[];
  data_offsets: [number, number];
}

export class SafetensorsError extends Error {
  override name = 'SafetensorsError';
}

function fail(message: string): never {
  throw new SafetensorsError(`safetensors: ${message}`);
}

/** The data section starts at a multiple of this many bytes (reference serializer's alignment). */
const HEADER_ALIGN = 8;

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Layout conventions, written into `__metadata__` so a reader does not have to guess. */
export const LAYOUT_CONVENTION =
  'dense weight [in, out] (y = x @ W + b; W.T is a torch.nn.Linear weight); conv2d weight [kh, kw, cin, cout] ' +
  '(HWIO; permute(3, 2, 0, 1) gives torch.nn.Conv2d OIHW), stride 1; activations NHWC, a dense layer after ' +
  'convolutions reads the NHWC-flattened tensor';

/** The same for a transformer: GPT-2's names and shapes (a GPT-2 loader reads them as they are). */
export const TRANSFORMER_LAYOUT_CONVENTION =
  'GPT-2 names and shapes: Conv1D weights [in, out] (y = x @ W + b); attn.c_attn columns are [q | k | v], head h ' +
  'owning columns h*hd..(h+1)*hd of each; wte [vocab, d] is also the output projection (logits = ln_f(x) @ wte.T); ' +
  'wpe [context, d]; pre-LayerNorm blocks, LayerNorm eps 1e-5, GELU tanh form';

/**
 * Encodes the model's parameters as a safetensors file. `metadata` entries are added to (and may
 * override) the standard ones: format, tabswarm.model, tabswarm.spec, tabswarm.step/epoch/cursor,
 * tabswarm.params_hash, tabswarm.layout. Throws `SafetensorsError` when the weights do not fit the spec.
 */
export function encodeSafetensors(
  weights: ModelWeights,
  metadata: Record<string, string> = {},
): Uint8Array<ArrayBuffer> {
  const parsedSpec = modelSpecSchema.safeParse(weights.spec);
  if (!parsedSpec.success)
    fail(`invalid model spec: ${parsedSpec.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const spec = parsedSpec.data;
  if (!(weights.params instanceof Float32Array)) fail('params must be a Float32Array');
  const layout = parameterLayout(spec);
  if (weights.params.length !== layout.totalElements) {
    fail(`params has ${weights.params.length} floats, the layout of model "${spec.name}" has ${layout.totalElements}`);
  }
  for (const [key, value] of Object.entries(metadata)) {
    if (typeof value !== 'string')
      fail(`metadata value of "${key}" must be a string (the format's rule), got ${typeof value}`);
  }

  const header: Record<string, SafetensorsTensorInfo | Record<string, string>> = {};
  const meta: Record<string, string> = {
    format: 'pt',
    'tabswarm.model': spec.name,
    'tabswarm.spec': JSON.stringify(spec),
    'tabswarm.step': String(weights.step),
    'tabswarm.epoch': String(weights.epoch),
    'tabswarm.cursor': String(weights.cursor),
    'tabswarm.layout': isTransformer(spec) ? TRANSFORMER_LAYOUT_CONVENTION : LAYOUT_CONVENTION,
    ...(weights.paramsHash ? { 'tabswarm.params_hash': weights.paramsHash } : {}),
    ...metadata,
  };
  header.__metadata__ = meta;
  let dataBytes = 0;
  for (const entry of layout.entries) {
    if (entry.name === '__metadata__') fail('a tensor may not be named __metadata__');
    const bytes = entry.size * 4;
    header[entry.name] = { dtype: 'F32', shape: [...entry.shape], data_offsets: [dataBytes, dataBytes + bytes] };
    dataBytes += bytes;
  }

  const json = new TextEncoder().encode(JSON.stringify(header));
  const headerLength = Math.ceil(json.length / HEADER_ALIGN) * HEADER_ALIGN;
  const out = new Uint8Array(8 + headerLength + dataBytes);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(headerLength), true);
  out.fill(0x20, 8, 8 + headerLength);
  out.set(json, 8);

  let at = 8 + headerLength;
  for (const entry of layout.entries) {
    const tensor = weights.params.subarray(entry.offset, entry.offset + entry.size);
    if (LITTLE_ENDIAN) {
      out.set(new Uint8Array(tensor.buffer, tensor.byteOffset, tensor.byteLength), at);
    } else {
      for (let i = 0; i < tensor.length; i++) view.setFloat32(at + 4 * i, tensor[i], true);
    }
    at += tensor.byteLength;
  }
  return out;
}

/** A stored checkpoint converted for download. */
export interface SafetensorsExport {
  bytes: Uint8Array<ArrayBuffer>;
  /** e.g. `tabswarm-mlp-step120.safetensors`. */
  filename: string;
  step: number;
  model: string;
}

/**
 * Decodes checkpoint bytes (the snapshot format of core/state/snapshot.ts) and encodes their parameters as
 * safetensors. A corrupt or malformed checkpoint is a `SafetensorsError` naming what is wrong.
 */
export function checkpointToSafetensors(
  checkpoint: Uint8Array,
  metadata: Record<string, string> = {},
): SafetensorsExport {
  let snapshot: DecodedSnapshot;
  try {
    // A plain Uint8Array over the same bytes: a Node Buffer's slice() is a view, which decodeSnapshot does not expect.
    snapshot = decodeSnapshot(new Uint8Array(checkpoint.buffer, checkpoint.byteOffset, checkpoint.byteLength), {
      sha256: nodeSha256,
    });
  } catch (error) {
    if (error instanceof SnapshotError) fail(`the checkpoint cannot be read: ${error.message}`);
    throw error;
  }
  const bytes = encodeSafetensors(snapshot, metadata);
  const safeName = snapshot.spec.name.replace(/[^A-Za-z0-9_.-]/g, '_');
  return {
    bytes,
    filename: `tabswarm-${safeName}-step${snapshot.step}.safetensors`,
    step: snapshot.step,
    model: snapshot.spec.name,
  };
}
