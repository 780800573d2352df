/**
 * The graph of a layer stack (dense, conv2d, 2×2 max-pool) with a softmax cross-entropy head.
 * Forward: layer i reads acts[i−1] (or the input) and writes acts[i]; ReLU is fused into matmul/conv.
 * Backward: d(loss)/d(activation) ping-pongs between two scratch buffers, so no dispatch reads and
 * writes the same buffer. In the f16 mode a dense layer's matmuls read its input and weight as packed
 * halves (model-graph.ts); conv layers stay float32.
 */
import {
  convPad,
  layerShapes,
  type LayerShapes,
  type ParamEntry,
  type ParamLayout,
  type SequentialSpec,
} from '../../core/training/model-spec';
import { countCorrect } from '../ops/argmax';
import { biasGrad } from '../ops/bias';
import { conv2dBackwardFilter, conv2dBackwardInput, conv2dForward, type Conv2dDims } from '../ops/conv2d';
import { paramEntries } from './layers';
import { matmul } from '../ops/matmul';
import { conv2dOverride } from '../tuning/variants';
import { maxPoolBackward, maxPoolForward, type PoolDims } from '../ops/maxpool';
import type { GraphContext, ModelGraph } from './model-graph';
import { reluBackward } from '../ops/relu';
import { elementCount, tensorView, type KernelCall, type Tensor } from '../runtime';
import { softmaxCrossEntropy } from '../ops/softmax-xent';

/** What every layer's kernels are built from: the spec, its shapes, parameter entries and activations. */
interface Stack {
  ctx: GraphContext;
  spec: SequentialSpec;
  shapes: LayerShapes[];
  entries: { weight?: ParamEntry; bias?: ParamEntry }[];
  /** acts[i]: the output of layer i, [maxBatch, ...outShape]. */
  acts: Tensor[];
  /** argmaxes[i]: the pooling layer i's winners, for its backward. */
  argmaxes: Tensor[];
}

function view(base: Tensor, e: ParamEntry | undefined, prefix = ''): Tensor {
  if (!e) throw new Error('unreachable: layer without parameters');
  return tensorView(base, e.offset, e.shape, `${prefix}${e.name}`);
}

function convDims(inShape: readonly number[], outChannels: number, kernel: number, pad: number) {
  const [height, width, inChannels] = inShape;
  return (batch: number): Conv2dDims => ({ batch, height, width, inChannels, outChannels, kernel, pad });
}

function poolDims(inShape: readonly number[]) {
  const [height, width, channels] = inShape;
  return (batch: number): PoolDims => ({ batch, height, width, channels });
}

export function buildSequential(ctx: GraphContext, spec: SequentialSpec, layout: ParamLayout): ModelGraph {
  const shapes = layerShapes(spec);
  const entries = paramEntries(spec, layout);
  const acts = shapes.map((s, i) => ctx.tensor([ctx.maxBatch, ...s.outShape], `act${i}`));
  const stack: Stack = { ctx, spec, shapes, entries, acts, argmaxes: [] };
  const forward = spec.layers.flatMap((_, i) => forwardLayer(stack, i));
  const classes = spec.classes;
  const maxActivation = Math.max(...shapes.map((s) => elementCount(s.outShape)));
  const scratch = [
    ctx.tensor([ctx.maxBatch * maxActivation], 'dact-a'),
    ctx.tensor([ctx.maxBatch * maxActivation], 'dact-b'),
  ];
  const logits = acts[acts.length - 1];
  const dlogits = tensorView(scratch[0], 0, [ctx.maxBatch, classes], 'dlogits');
  const rows = (b: number) => ({ rows: b, classes });
  const t = { logits, labels: ctx.labels };
  const loss = ctx.batched(softmaxCrossEntropy(ctx.gpu, { ...t, loss: ctx.loss, dlogits }, rows(ctx.maxBatch)), rows);
  const correct = ctx.batched(countCorrect(ctx.gpu, { ...t, correct: ctx.correct }, rows(ctx.maxBatch)), rows);
  const backward = backwardLayers(stack, scratch);
  return { forward, loss, correct, backward, logits };
}

/** A dense layer's input as [maxBatch, nIn] rows, and (f16 mode) its packed halves. */
function denseInput(stack: Stack, i: number): { x2: Tensor; half: { packed: Tensor; cast?: KernelCall } | null } {
  const { ctx, shapes, acts } = stack;
  const nIn = elementCount(shapes[i].inShape);
  const x = i === 0 ? ctx.input : acts[i - 1];
  const x2 = tensorView(x, 0, [ctx.maxBatch, nIn], `${x.label}.flat`);
  return { x2, half: ctx.precision === 'f16' ? ctx.halfActivation(x2, nIn, (b) => b) : null };
}

/** A layer's forward calls: one kernel, and in the f16 mode a dense layer's input cast before it. */
function forwardLayer(stack: Stack, i: number): KernelCall[] {
  const { ctx, spec, shapes, entries, acts } = stack;
  const { gpu, maxBatch, params } = ctx;
  const layer = spec.layers[i];
  const { inShape, outShape } = shapes[i];
  const x = i === 0 ? ctx.input : acts[i - 1];
  if (layer.type === 'dense') {
    const nIn = elementCount(inShape);
    const { x2, half } = denseInput(stack, i);
    const w = view(params, entries[i].weight);
    const t = {
      a: half?.packed ?? x2,
      b: half ? ctx.halfWeight(w) : w,
      out: acts[i],
      bias: view(params, entries[i].bias),
    };
    const dims = (b: number) => ({ m: b, n: layer.units, k: nIn });
    const opts = { relu: layer.activation === 'relu', halfA: !!half, halfB: !!half, ...ctx.tile };
    const call = ctx.batched(matmul(gpu, t, dims(maxBatch), opts), dims);
    return half?.cast ? [half.cast, call] : [call];
  }
  if (layer.type === 'conv2d') {
    const dims = convDims(inShape, layer.filters, layer.kernel, convPad(layer));
    const t = { x, w: view(params, entries[i].weight), bias: view(params, entries[i].bias), out: acts[i] };
    const opts = { relu: layer.activation === 'relu', ...conv2dOverride(ctx.variants, 'forward') };
    return [ctx.batched(conv2dForward(gpu, t, dims(maxBatch), opts), dims)];
  }
  const argmax = ctx.tensor([maxBatch, ...outShape], `argmax${i}`);
  stack.argmaxes[i] = argmax;
  const dims = poolDims(inShape);
  return [ctx.batched(maxPoolForward(gpu, { x, out: acts[i], argmax }, dims(maxBatch)), dims)];
}

/** Layers from last to first; `current` indexes the scratch buffer holding d(loss)/d(output of layer i). */
function backwardLayers(stack: Stack, scratch: Tensor[]): KernelCall[] {
  const { ctx, spec, shapes, acts, argmaxes } = stack;
  const { gpu, maxBatch } = ctx;
  const calls: KernelCall[] = [];
  const scratchView = (which: number, shape: readonly number[], label: string) =>
    tensorView(scratch[which], 0, [maxBatch, ...shape], label);
  let current = 0;
  for (let i = spec.layers.length - 1; i >= 0; i--) {
    const layer = spec.layers[i];
    const { inShape, outShape } = shapes[i];
    const x = i === 0 ? ctx.input : acts[i - 1];
    const dOut = scratchView(current, outShape, `d${acts[i].label}`);
    const dx = i === 0 ? undefined : scratchView(1 - current, inShape, `d${x.label}`);
    if (layer.type === 'maxpool2') {
      if (!dx) continue;
      const dims = poolDims(inShape);
      calls.push(ctx.batched(maxPoolBackward(gpu, { dy: dOut, argmax: argmaxes[i], dx }, dims(maxBatch)), dims));
      current = 1 - current;
      continue;
    }
    let dz = dOut;
    if (layer.activation === 'relu') {
      dz = scratchView(1 - current, outShape, `dz${i}`);
      const size = elementCount(outShape);
      const dims = (b: number) => ({ size: b * size });
      calls.push(ctx.batched(reluBackward(gpu, { y: acts[i], dy: dOut, dx: dz }, dims(maxBatch)), dims));
      current = 1 - current;
    }
    // dx lands in the buffer that does not hold dz.
    const dxOther = i === 0 ? undefined : scratchView(1 - current, inShape, `d${x.label}`);
    calls.push(...parameterLayerBackward(stack, i, x, dz, dxOther));
    if (dxOther) current = 1 - current;
  }
  return calls;
}

/** dW, db and (unless it is the first layer) dX of a dense or conv layer from dZ. */
function parameterLayerBackward(stack: Stack, i: number, x: Tensor, dz: Tensor, dx: Tensor | undefined): KernelCall[] {
  const { ctx, spec, shapes, entries } = stack;
  const { gpu, maxBatch, params, grads, tile } = ctx;
  const layer = spec.layers[i];
  const { inShape, outShape } = shapes[i];
  const w = view(params, entries[i].weight);
  const dw = view(grads, entries[i].weight, 'd');
  const dbias = view(grads, entries[i].bias, 'd');
  const calls: KernelCall[] = [];
  if (layer.type === 'dense') {
    const nIn = elementCount(inShape);
    const units = layer.units;
    // The forward's input (its half copy in the f16 mode: made there, reused here).
    const { x2, half } = denseInput(stack, i);
    // dW = Xᵀ·dZ, db = column sums of dZ, dX = dZ·Wᵀ (all sums over the batch).
    const dW = (b: number) => ({ m: nIn, n: units, k: b });
    const a = half?.packed ?? x2;
    calls.push(
      ctx.batched(matmul(gpu, { a, b: dz, out: dw }, dW(maxBatch), { transA: true, halfA: !!half, ...tile }), dW),
    );
    const db = (b: number) => ({ rows: b, cols: units });
    calls.push(ctx.batched(biasGrad(gpu, { dy: dz, dbias }, db(maxBatch)), db));
    if (dx) {
      const dX = (b: number) => ({ m: b, n: nIn, k: units });
      const b = half ? ctx.halfWeight(w) : w;
      calls.push(
        ctx.batched(matmul(gpu, { a: dz, b, out: dx }, dX(maxBatch), { transB: true, halfB: !!half, ...tile }), dX),
      );
    }
    return calls;
  }
  if (layer.type !== 'conv2d') throw new Error('unreachable: pooling has no parameters');
  const dims = convDims(inShape, layer.filters, layer.kernel, convPad(layer));
  const pixels = outShape[0] * outShape[1];
  const filters = layer.filters;
  const filter = conv2dOverride(ctx.variants, 'backwardFilter');
  calls.push(ctx.batched(conv2dBackwardFilter(gpu, { x, dy: dz, dw }, dims(maxBatch), filter), dims));
  const dzRows = tensorView(dz, 0, [maxBatch * pixels, filters], `${dz.label}.rows`);
  const db = (b: number) => ({ rows: b * pixels, cols: filters });
  calls.push(ctx.batched(biasGrad(gpu, { dy: dzRows, dbias }, db(maxBatch)), db));
  const input = conv2dOverride(ctx.variants, 'backwardInput');
  if (dx) calls.push(ctx.batched(conv2dBackwardInput(gpu, { dy: dz, w, dx }, dims(maxBatch), input), dims));
  return calls;
}
