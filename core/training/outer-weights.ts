/**
 * Each rank's weight in an outer step of local sync mode (docs/local-steps.md): the samples it computed
 * in the outer step over the samples of every rank. Both counts follow from the shared sampler
 * (`assignStep`), so every rank agrees on every weight without a message. The tab's loop
 * (web/elastic/step-runner.ts) counts the samples and the training worker's pseudo-gradient
 * (web/worker/outer-step.ts) scales by the weight; the rule lives here so neither reaches into the other.
 */

/** This rank's weight in an outer step: `own` samples of `total`; 0 when the outer step had none. */
export function outerWeight(own: number, total: number): number {
  return total > 0 ? own / total : 0;
}
