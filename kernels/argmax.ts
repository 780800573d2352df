/**
 * Accuracy for evaluation: correct[0] = how many rows' argmax (ties → lowest index) equals the label.
 * One workgroup with an integer tree reduction (exact); read back one u32 per evaluated batch.
 */
import code from './argmax.wgsl?raw';
import {
  bindBuffers,
  computePipeline,
  createUniformBuffer,
  writeUniforms,
  type Gpu,
  type Kernel,
  type KernelCall,
  type Tensor,
} from './runtime';
import { checkClassifierDims, type ClassifierDims } from './softmax-xent';

/** Threads of the single workgroup (a power of two). */
const WORKGROUP_SIZE = 64;

/** correct[0] = #{r : argmax(logits_r) == labels_r} (labels and correct are u32 tensors). */
export function countCorrect(
  gpu: Gpu,
  t: { logits: Tensor; labels: Tensor; correct: Tensor },
  dims: ClassifierDims,
): Kernel<ClassifierDims> {
  const label = 'argmax.count-correct';
  const pipeline = computePipeline(gpu, code, 'argmax', 'count_correct', { WORKGROUP_SIZE });
  const uniforms = createUniformBuffer(gpu, 2, `${label}.params`);
  const call: KernelCall = {
    label,
    pipeline,
    bindGroup: bindBuffers(gpu, pipeline, [uniforms, t.logits, t.labels, t.correct], label),
    workgroups: [1, 1, 1],
  };
  const update = (d: ClassifierDims): void => {
    checkClassifierDims(label, d, t.logits, t.labels);
    writeUniforms(gpu, uniforms, [d.rows, d.classes]);
  };
  update(dims);
  return { call, update };
}
