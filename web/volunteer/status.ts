/**
 * The page's status: one plain object the view renders and tests read (`window.tabswarm`, a frozen
 * copy per read, so a test cannot change what the page believes).
 */
import type { AdapterSummary } from '../worker/types';

export type TabState =
  /** Page loaded, WebGPU not yet checked. */
  | 'checking'
  /** WebGPU works; waiting for the person to press Start. */
  | 'ready'
  /** WebGPU is missing or has no adapter: `error` says why. */
  | 'unsupported'
  | 'loading-data'
  | 'building'
  | 'training'
  | 'evaluating'
  | 'done'
  | 'stopped'
  | 'error';

export interface TabStatus {
  state: TabState;
  mode: 'solo' | 'elastic';
  model: string;
  adapter: AdapterSummary | null;
  /** Steps completed. */
  step: number;
  /** 0-based epoch of the last step; `epochs` in total. */
  epoch: number;
  epochs: number;
  epochProgress: number;
  /** Latest mean training loss per sample. */
  loss: number | null;
  /** (step, loss) each time the loss was read back, oldest first. */
  losses: { step: number; loss: number }[];
  /** Latest test accuracy in [0, 1], after an epoch's evaluation. */
  accuracy: number | null;
  testLoss: number | null;
  samplesPerSec: number | null;
  dataset: { loadedBytes: number; totalBytes: number; cachedBytes: number; done: boolean } | null;
  /** Why WebGPU is unavailable, or what failed. */
  error: string | null;
  /** Wall-clock seconds of the finished run. */
  seconds: number | null;
}

export function initialStatus(model: string): TabStatus {
  return {
    state: 'checking',
    mode: 'solo',
    model,
    adapter: null,
    step: 0,
    epoch: 0,
    epochs: 0,
    epochProgress: 0,
    loss: null,
    losses: [],
    accuracy: null,
    testLoss: null,
    samplesPerSec: null,
    dataset: null,
    error: null,
    seconds: null,
  };
}

/** Deep-ish frozen copy for readers outside the page's code. */
export function publicStatus(s: TabStatus): Readonly<TabStatus> {
  return Object.freeze({
    ...s,
    adapter: s.adapter && Object.freeze({ ...s.adapter }),
    losses: Object.freeze(s.losses.map((l) => Object.freeze({ ...l }))) as TabStatus['losses'],
    dataset: s.dataset && Object.freeze({ ...s.dataset }),
  });
}
