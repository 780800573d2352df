/**
 * Test accuracy of a committed state, in Node, without a GPU: decode a checkpoint (the coordinator's
 * snapshot format) and run the dense stack's forward pass in float64 on the first `count` test images
 * of an IDX dataset (x = pixels/255, as the tabs' batches), with the tests' float64 references
 * (test/support/reference-dense.ts). For bench/sync.ts, which evaluates the
 * state reached after a fixed wall time without asking a tab (whose compute it is measuring) to do it.
 * Dense stacks only (`mlp`, `tiny-mlp`); anything else is refused.
 */
import { loadIdxDataset } from '../../node/idx';
import { parameterLayout, type SequentialSpec } from '../../core/training/model-spec';
import { decodeSnapshot } from '../../core/state/snapshot';
import { countCorrectRef, matmulRef } from '../../test/support/reference-dense';

export interface SnapshotAccuracy {
  step: number;
  accuracy: number;
  testImages: number;
}

/** Test images per forward pass (bounds the activations held at once). */
const BATCH = 500;

/** Accuracy of `snapshot` (checkpoint bytes) on the first `count` test images of the IDX set in `datasetDir`. */
export async function snapshotAccuracy(
  snapshot: Uint8Array,
  datasetDir: string,
  count: number,
): Promise<SnapshotAccuracy> {
  const decoded = decodeSnapshot(snapshot);
  const spec = decoded.spec as SequentialSpec;
  const dense = 'layers' in spec ? spec.layers.filter((l) => l.type === 'dense') : [];
  if (dense.length === 0 || dense.length !== spec.layers.length)
    throw new Error(`snapshotAccuracy: dense stacks only, not ${spec.name}`);
  const layout = parameterLayout(spec);
  const p = decoded.params;
  // Per layer its weights W [in, out] and bias, as views into the parameters.
  let width = spec.input.reduce((a, b) => a * b, 1);
  const layers = dense.map((layer, li) => {
    const at = (kind: 'weight' | 'bias') => {
      const e = layout.entries.find((en) => en.layer === li && en.kind === kind);
      if (!e) throw new Error(`snapshotAccuracy: no ${kind} of layer ${li}`);
      return e.offset;
    };
    const w = at('weight');
    const b = at('bias');
    const view = {
      inputs: width,
      units: layer.units,
      weight: p.subarray(w, w + width * layer.units),
      bias: p.subarray(b, b + layer.units),
      relu: layer.activation === 'relu',
    };
    width = layer.units;
    return view;
  });
  const { test } = await loadIdxDataset(datasetDir);
  const n = Math.min(count, test.count);
  const pixels = test.rows * test.cols;
  let correct = 0;
  for (let s = 0; s < n; s += BATCH) {
    const rows = Math.min(BATCH, n - s);
    let act: Float64Array = Float64Array.from(test.images.subarray(s * pixels, (s + rows) * pixels), (v) => v / 255);
    for (const l of layers) act = matmulRef(act, l.weight, rows, l.units, l.inputs, { bias: l.bias, relu: l.relu });
    correct += countCorrectRef(act, test.labels.subarray(s, s + rows), rows, width);
  }
  return { step: decoded.step, accuracy: correct / n, testImages: n };
}
