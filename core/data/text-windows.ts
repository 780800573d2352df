/**
 * A language model's samples are windows of context + 1 byte tokens (docs/models-and-data.md): this
 * splits them into the model's inputs and next-token targets. Shared by the GPU model
 * (kernels/model/model.ts), the tabs' text batches (web/worker/data/chunked-data.ts) and the verifier's
 * (core/data/memory-batches.ts), so all three feed a model the same tokens.
 */

/**
 * Split `batch` windows of context + 1 tokens, one after another, into a language model's inputs (each
 * window's first `context` tokens) and next-token targets (its last `context`), batch·context of each.
 */
export function splitWindows(
  windows: Uint8Array | Uint16Array | Uint32Array,
  batch: number,
  context: number,
  inputs: Uint32Array,
  targets: Uint32Array,
): void {
  for (let b = 0; b < batch; b++) {
    const w = windows.subarray(b * (context + 1), (b + 1) * (context + 1));
    inputs.set(w.subarray(0, context), b * context);
    targets.set(w.subarray(1), b * context);
  }
}
