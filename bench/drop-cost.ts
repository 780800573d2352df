/**
 * bench:drop-cost — what one tab lost inside an outer step costs a local-mode job, against that tab's
 * share of the outer step. Simulated tabs (test/kit/simulation.ts: the real elastic loop, the real
 * coordinator machine through the product executor, ring allreduces over in-memory links, CPU
 * trainers), so the figures count work, not seconds: they do not depend on the machine's load.
 *
 *   npm run bench:drop-cost -- [--tabs 16] [--inner 8] [--trials 6] [--per-rank 4]
 *
 * Each trial runs a job of two epochs (three outer steps each) with `--tabs` tabs, waits until every
 * tab is k inner steps into the second outer step (k = 1 … inner−1 over the trials), crashes one tab
 * (renderer gone: no goodbye) and runs the job to its end. Then:
 * - wasted samples: every tab's computed samples (undone ones included) less the job's samples;
 * - inner steps recomputed: the wasted samples in rank-steps (one rank's slice of one step);
 * - the dropped tab's share: its samples in the outer step in flight (inner × per-rank);
 * - the ratio of the two (goal: at most 1.5), the job's extra steps and the restarts.
 * The driver only uses the kit's public surface, so the same file also measures a tree from before
 * partial commits (copy it there and run it with `npx tsx bench/drop-cost.ts`).
 */
import { parseJobSpec } from '../core/training/job';
import { SIM_MODEL, simulatedSwarm } from '../test/kit/simulation';
import { arg } from './lib/common';

const TABS = Number(arg('tabs', '16'));
const INNER = Number(arg('inner', '8'));
const TRIALS = Number(arg('trials', '6'));
const PER_RANK = Number(arg('per-rank', '4'));
const DATASET = TABS * PER_RANK * INNER * 3;
const EPOCHS = 2;

interface Trial {
  victimRank: number;
  /** Inner steps every tab had taken in the outer step when the tab crashed. */
  into: number;
  wastedSamples: number;
  recomputedRankSteps: number;
  share: number;
  ratio: number;
  extraSteps: number;
  restarts: number;
}

async function trial(index: number): Promise<Trial> {
  const job = parseJobSpec({
    model: SIM_MODEL,
    optimizer: { kind: 'sgd', lr: 0.1, momentum: 0.5 },
    globalBatch: TABS * PER_RANK,
    epochs: EPOCHS,
    minWorkers: 1,
    maxWorkers: TABS,
    checkpointEvery: 1000,
    heartbeatMs: 2000,
    lastCallMs: 300,
    evalSamples: 0,
    seed: 5 + index,
    sync: { mode: 'local', innerSteps: INNER, compression: 'none' },
  });
  const s = simulatedSwarm(job, DATASET, { runId: `drop-cost-${index}` });
  try {
    const tabs = Array.from({ length: TABS }, (_, i) => s.open(`t${i}`, 1));
    const rv = () => s.coordinator.state.rendezvous;
    await s.waitFor(() => s.committed() >= INNER && rv().participants.length === TABS, 'all tabs', 120_000);
    const into = 1 + (index % (INNER - 1));
    await s.waitFor(() => rv().participants.every((p) => p.lastStep >= s.committed() + into), 'inner steps', 60_000);
    const victimRank = (7 * index + 3) % TABS;
    const victimId = rv().participants[victimRank].workerId;
    const restartsBefore = s.coordinator.state.restarts;
    tabs.find((t) => t.loop.status.workerId === victimId)!.crash();
    await s.waitFor(() => s.coordinator.state.status === 'done', 'the job to finish', 300_000);
    const computed = tabs.reduce((a, t) => a + t.loop.status.samplesComputed, 0);
    const wastedSamples = computed - EPOCHS * DATASET;
    const share = INNER * PER_RANK;
    return {
      victimRank,
      into,
      wastedSamples,
      recomputedRankSteps: wastedSamples / PER_RANK,
      share,
      ratio: wastedSamples / share,
      extraSteps: s.committed() - EPOCHS * (DATASET / (TABS * PER_RANK)),
      restarts: s.coordinator.state.restarts - restartsBefore,
    };
  } finally {
    s.stop();
  }
}

const trials: Trial[] = [];
for (let i = 0; i < TRIALS; i++) trials.push(await trial(i));
const pad = (x: string | number, n: number) => String(x).padStart(n);
console.log(`tabs ${TABS}, H = ${INNER}, ${PER_RANK} samples per rank per step, ${DATASET} images × ${EPOCHS} epochs`);
console.log('trial  rank  into  wasted samples  recomputed rank-steps  share  ratio  extra steps  restarts');
for (const [i, t] of trials.entries()) {
  console.log(
    `${pad(i, 5)}  ${pad(t.victimRank, 4)}  ${pad(t.into, 4)}  ${pad(t.wastedSamples, 14)}  ${pad(t.recomputedRankSteps, 21)}  ${pad(t.share, 5)}  ${pad(t.ratio.toFixed(2), 5)}  ${pad(t.extraSteps, 11)}  ${pad(t.restarts, 8)}`,
  );
}
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const summary = {
  bench: 'drop-cost',
  tabs: TABS,
  inner: INNER,
  perRank: PER_RANK,
  trials: TRIALS,
  meanRatio: Number(mean(trials.map((t) => t.ratio)).toFixed(3)),
  maxRatio: Number(Math.max(...trials.map((t) => t.ratio)).toFixed(3)),
  meanRecomputedRankSteps: Number(mean(trials.map((t) => t.recomputedRankSteps)).toFixed(1)),
  meanExtraSteps: Number(mean(trials.map((t) => t.extraSteps)).toFixed(2)),
};
console.log(`mean ratio ${summary.meanRatio}, max ${summary.maxRatio} (goal: at most 1.5)`);
console.log(JSON.stringify(summary));
