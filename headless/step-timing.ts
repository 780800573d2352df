/**
 * Where a headless worker's time goes, per outer step (local sync mode), measured on its ports without
 * touching the loop: `tabswarm worker --timings` prints one line per outer step, which bench:scale reads.
 *
 * - compute: time inside the trainer's calls (forward/backward, apply, hash, the pseudo-gradient, the outer
 *   step): the training thread's work as the loop waits for it;
 * - sync: from the pseudo-gradient's return to the outer step's call, which is the allreduce of the
 *   pseudo-gradients over the ring (and nothing else: the loop calls `applyOuter` with its result);
 * - waiting: the rest of the outer step's wall time (the previous commit, stragglers, rounds re-forming).
 *
 * An outer step ends when `applyOuter` returns; its wall time runs from the previous one's end (or the
 * first call after a restore: an outer step that a failure cut short is not reported).
 */
import type { TrainerPort } from '../web/elastic/ports';

export interface OuterStepTiming {
  wallMs: number;
  computeMs: number;
  syncMs: number;
  waitingMs: number;
  /** Inner steps in it (apply calls). */
  innerSteps: number;
}

export function timedTrainer(
  port: TrainerPort,
  onOuterStep: (t: OuterStepTiming) => void,
  now: () => number = () => performance.now(),
): TrainerPort {
  let start: number | null = null;
  let computeMs = 0;
  let syncMs = 0;
  let innerSteps = 0;
  let pseudoDoneAt: number | null = null;
  const reset = (at: number | null) => {
    start = at;
    computeMs = 0;
    syncMs = 0;
    innerSteps = 0;
    pseudoDoneAt = null;
  };
  const wrapped = {} as Record<string, unknown>;
  for (const [name, fn] of Object.entries(port) as [string, (...args: unknown[]) => Promise<unknown>][]) {
    wrapped[name] = async (...args: unknown[]) => {
      const t0 = now();
      if (name === 'restoreBackup' || name === 'restore') reset(null);
      start ??= t0;
      if (name === 'applyOuter' && pseudoDoneAt !== null) syncMs += t0 - pseudoDoneAt;
      try {
        return await fn(...args);
      } finally {
        const t1 = now();
        computeMs += t1 - t0;
        if (name === 'applyAndHash') innerSteps++;
        if (name === 'pseudoGradient') pseudoDoneAt = t1;
        if (name === 'applyOuter') {
          const wallMs = t1 - start!;
          onOuterStep({ wallMs, computeMs, syncMs, waitingMs: Math.max(0, wallMs - computeMs - syncMs), innerSteps });
          reset(t1);
        }
      }
    };
  }
  return wrapped as unknown as TrainerPort;
}
