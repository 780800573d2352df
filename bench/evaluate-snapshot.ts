/**
 * Test accuracy of a committed state, in Node, without a GPU: decode a checkpoint (the coordinator's
 * snapshot format) and run the dense stack's forward pass in float64 on the first `count` test images
 * of an IDX dataset (x = pixels/255, as the tabs' batches). For bench/sync.ts, which evaluates the
 * state reached after a fixed wall time without asking a tab (whose compute it is measuring) to do it.
 * Dense stacks only (`mlp`, `tiny-mlp`); anything else is refused.
 */
import { loadIdxDataset } from '../coordinator/dataset';
import { parameterLayout, type SequentialSpec } from '../coordinator/core/model-spec';
import { decodeSnapshot } from '../coordinator/core/snapshot';

export interface SnapshotAccuracy {
  step: number;
  accuracy: number;
  testImages: number;
}

/** Accuracy of `snapshot` (checkpoint bytes) on the first `count` test images of the IDX set in `datasetDir`. */
export async function snapshotAccuracy(
  snapshot: Uint8Array,
  datasetDir: string,
  count: number,
): Promise<SnapshotAccuracy> {
  const decoded = decodeSnapshot(snapshot);
  const spec = decoded.spec as SequentialSpec;
  if (!('layers' in spec) || spec.layers.some((l) => l.type !== 'dense'))
    throw new Error(`snapshotAccuracy: dense stacks only, not ${spec.name}`);
  const layout = parameterLayout(spec);
  const offset = (layer: number, kind: 'weight' | 'bias') => {
    const e = layout.entries.find((en) => en.layer === layer && en.kind === kind);
    if (!e) throw new Error(`snapshotAccuracy: no ${kind} of layer ${layer}`);
    return e.offset;
  };
  const p = decoded.params;
  const { test } = await loadIdxDataset(datasetDir);
  const n = Math.min(count, test.count);
  const pixels = test.rows * test.cols;
  let correct = 0;
  for (let s = 0; s < n; s++) {
    let act = new Float64Array(pixels);
    for (let i = 0; i < pixels; i++) act[i] = test.images[s * pixels + i] / 255;
    spec.layers.forEach((layer, li) => {
      if (layer.type !== 'dense') return;
      const w = offset(li, 'weight');
      const out = new Float64Array(layer.units);
      for (let o = 0; o < layer.units; o++) out[o] = p[offset(li, 'bias') + o];
      // W is [in, out]: row i scaled by input i (zero pixels skipped).
      for (let i = 0; i < act.length; i++) {
        const x = act[i];
        if (x === 0) continue;
        const row = w + i * layer.units;
        for (let o = 0; o < layer.units; o++) out[o] += x * p[row + o];
      }
      if (layer.activation === 'relu') for (let o = 0; o < out.length; o++) out[o] = Math.max(0, out[o]);
      act = out;
    });
    let best = 0;
    for (let k = 1; k < act.length; k++) if (act[k] > act[best]) best = k;
    if (best === test.labels[s]) correct++;
  }
  return { step: decoded.step, accuracy: correct / n, testImages: n };
}
