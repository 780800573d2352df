/**
 * What bench/sync.ts and bench/sync-learning.ts share: the sync configurations of issue 13 as
 * `every-step:none`, `local8:fp16` …, and the job's `sync` field for each (command-line options:
 * bench/lib/common.ts).
 */
export interface SyncConfig {
  mode: 'every-step' | 'local';
  /** H; 1 for every-step. */
  innerSteps: number;
  compression: 'none' | 'fp16' | 'int8';
}

/** `every-step:none`, `local8:fp16` … → a config; a clear error for anything else. */
export function parseConfig(text: string): SyncConfig {
  const m = /^(every-step|local(\d+)):(none|fp16|int8)$/.exec(text);
  if (!m)
    throw new Error(`bad config "${text}" (every-step:none|fp16|int8 or localH:none|fp16|int8, e.g. local32:int8)`);
  const compression = m[3] as SyncConfig['compression'];
  if (!m[2]) return { mode: 'every-step', innerSteps: 1, compression };
  const innerSteps = Number(m[2]);
  if (!(innerSteps >= 1 && innerSteps <= 100_000)) throw new Error(`bad config "${text}": H must be 1..100000`);
  return { mode: 'local', innerSteps, compression };
}

/** The job file's `sync` field (DiLoCo's outer optimizer: Nesterov, lr 0.7, momentum 0.9). */
export function syncField(c: SyncConfig): Record<string, unknown> {
  return c.mode === 'every-step'
    ? { mode: 'every-step', compression: c.compression }
    : {
        mode: 'local',
        innerSteps: c.innerSteps,
        outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9 },
        compression: c.compression,
      };
}

export const configName = (c: SyncConfig): string =>
  c.mode === 'every-step' ? `every-step ${c.compression}` : `local H=${c.innerSteps} ${c.compression}`;
