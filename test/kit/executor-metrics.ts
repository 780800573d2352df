/**
 * Executor metrics that record nothing, for in-process coordinators (test/kit/simulation.ts,
 * test/unit/coordinator/machine/coordinator-harness.ts) that read the machine's metric actions from the action list, not
 * the product's Prometheus timings.
 */
import type { ExecutorMetrics } from '../../coordinator/runtime/executor';

const noMetric = { observe() {}, inc() {} };

export const NO_EXECUTOR_METRICS = {
  apply: () => {},
  eventSeconds: noMetric,
  commitSeconds: noMetric,
  framesSent: noMetric,
  storeTransactions: noMetric,
  storeTransactionSeconds: noMetric,
} as unknown as ExecutorMetrics;
