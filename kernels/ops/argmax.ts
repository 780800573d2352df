/**
 * Accuracy for evaluation: correct[0] = how many rows' argmax (ties → lowest index) equals the label.
 * One workgroup with an integer tree reduction (exact); read back one u32 per evaluated batch.
 */
import code from './argmax.wgsl?raw';
import { computePipeline, preparedKernel, type Gpu, type Kernel, type Tensor } from '../runtime';
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
  return preparedKernel(
    gpu,
    {
      label,
      pipeline: computePipeline(gpu, code, 'argmax', 'count_correct', { WORKGROUP_SIZE }),
      uniformCount: 2,
      bind: (uniforms) => [uniforms, t.logits, t.labels, t.correct],
      plan: (d: ClassifierDims) => {
        checkClassifierDims(label, d, t.logits, t.labels);
        return { uniforms: [d.rows, d.classes], workgroups: [1, 1, 1] };
      },
    },
    dims,
  );
}
