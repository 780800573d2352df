/**
 * The thin runtime every kernel wrapper builds on.
 *
 * Design (after TF.js's webgpu backend, minus string-built WGSL):
 * - A kernel wrapper turns plain arguments into a `KernelCall`: a cached pipeline, a bind group
 *   built once, and a workgroup count. Calls are *prepared once* (per model and max batch) and then
 *   recorded into a caller's compute pass every step, so a training step is one submission with no
 *   per-op read-back.
 * - Sizes that change between steps (the batch rows of this rank's share, the last short step of an
 *   epoch) live in a small uniform buffer owned by the call; `setUniforms` rewrites it with
 *   `queue.writeBuffer` before the submit. Sizes that never change (tile shapes) are WGSL
 *   `override` constants and part of the pipeline cache key.
 */

export interface Gpu {
  readonly device: GPUDevice;
  /** Pipelines by `label|entry|overrides`. */
  readonly pipelines: Map<string, GPUComputePipeline>;
  /** Shader modules by their source text. */
  readonly modules: Map<string, GPUShaderModule>;
  /** The optional features the device was created with (see `OPTIONAL_FEATURES`). */
  readonly features: KernelFeatures;
}

/** Optional WebGPU features that unlock kernel variants; a device gets each its adapter offers. */
export interface KernelFeatures {
  /** WGSL `enable subgroups;`: subgroup shuffles and reductions (Chrome 134+). */
  subgroups: boolean;
  /** WGSL `enable f16;`: half-precision arithmetic (Chrome 120+). No kernel needs it: see docs/gpu.md. */
  shaderF16: boolean;
}

/** The optional features requested wherever the adapter offers them. */
export const OPTIONAL_FEATURES = ['subgroups', 'shader-f16'] as const;

export function createGpu(device: GPUDevice): Gpu {
  const features = { subgroups: device.features.has('subgroups'), shaderF16: device.features.has('shader-f16') };
  return { device, pipelines: new Map(), modules: new Map(), features };
}

/**
 * What every place that opens a device for the kernels asks for: the adapter's full storage limits (a
 * model's flat buffers can be large) and each of `OPTIONAL_FEATURES` the adapter offers.
 */
export function kernelDeviceDescriptor(adapter: GPUAdapter, label = 'tabswarm'): GPUDeviceDescriptor {
  return {
    label,
    requiredFeatures: OPTIONAL_FEATURES.filter((f) => adapter.features.has(f)) as GPUFeatureName[],
    requiredLimits: {
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxBufferSize: adapter.limits.maxBufferSize,
      maxStorageBuffersPerShaderStage: adapter.limits.maxStorageBuffersPerShaderStage,
      // Kernel variants with larger workgroups or tiles (the autotuner's candidates) need these.
      maxComputeWorkgroupStorageSize: adapter.limits.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: adapter.limits.maxComputeInvocationsPerWorkgroup,
      maxComputeWorkgroupSizeX: adapter.limits.maxComputeWorkgroupSizeX,
      maxComputeWorkgroupSizeY: adapter.limits.maxComputeWorkgroupSizeY,
    },
  };
}

/**
 * A float32 (or u32) tensor on the GPU: a range of a storage buffer and its logical shape (row-major).
 * Parameters, gradients and optimizer moments of a model live in one flat buffer each (so the
 * optimizer is one dispatch, a snapshot one copy, an allreduce one read-back); a layer's tensors are
 * views into them at `offset`, a multiple of 256 bytes (minStorageBufferOffsetAlignment).
 */
export interface Tensor {
  readonly buffer: GPUBuffer;
  /** Byte offset into `buffer`; a multiple of 256. */
  readonly offset: number;
  readonly shape: readonly number[];
  /** Number of 4-byte elements. */
  readonly size: number;
  readonly label: string;
}

export const STORAGE_USAGE =
  GPUBufferUsageFlags('STORAGE') | GPUBufferUsageFlags('COPY_SRC') | GPUBufferUsageFlags('COPY_DST');

/** GPUBufferUsage is a global only where WebGPU exists; read it lazily so importing is safe. */
function GPUBufferUsageFlags(name: 'STORAGE' | 'COPY_SRC' | 'COPY_DST' | 'UNIFORM' | 'MAP_READ'): number {
  const table = { MAP_READ: 0x1, COPY_SRC: 0x4, COPY_DST: 0x8, UNIFORM: 0x40, STORAGE: 0x80 } as const;
  return table[name];
}

export function elementCount(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** A storage tensor, zero-filled or initialised from `data`. Buffers are at least 16 bytes (vec4 loads). */
export function createTensor(
  gpu: Gpu,
  shape: readonly number[],
  label: string,
  data?: Float32Array | Uint32Array | Int32Array,
): Tensor {
  const size = elementCount(shape);
  if (data && data.length !== size) {
    throw new Error(`createTensor(${label}): data has ${data.length} elements, shape [${shape}] needs ${size}`);
  }
  const byteLength = Math.max(16, Math.ceil((size * 4) / 16) * 16);
  const buffer = gpu.device.createBuffer({ label, size: byteLength, usage: STORAGE_USAGE, mappedAtCreation: !!data });
  if (data) {
    new Uint8Array(buffer.getMappedRange()).set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    buffer.unmap();
  }
  return { buffer, offset: 0, shape: [...shape], size, label };
}

/** Elements per 256-byte alignment unit: views into a flat buffer start at multiples of this. */
export const VIEW_ALIGN_ELEMENTS = 64;

export function alignElements(n: number): number {
  return Math.ceil(n / VIEW_ALIGN_ELEMENTS) * VIEW_ALIGN_ELEMENTS;
}

/** A view of `shape` at element `elementOffset` (a multiple of 64) of a flat tensor. */
export function tensorView(base: Tensor, elementOffset: number, shape: readonly number[], label: string): Tensor {
  if (elementOffset % VIEW_ALIGN_ELEMENTS !== 0)
    throw new Error(`tensorView(${label}): offset ${elementOffset} not a multiple of ${VIEW_ALIGN_ELEMENTS}`);
  const size = elementCount(shape);
  if (base.offset / 4 + elementOffset + size > base.buffer.size / 4)
    throw new Error(`tensorView(${label}): out of range of ${base.label}`);
  return { buffer: base.buffer, offset: base.offset + elementOffset * 4, shape: [...shape], size, label };
}

/**
 * Whether two tensors are the same buffer range (an op on them must use its in-place entry point).
 * Partial overlap is never meaningful (a dispatch would race on it), so it throws.
 */
export function sameRange(x: Tensor, y: Tensor): boolean {
  if (x.buffer !== y.buffer) return false;
  if (x.offset === y.offset) return true;
  if (x.offset < y.offset + y.size * 4 && y.offset < x.offset + x.size * 4) {
    throw new Error(`tensors ${x.label} and ${y.label} partially overlap`);
  }
  return false;
}

/** A uniform buffer of `words` 32-bit words (rounded up to 16 bytes). */
export function createUniformBuffer(gpu: Gpu, words: number, label: string): GPUBuffer {
  return gpu.device.createBuffer({
    label,
    size: Math.max(16, Math.ceil((words * 4) / 16) * 16),
    usage: GPUBufferUsageFlags('UNIFORM') | GPUBufferUsageFlags('COPY_DST'),
  });
}

/** Write u32 words (use `f32bits` for floats) into a uniform buffer. */
export function writeUniforms(gpu: Gpu, buffer: GPUBuffer, words: readonly number[]): void {
  const data = new Uint32Array(Math.ceil(words.length / 4) * 4);
  data.set(words);
  gpu.device.queue.writeBuffer(buffer, 0, data);
}

const f32scratch = new Float32Array(1);
const u32scratch = new Uint32Array(f32scratch.buffer);
/** The bit pattern of a float32, for packing floats into a u32 uniform array. */
export function f32bits(x: number): number {
  f32scratch[0] = x;
  return u32scratch[0];
}

export function shaderModule(gpu: Gpu, code: string, label: string): GPUShaderModule {
  let module = gpu.modules.get(code);
  if (!module) {
    module = gpu.device.createShaderModule({ label, code });
    gpu.modules.set(code, module);
  }
  return module;
}

/** A compute pipeline cached by source, entry point and override constants (layout 'auto'). */
export function computePipeline(
  gpu: Gpu,
  code: string,
  label: string,
  entryPoint: string,
  constants: Record<string, number> = {},
): GPUComputePipeline {
  const key = `${label}|${entryPoint}|${JSON.stringify(constants)}|${code.length}`;
  let pipeline = gpu.pipelines.get(key);
  if (!pipeline) {
    pipeline = gpu.device.createComputePipeline({
      label: `${label}:${entryPoint}`,
      layout: 'auto',
      compute: { module: shaderModule(gpu, code, label), entryPoint, constants },
    });
    gpu.pipelines.set(key, pipeline);
  }
  return pipeline;
}

/**
 * Bind group for group 0 with resources bound at 0..n-1 in order: a Tensor binds its range
 * (offset, size rounded up to 16 bytes when the buffer allows), a GPUBuffer binds whole.
 */
export function bindBuffers(
  gpu: Gpu,
  pipeline: GPUComputePipeline,
  resources: readonly (Tensor | GPUBuffer)[],
  label: string,
): GPUBindGroup {
  return gpu.device.createBindGroup({
    label,
    layout: pipeline.getBindGroupLayout(0),
    entries: resources.map((r, binding) => {
      if ('shape' in r) {
        const bytes = Math.min(Math.max(16, Math.ceil((r.size * 4) / 16) * 16), r.buffer.size - r.offset);
        return { binding, resource: { buffer: r.buffer, offset: r.offset, size: bytes } };
      }
      return { binding, resource: { buffer: r } };
    }),
  });
}

/**
 * A prepared kernel whose sizes may change between steps (the batch rows of this rank's share):
 * `update(dims)` rewrites its uniforms and workgroup count; `call` is recorded every step.
 */
export interface Kernel<D> {
  readonly call: KernelCall;
  update(dims: D): void;
}

/** One prepared dispatch. `workgroups` may be changed before recording (e.g. when the batch shrinks). */
export interface KernelCall {
  readonly label: string;
  readonly pipeline: GPUComputePipeline;
  readonly bindGroup: GPUBindGroup;
  workgroups: [number, number, number];
  /** Floating-point operations of one dispatch at the current dims, where the kernel counts them (matmul). */
  flops?: number;
}

/** Record calls into one compute pass of `encoder`, in order (WebGPU orders dispatches in a pass). */
export function recordCalls(encoder: GPUCommandEncoder, calls: readonly KernelCall[], label = 'calls'): void {
  const pass = encoder.beginComputePass({ label });
  for (const call of calls) {
    if (call.workgroups[0] * call.workgroups[1] * call.workgroups[2] === 0) continue;
    pass.setPipeline(call.pipeline);
    pass.setBindGroup(0, call.bindGroup);
    pass.dispatchWorkgroups(call.workgroups[0], call.workgroups[1], call.workgroups[2]);
  }
  pass.end();
}

/** Encode and submit calls in one command buffer. */
export function submitCalls(gpu: Gpu, calls: readonly KernelCall[], label = 'calls'): void {
  const encoder = gpu.device.createCommandEncoder({ label });
  recordCalls(encoder, calls, label);
  gpu.device.queue.submit([encoder.finish()]);
}

/** Read a whole buffer back (copy to a fresh MAP_READ staging buffer). Not for the hot path: see StagingReader. */
export async function readBuffer(gpu: Gpu, buffer: GPUBuffer, byteLength = buffer.size): Promise<ArrayBuffer> {
  const staging = gpu.device.createBuffer({
    size: Math.ceil(byteLength / 4) * 4,
    usage: GPUBufferUsageFlags('MAP_READ') | GPUBufferUsageFlags('COPY_DST'),
  });
  const encoder = gpu.device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, staging.size);
  gpu.device.queue.submit([encoder.finish()]);
  await staging.mapAsync(0x1 /* GPUMapMode.READ */);
  const copy = staging.getMappedRange().slice(0, byteLength);
  staging.unmap();
  staging.destroy();
  return copy;
}

/**
 * Reads ranges of GPU buffers back through reused MAP_READ staging buffers, for read-backs that run
 * every step (loss and gradient sums in elastic mode): instead of a createBuffer + destroy per read,
 * a buffer is created only when no idle one is large enough (the first read of a size, or reads in
 * flight at the same time, each of which needs its own buffer while it is mapped).
 */
export class StagingReader {
  private readonly idle: GPUBuffer[] = [];

  constructor(
    private readonly gpu: Gpu,
    private readonly label: string,
  ) {}

  /** Copy `byteLength` bytes (a multiple of 4) at `offset` of `source` to the CPU. */
  read(source: GPUBuffer, offset: number, byteLength: number): Promise<ArrayBuffer> {
    return this.use(source, offset, byteLength, (mapped) => mapped.slice(0));
  }

  /**
   * Copy the range as `read` does, but hand `fn` the mapped range itself (no CPU copy, e.g. to hash
   * it): `fn` must not keep the ArrayBuffer, which is unmapped and reused when it returns. The copy
   * is submitted before this returns, so it sees exactly the work submitted so far. `record`, if
   * given, records work into the same command buffer before the copy (e.g. the dispatch that computes
   * what is read: one submission for both).
   */
  use<T>(
    source: GPUBuffer,
    offset: number,
    byteLength: number,
    fn: (mapped: ArrayBuffer) => T,
    record?: (encoder: GPUCommandEncoder) => void,
  ): Promise<T> {
    return this.useAll([{ buffer: source, offset }], byteLength, fn, record);
  }

  /**
   * `use` of several ranges of `byteLength` bytes each, copied one after the other into one staging
   * buffer and mapped once (e.g. the parameters and every optimizer moment, to hash the whole state).
   */
  async useAll<T>(
    sources: readonly { buffer: GPUBuffer; offset: number }[],
    byteLength: number,
    fn: (mapped: ArrayBuffer) => T,
    record?: (encoder: GPUCommandEncoder) => void,
  ): Promise<T> {
    if (byteLength <= 0 || byteLength % 4 !== 0)
      throw new Error(`${this.label}: read of ${byteLength} bytes must be a positive multiple of 4`);
    const total = byteLength * sources.length;
    const staging = this.take(total);
    const encoder = this.gpu.device.createCommandEncoder({ label: this.label });
    record?.(encoder);
    sources.forEach((s, i) => {
      encoder.copyBufferToBuffer(s.buffer, s.offset, staging, i * byteLength, byteLength);
    });
    this.gpu.device.queue.submit([encoder.finish()]);
    try {
      await staging.mapAsync(0x1 /* GPUMapMode.READ */, 0, total);
    } catch (error) {
      staging.destroy();
      throw error;
    }
    try {
      return fn(staging.getMappedRange(0, total));
    } finally {
      staging.unmap();
      this.idle.push(staging);
    }
  }

  /** The smallest idle buffer that fits (so a small read does not occupy the large one), or a new one. */
  private take(byteLength: number): GPUBuffer {
    let best = -1;
    this.idle.forEach((b, i) => {
      if (b.size >= byteLength && (best < 0 || b.size < this.idle[best].size)) best = i;
    });
    if (best >= 0) return this.idle.splice(best, 1)[0];
    return this.gpu.device.createBuffer({
      label: `${this.label}.staging`,
      size: Math.max(4, byteLength),
      usage: GPUBufferUsageFlags('MAP_READ') | GPUBufferUsageFlags('COPY_DST'),
    });
  }

  /** Free the idle staging buffers (reads in flight free theirs on failure, or return them here). */
  destroy(): void {
    for (const b of this.idle) b.destroy();
    this.idle.length = 0;
  }
}

export async function readTensor(gpu: Gpu, t: Tensor): Promise<Float32Array> {
  const all = await readBuffer(gpu, t.buffer, t.offset + t.size * 4);
  return new Float32Array(all, t.offset, t.size);
}

export function writeTensor(gpu: Gpu, t: Tensor, data: Float32Array | Uint32Array, elementOffset = 0): void {
  if (elementOffset + data.length > t.size)
    throw new Error(`writeTensor(${t.label}): ${data.length} elements at ${elementOffset} exceed ${t.size}`);
  gpu.device.queue.writeBuffer(t.buffer, t.offset + elementOffset * 4, data.buffer, data.byteOffset, data.byteLength);
}

export function ceilDiv(a: number, b: number): number {
  return Math.ceil(a / b);
}

/** Throw unless every dimension in `dims` is a non-negative integer. */
export function checkDims(label: string, dims: object): void {
  for (const [name, v] of Object.entries(dims)) {
    if (!Number.isInteger(v) || v < 0) throw new Error(`${label}: ${name} = ${v} is not a non-negative integer`);
  }
}

/** Throw unless each tensor holds at least the elements listed with it. */
export function checkTensorSizes(label: string, needs: readonly (readonly [Tensor, number])[]): void {
  for (const [t, n] of needs) {
    if (t.size < n) throw new Error(`${label}: ${t.label} has ${t.size} elements, needs ${n}`);
  }
}

/** Split a 1-D dispatch of `groups` workgroups over x/y to respect maxComputeWorkgroupsPerDimension (65535). */
export function dispatch1d(groups: number): [number, number, number] {
  if (groups <= 65535) return [groups, 1, 1];
  const y = Math.ceil(groups / 65535);
  return [65535, y, 1];
}

/**
 * A prepared kernel with its own uniform buffer (`uniformCount` words): `bind(uniforms)` lists the
 * group-0 resources in binding order; `plan(dims)` validates dims (throwing on bad ones) and returns
 * the uniform words and workgroup count, which `update(dims)` writes. Dims are applied once here.
 */
export function preparedKernel<D>(
  gpu: Gpu,
  spec: {
    label: string;
    pipeline: GPUComputePipeline;
    uniformCount: number;
    bind: (uniforms: GPUBuffer) => readonly (Tensor | GPUBuffer)[];
    plan: (dims: D) => { uniforms: readonly number[]; workgroups: [number, number, number]; flops?: number };
  },
  dims: D,
): Kernel<D> {
  const { label, pipeline } = spec;
  const uniforms = createUniformBuffer(gpu, spec.uniformCount, `${label}.uniforms`);
  const call: KernelCall = {
    label,
    pipeline,
    bindGroup: bindBuffers(gpu, pipeline, spec.bind(uniforms), label),
    workgroups: [0, 1, 1],
  };
  const update = (d: D): void => {
    const planned = spec.plan(d);
    writeUniforms(gpu, uniforms, planned.uniforms);
    call.workgroups = planned.workgroups;
    if (planned.flops !== undefined) call.flops = planned.flops;
  };
  update(dims);
  return { call, update };
}

/**
 * A prepared 1-D kernel over the first `size` elements of flat tensors (elementwise ops, optimizers):
 * group-0 bindings are the uniforms then `tensors` in order; `update` checks the size against every
 * tensor, rewrites the uniforms (`uniformWords(dims)`, at most `uniformCount` words) and the dispatch.
 * With `elementsPerThread` (a kernel that declares the override ELEMENTS_PER_THREAD) each workgroup
 * covers workgroupSize · elementsPerThread elements.
 */
export function flatKernel<D extends { size: number }>(
  gpu: Gpu,
  spec: {
    code: string;
    module: string;
    entryPoint: string;
    workgroupSize: number;
    elementsPerThread?: number;
    uniformCount: number;
    uniformWords: (dims: D) => number[];
  },
  tensors: readonly Tensor[],
  dims: D,
): Kernel<D> {
  const label = `${spec.module}.${spec.entryPoint}`;
  const constants: Record<string, number> = { WORKGROUP_SIZE: spec.workgroupSize };
  if (spec.elementsPerThread !== undefined) constants.ELEMENTS_PER_THREAD = spec.elementsPerThread;
  const perGroup = spec.workgroupSize * (spec.elementsPerThread ?? 1);
  return preparedKernel(
    gpu,
    {
      label,
      pipeline: computePipeline(gpu, spec.code, spec.module, spec.entryPoint, constants),
      uniformCount: spec.uniformCount,
      bind: (uniforms) => [uniforms, ...tensors],
      plan: (d) => {
        if (!Number.isInteger(d.size) || d.size < 0)
          throw new Error(`${label}: size ${d.size} is not a non-negative integer`);
        for (const t of tensors) {
          if (d.size > t.size)
            throw new Error(`${label}: size ${d.size} exceeds tensor ${t.label} (${t.size} elements)`);
        }
        return { uniforms: spec.uniformWords(d), workgroups: dispatch1d(ceilDiv(d.size, perGroup)) };
      },
    },
    dims,
  );
}
