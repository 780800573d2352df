/**
 * What a verifying rank reports with a commit point (`StepSketches`, core/state/sketch.ts), computed in
 * one place from the step's vectors, so the training worker (every-step: web/worker/elastic-steps.ts;
 * local mode: its outer step) and the tests build the very same report the coordinator checks:
 *
 * - gradient sketches (ring segments, seeded by the new state's hash) of the rank's own contribution,
 *   the all-reduced sum (with bucket masses), what it sent and received in the reduce-scatter;
 * - with an int8 wire, the slack masses of sent, received and sum (`int8Slack`, read from the decoded
 *   values: how far an encode may have moved each bucket);
 * - every-step mode: the parameter sketch (`PARAMS_SKETCH_BUCKETS`); local mode: the new parameters,
 *   the outer momentum and the rank's optimizer moments, all in the gradient layout, so the verifier can
 *   check the outer step's arithmetic bucket by bucket against the sum.
 */
import { gradientSketches, paramsSketch, type StepSketches } from './sketch';
import { int8Slack, type WireCompression } from '../wire/ring-sum';

/** The step's vectors, as the rank holds them after applying it. */
export interface StepVectors {
  /** This rank's own contribution, as it put it into the all-reduce. */
  own: Float32Array;
  /** The all-reduced sum it applied (decoded: the same bytes on every rank). */
  sum: Float32Array;
  /** What it sent and received in the reduce-scatter (decoded values, zeros elsewhere). */
  sent: Float32Array;
  received: Float32Array;
  /** The parameters after the step (local mode: the new committed θ_c). */
  params: Float32Array;
  /** Local mode: the outer momentum after the outer step, and this rank's optimizer moments. */
  local?: { outer: Float32Array; moments: readonly Float32Array[] };
}

const values = (k: { values: Float64Array }) => Array.from(k.values);
const mass = (k: { mass: Float64Array }) => Array.from(k.mass);

/** The sketches of one commit point, seeded by `hash` (the state it produced), for a world of `world`. */
export function stepSketches(v: StepVectors, hash: string, world: number, compression: WireCompression): StepSketches {
  const local = v.local;
  const vectors = [v.own, v.sum, v.sent, v.received, ...(local ? [v.params, local.outer, ...local.moments] : [])];
  const [own, sum, sent, received, ...rest] = gradientSketches(vectors, hash, world);
  const sketch: StepSketches = {
    own: values(own),
    sum: values(sum),
    sumMass: mass(sum),
    sent: values(sent),
    sentMass: mass(sent),
    received: values(received),
    receivedMass: mass(received),
    params: local ? values(rest[0]) : values(paramsSketch(v.params, hash)),
  };
  if (local) {
    sketch.outer = values(rest[1]);
    sketch.moments = rest.slice(2).map(values);
  }
  if (compression === 'int8') {
    const slack = [v.sent, v.received, v.sum].map((x) => int8Slack(x, world));
    const [s, r, t] = gradientSketches(slack, hash, world);
    sketch.sentSlack = mass(s);
    sketch.receivedSlack = mass(r);
    sketch.sumSlack = mass(t);
  }
  return sketch;
}
