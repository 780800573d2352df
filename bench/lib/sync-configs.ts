/**
 * What bench/sync.ts and bench/sync-learning.ts share: the sync configurations of issue 13 as
 * `every-step:none`, `local8:fp16` …, and issue 24's overlapped local steps as `overlap32:int8` …, and the
 * job's `sync` field for each (command-line options: bench/lib/common.ts); and the two access-link
 * profiles of issues 13 and 24, which bench:scale's `--netbed` uses too.
 */
import type { LinkProfile } from '../../tools/netbed/netbed';

/**
 * The issues' access-link profiles (each direction of every home's link). bench:net keeps its own set
 * (its broadband is 50 Mbit/s, from before these issues).
 */
export const SYNC_PROFILES: Record<string, LinkProfile> = {
  broadband: { delayMs: 20, jitterMs: 0, rateMbit: 20, lossPercent: 0 },
  poor: { delayMs: 80, jitterMs: 0, rateMbit: 5, lossPercent: 1 },
};

export interface SyncConfig {
  mode: 'every-step' | 'local';
  /** H; 1 for every-step. */
  innerSteps: number;
  compression: 'none' | 'fp16' | 'int8';
  /** Local mode with overlapped outer steps (`sync.overlap`, docs/local-steps.md); absent: not overlapped. */
  overlap?: boolean;
}

/** `every-step:none`, `local8:fp16`, `overlap32:int8` … → a config; a clear error for anything else. */
export function parseConfig(text: string): SyncConfig {
  const m = /^(every-step|(local|overlap)(\d+)):(none|fp16|int8)$/.exec(text);
  if (!m)
    throw new Error(
      `bad config "${text}" (every-step:none|fp16|int8, localH:none|fp16|int8 or overlapH:…, e.g. local32:int8)`,
    );
  const compression = m[4] as SyncConfig['compression'];
  if (!m[3]) return { mode: 'every-step', innerSteps: 1, compression };
  const innerSteps = Number(m[3]);
  if (!(innerSteps >= 1 && innerSteps <= 100_000)) throw new Error(`bad config "${text}": H must be 1..100000`);
  return m[2] === 'overlap'
    ? { mode: 'local', innerSteps, compression, overlap: true }
    : { mode: 'local', innerSteps, compression };
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
        ...(c.overlap ? { overlap: true } : {}),
      };
}

/** The same configuration without overlapped outer steps (what an overlapped one is compared with). */
export function withoutOverlap(c: SyncConfig): SyncConfig {
  return { mode: c.mode, innerSteps: c.innerSteps, compression: c.compression };
}

/** Whether two configurations are the same one. */
export function sameConfig(a: SyncConfig, b: SyncConfig): boolean {
  return configName(a) === configName(b);
}

export const configName = (c: SyncConfig): string =>
  c.mode === 'every-step'
    ? `every-step ${c.compression}`
    : `${c.overlap ? 'overlapped' : 'local'} H=${c.innerSteps} ${c.compression}`;
