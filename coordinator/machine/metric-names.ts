/**
 * The metrics the machine emits (`metric` actions), with their Prometheus type and help: the server
 * renders them (coordinator/admin/server-metrics.ts). Re-exported by state.ts.
 */

/** Metrics the machine emits; the server renders them (Prometheus). Counters add `value` (default 1), gauges set it, summaries observe it. */
export const METRICS = {
  tabswarm_joins_total: { type: 'counter', help: 'Workers welcomed (hello accepted).' },
  tabswarm_leaves_total: { type: 'counter', help: 'Workers gone: goodbye, disconnect, timeout or kick.' },
  tabswarm_failures_total: {
    type: 'counter',
    help: 'Failures noticed (socket closed, heartbeat late, collective failed, divergence).',
  },
  tabswarm_restarts_total: { type: 'counter', help: 'Rounds closed by a failure (counted against maxRestarts).' },
  tabswarm_rounds_total: { type: 'counter', help: 'Rounds opened.' },
  tabswarm_commits_total: { type: 'counter', help: 'Commits recorded.' },
  tabswarm_steps_total: { type: 'counter', help: 'Steps committed.' },
  tabswarm_samples_total: { type: 'counter', help: 'Samples committed.' },
  tabswarm_checkpoints_total: { type: 'counter', help: 'Checkpoints stored.' },
  tabswarm_message_errors_total: { type: 'counter', help: 'Rejected frames and messages, by code.' },
  tabswarm_world_size: { type: 'gauge', help: 'Ranks in the current round (0 while gathering).' },
  tabswarm_waiting_workers: { type: 'gauge', help: 'Enrolled workers not in the round.' },
  tabswarm_rendezvous_duration_ms: { type: 'summary', help: 'From the start of gathering to train.' },
  tabswarm_loss: { type: 'gauge', help: 'Mean loss of the last commit.' },
  tabswarm_evaluations_total: { type: 'counter', help: 'Test-set evaluations accepted.' },
  tabswarm_test_accuracy: { type: 'gauge', help: 'Test accuracy of the last accepted evaluation, in [0, 1].' },
  tabswarm_restarts_absorbed_total: {
    type: 'counter',
    help: 'Restarts not counted against maxRestarts because their culprit was over its quota.',
  },
  tabswarm_bans_total: { type: 'counter', help: 'Cooling-off bans, by kind (worker, address).' },
  tabswarm_ready_timeouts_total: { type: 'counter', help: 'Round members dropped for not being ready in time.' },
  tabswarm_ring_identity_ratio: {
    type: 'summary',
    help: 'Per commit of a verifying job: the worst bucket of the ring identity over its tolerance (< 1 passes).',
  },
  tabswarm_verifications_total: {
    type: 'counter',
    help: 'Commits checked by recomputation or by the ring checks, by result (passed, caught, inconclusive, withheld, departed, ring, abandoned).',
  },
  tabswarm_commits_held_total: {
    type: 'counter',
    help: 'Commits held back because a check drawn too many commits earlier had not resolved yet.',
  },
} as const;
export type MetricName = keyof typeof METRICS;
