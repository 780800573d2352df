/**
 * The hostile tab's decorators: each wraps one port of the normal elastic tab (web/elastic/start.ts
 * `wrapPorts`) and misbehaves in one way, from step `fromStep` on, so the tab first trains honestly.
 * This file lives under test/ on purpose: nothing under web/ imports test/ (.dependency-cruiser.cjs
 * `product-not-into-test-or-bench`), so `vite build` cannot put any of it in the production bundle;
 * test/integration/production-bundle.test.ts checks a fresh build for `HOSTILE_TAB_MARKER`.
 *
 * Modes (`?mode=`):
 * - `scale` (`factor`, default 1000), `negate`, `noise` (`std`: Gaussian noise of std × the
 *   gradient's RMS, default 1): this rank's own gradient sums, as the trainer port returns them (local
 *   sync mode: its pseudo-gradient, its whole contribution to an outer step);
 * - `corrupt-forward` (`factor`): the partial sums this rank forwards in the ring's reduce-scatter
 *   (ring steps 1 … size−2; step 0 is its own data, later steps are the allgather), scaled on the way
 *   out of its right link — its own contribution untouched;
 * - `nan`: its own reduce-scatter data (ring step 0) replaced by NaN on the wire (its own allreduce
 *   would refuse a NaN input, so a hostile page bypasses that check as a modified one would);
 * - `lie-throughput`: `computeMs` of every step report set to `claim` (default 1e-6);
 * - `bad-checkpoint`: a requested checkpoint uploaded with every parameter at 0.5;
 * - `claim-state`: every hello claims the last committed step and hash read from `/api/status`, in
 *   that run (`forgeHelloRunId`: a first hello would name no run, and a claim outside the run is
 *   ignored anyway).
 */
import { decodeSnapshot, encodeSnapshot } from '../../../../core/state/snapshot';
import type { HttpPort } from '../../../../web/elastic/checkpoint-transfer';
import type { ControlPort, MeshPort, TrainerPort } from '../../../../web/elastic/ports';
import type { ElasticPorts } from '../../../../web/elastic/start';
import { decodeFrame, FRAME_HEADER_BYTES, FrameKind, PayloadEncoding } from '../../../../web/net/framing';
import type { Link } from '../../../../web/net/link';
import { mulberry32 } from '../../../support/rng';
import { INT8_BLOCK_VALUES, INT8_SCALE_BYTES } from '../../../../core/wire/int8-blocks';

/** Only these decorators contain it: the production-bundle test looks for it in a fresh build. */
export const HOSTILE_TAB_MARKER = 'tabswarm-hostile-tab-decorators';

export const HOSTILE_MODES = [
  'scale',
  'negate',
  'noise',
  'corrupt-forward',
  'nan',
  'lie-throughput',
  'bad-checkpoint',
  'claim-state',
] as const;
export type HostileMode = (typeof HOSTILE_MODES)[number];

export interface Attack {
  mode: HostileMode;
  /** `scale`, `corrupt-forward`: the multiplier. */
  factor: number;
  /** `noise`: std of the added noise relative to the gradient's RMS. */
  std: number;
  /** `lie-throughput`: the claimed computeMs. */
  claim: number;
  /** First step attacked (earlier steps are honest). */
  fromStep: number;
  seed: number;
}

/** What the decorators did, for the test to read (`window.tabswarmHostile.tally`). */
export interface Tally {
  gradients: number;
  frames: number;
  reports: number;
  uploads: number;
  hellos: number;
  /** Hellos sent naming the coordinator's run instead of none (`forgeHelloRunId`). */
  forgedRuns: number;
  /** The first step attacked, or null. */
  firstStep: number | null;
}

export function parseAttack(query: URLSearchParams): Attack {
  const mode = query.get('mode') as HostileMode;
  if (!HOSTILE_MODES.includes(mode)) throw new Error(`?mode=${mode} is not one of ${HOSTILE_MODES.join(', ')}`);
  const number = (name: string, fallback: number): number => {
    const raw = query.get(name);
    const n = raw === null ? fallback : Number(raw);
    if (!Number.isFinite(n)) throw new Error(`?${name}=${raw} is not a finite number`);
    return n;
  };
  return {
    mode,
    factor: number('factor', 1000),
    std: number('std', 1),
    claim: number('claim', 1e-6),
    fromStep: number('fromStep', 1),
    seed: number('seed', 1),
  };
}

export function emptyTally(): Tally {
  return { gradients: 0, frames: 0, reports: 0, uploads: 0, hellos: 0, forgedRuns: 0, firstStep: null };
}

/** What `/api/status` tells anyone about the last commit. */
export interface PublicCommit {
  runId: string;
  step: number;
  hash: string;
}

export interface HostileContext {
  attack: Attack;
  tally: Tally;
  /** The step whose gradients are being computed (the live state's step + 1). */
  step(): number;
  /** The coordinator's run and its last committed step and hash (from `/api/status`), for `claim-state`. */
  committed(): PublicCommit | null;
}

/** The honest ports with the one decorator the attack needs. */
export function hostilePorts(ports: ElasticPorts, ctx: HostileContext): ElasticPorts {
  switch (ctx.attack.mode) {
    case 'scale':
    case 'negate':
    case 'noise':
      return { ...ports, trainer: poisonedTrainer(ports.trainer, ctx) };
    case 'corrupt-forward':
    case 'nan':
      return { ...ports, mesh: tamperingMesh(ports.mesh, ctx) };
    case 'lie-throughput':
      return { ...ports, control: lyingControl(ports.control, ctx) };
    case 'bad-checkpoint':
      return { ...ports, http: poisonedUploads(ports.http, ctx) };
    case 'claim-state':
      return { ...ports, hello: () => claimingHello(ports.hello(), ctx) };
  }
}

function mark(ctx: HostileContext, step: number): void {
  ctx.tally.firstStep ??= step;
}

/** Standard normal deviates (Box–Muller) from a seeded uniform source. */
function gaussian(rand: () => number): () => number {
  return () => Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

/**
 * Scale, negate or add noise to this rank's own contribution before it enters the allreduce: its
 * gradient sums (every-step) or its pseudo-gradient (local sync mode, whose gradients stay on the device).
 */
function poisonedTrainer(inner: TrainerPort, ctx: HostileContext): TrainerPort {
  const normal = gaussian(mulberry32(ctx.attack.seed));
  const poison = (buffer: ArrayBuffer): void => {
    const g = new Float32Array(buffer);
    const { mode, factor, std } = ctx.attack;
    if (mode === 'scale' || mode === 'negate') {
      const k = mode === 'scale' ? factor : -1;
      for (let i = 0; i < g.length; i++) g[i] *= k;
    } else {
      let squares = 0;
      for (let i = 0; i < g.length; i++) squares += g[i] * g[i];
      const sigma = std * Math.sqrt(squares / Math.max(1, g.length));
      for (let i = 0; i < g.length; i++) g[i] += sigma * normal();
    }
    ctx.tally.gradients += 1;
    mark(ctx, ctx.step());
  };
  return {
    ...inner,
    computeGradients: async (indices, keepOnDevice) => {
      const result = await inner.computeGradients(indices, keepOnDevice);
      // A world of one (and local mode) keeps its gradients on the device: nothing leaves them here.
      if (result.gradients && ctx.step() >= ctx.attack.fromStep) poison(result.gradients);
      return result;
    },
    pseudoGradient: async (weight) => {
      const delta = await inner.pseudoGradient(weight);
      if (ctx.step() >= ctx.attack.fromStep) poison(delta);
      return delta;
    },
  };
}

/** Ring size per link, kept current by `connectRing` (a link may serve several rounds). */
const ringSizes = new WeakMap<Link, number>();

/**
 * Tamper with the ring's outgoing frames. The right link's `send` is replaced in place (not wrapped
 * in a new object): the collectives keep one frame router per link object, and a second object for
 * the same channel would get its own router and every frame twice.
 */
function tamperingMesh(inner: MeshPort, ctx: HostileContext): MeshPort {
  return {
    get peerId() {
      return inner.peerId;
    },
    async connectRing(world, rank, opts) {
      const ring = await inner.connectRing(world, rank, opts);
      const right = ring.right;
      if (right) {
        if (!ringSizes.has(right)) {
          const send = right.send.bind(right);
          right.send = (message) => send(tamperFrame(message, ringSizes.get(right) ?? 0, ctx));
        }
        ringSizes.set(right, ring.size);
      }
      return ring;
    },
  };
}

/** The frame as this hostile rank sends it (altered in place when the mode says so). */
export function tamperFrame(message: ArrayBuffer, size: number, ctx: HostileContext): ArrayBuffer {
  const frame = decodeFrame(message);
  if (frame.kind !== FrameKind.RingChunk || frame.id.step < ctx.attack.fromStep) return message;
  const g = frame.ringStep;
  const forwarded = g >= 1 && g < size - 1;
  if (ctx.attack.mode === 'corrupt-forward' && forwarded) {
    if (frame.encoding === PayloadEncoding.Float32) {
      const values = new Float32Array(message, FRAME_HEADER_BYTES, frame.payloadLength / 4);
      for (let i = 0; i < values.length; i++) values[i] *= ctx.attack.factor;
    } else if (frame.encoding === PayloadEncoding.Float16) {
      // One power-of-two scale per frame: move it by log2(factor).
      const view = new DataView(message);
      view.setInt8(19, view.getInt8(19) + Math.round(Math.log2(ctx.attack.factor)));
    } else {
      // int8 blocks: every block's float32 scale × factor (still a valid frame, other values).
      forEachInt8Scale(message, frame.payloadLength, (view, at) =>
        view.setFloat32(at, view.getFloat32(at, true) * ctx.attack.factor, true),
      );
    }
  } else if (ctx.attack.mode === 'nan' && g === 0) {
    if (frame.encoding === PayloadEncoding.Float32)
      new Float32Array(message, FRAME_HEADER_BYTES, frame.payloadLength / 4).fill(Number.NaN);
    else if (frame.encoding === PayloadEncoding.Float16)
      new Uint16Array(message, FRAME_HEADER_BYTES, frame.payloadLength / 2).fill(0x7e00);
    else forEachInt8Scale(message, frame.payloadLength, (view, at) => view.setFloat32(at, Number.NaN, true));
  } else {
    return message;
  }
  ctx.tally.frames += 1;
  mark(ctx, frame.id.step);
  return message;
}

/** Calls `edit` at the byte offset of each int8 block's scale in a frame's payload (core/wire/int8-blocks.ts). */
function forEachInt8Scale(
  message: ArrayBuffer,
  payloadLength: number,
  edit: (view: DataView, at: number) => void,
): void {
  const view = new DataView(message);
  for (let at = 0; at < payloadLength; at += INT8_SCALE_BYTES + INT8_BLOCK_VALUES) edit(view, FRAME_HEADER_BYTES + at);
}

/** Claim a tiny compute time in every step report (the coordinator should measure, not believe). */
function lyingControl(inner: ControlPort, ctx: HostileContext): ControlPort {
  return {
    send: (body) => {
      if (body.type !== 'step_report' || body.step < ctx.attack.fromStep) return inner.send(body);
      ctx.tally.reports += 1;
      mark(ctx, body.step);
      return inner.send({ ...body, computeMs: ctx.attack.claim });
    },
  };
}

/** Every checkpoint upload carries the real header and optimizer state, but all parameters at 0.5. */
function poisonedUploads(inner: HttpPort, ctx: HostileContext): HttpPort {
  const poison = (body: ArrayBuffer): ArrayBuffer => {
    const snapshot = decodeSnapshot(body);
    if (snapshot.step < ctx.attack.fromStep) return body;
    ctx.tally.uploads += 1;
    mark(ctx, snapshot.step);
    return encodeSnapshot({ ...snapshot, params: new Float32Array(snapshot.params.length).fill(0.5) });
  };
  return {
    baseUrl: inner.baseUrl,
    fetch: (url, init) =>
      init?.method === 'PUT' && init.body instanceof ArrayBuffer
        ? inner.fetch(url, { ...init, body: poison(init.body) })
        : inner.fetch(url, init),
    put: inner.put && ((url, body, opts) => inner.put!(url, poison(body), opts)),
  };
}

/** Claim to hold the last committed state, copied from the public status. */
function claimingHello<H extends { haveStep: number | null; haveHash: string | null }>(
  hello: H,
  ctx: HostileContext,
): H {
  const committed = ctx.committed();
  if (!committed || committed.step < ctx.attack.fromStep) return hello;
  ctx.tally.hellos += 1;
  mark(ctx, committed.step);
  return { ...hello, haveStep: committed.step, haveHash: committed.hash };
}

/**
 * `claim-state` on the wire: a hello that names no run (a tab's first) is sent naming the coordinator's
 * current run instead, so the claim reads as a tab coming back to this run. The client fills `runId`
 * itself, so this patches the sockets' `send` (`proto`: `WebSocket.prototype` in the page).
 */
export function forgeHelloRunId(
  proto: { send(this: { url: string }, data: unknown): void },
  ctx: Pick<HostileContext, 'committed' | 'tally'>,
): void {
  const send = proto.send;
  proto.send = function (this: { url: string }, data: unknown) {
    const runId = ctx.committed()?.runId;
    if (runId && typeof data === 'string' && new URL(this.url).pathname === '/ws') {
      const msg = JSON.parse(data) as { type?: string; runId?: string | null };
      if (msg.type === 'hello' && msg.runId === null) {
        data = JSON.stringify({ ...msg, runId });
        ctx.tally.forgedRuns += 1;
      }
    }
    send.call(this, data);
  };
}
