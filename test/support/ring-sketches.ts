/**
 * The gradient sketches every rank of an honest ring reduce-scatter reports (the ring of
 * web/net/ring-allreduce.ts: segment j starts at rank j and ends with its owner j − 1), from each rank's
 * own sketch: what it sent and received on each hop, and the sum. Shared by the machine's check tests
 * (verify-kit.ts, which also makes liars) and the scripted fake workers (test/kit/fake-workers.ts).
 */
import type { StepSketches } from '../../core/state/sketch';

/**
 * Every rank's sketches when each adds `own[r]`, masses from `mass`, unless `added(r, j, honest)` says
 * what rank r really sent on for segment j instead (a liar).
 */
export function ringSketches(
  own: number[][],
  mass: (v: number[]) => number[],
  added: (r: number, j: number, block: number[]) => number[] = (_r, _j, block) => block,
): Omit<StepSketches, 'params'>[] {
  const size = own.length;
  const n = own[0].length;
  const per = n / size;
  const zeros = () => new Array<number>(n).fill(0);
  const sent = own.map(zeros);
  const received = own.map(zeros);
  const sum = zeros();
  for (let j = 0; j < size; j++) {
    let partial = new Array<number>(per).fill(0);
    for (let g = 0; g < size; g++) {
      const r = (j + g) % size;
      const honest = partial.map((x, k) => x + own[r][j * per + k]);
      if (g === size - 1) {
        for (const [k, x] of honest.entries()) sum[j * per + k] = x;
        break;
      }
      partial = added(r, j, honest);
      partial.forEach((x, k) => {
        sent[r][j * per + k] = x;
        received[(r + 1) % size][j * per + k] = x;
      });
    }
  }
  return own.map((o, r) => ({
    own: o,
    sum,
    sumMass: mass(sum),
    sent: sent[r],
    sentMass: mass(sent[r]),
    received: received[r],
    receivedMass: mass(received[r]),
  }));
}
