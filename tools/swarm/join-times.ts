/**
 * How long a joiner took to contribute, one rule for every driver that measures it (bench:scale on
 * loopback and on the test bed, bench:joins): from its start to the first commit of a round it was a
 * member of, at or after its start. A commit of an earlier round, one made before it started, or one
 * after `endAt` does not count; a joiner never seen in a round counts nothing. The round each joiner first
 * showed in comes from one poll of the coordinator's world (`watchFirstRounds`).
 */
import type { StatusResponse } from '../../core/protocol/views';

export interface JoinSeen {
  /** When it started (ms, the coordinator's clock: the same machine). */
  at: number;
  /** The first round it showed in, or null. */
  memberRound: number | null;
}

/** Seconds from each joiner's start to its first contribution, for those that made one by `endAt`. */
export function secondsToFirstContribution(
  joins: readonly JoinSeen[],
  commits: readonly { round: number; at: number }[],
  endAt = Number.POSITIVE_INFINITY,
): number[] {
  const out: number[] = [];
  for (const j of joins) {
    if (j.memberRound === null) continue;
    const round = j.memberRound;
    const first = commits.find((c) => c.round >= round && c.at >= j.at && c.at <= endAt);
    if (first) out.push((first.at - j.at) / 1000);
  }
  return out;
}

/** A worker's name from its peer id (`NAME-<hex>`). */
export const nameOfPeerId = (peerId: string): string => peerId.slice(0, peerId.lastIndexOf('-'));

/**
 * Polls `status` every `everyMs` and notes the round in which each worker (by name) first shows in the
 * world: `of(name)` while it runs, after each poll `onPoll`. `stop` ends the loop after its current poll.
 */
export function watchFirstRounds(
  status: () => Promise<StatusResponse | null>,
  everyMs: number,
  onPoll: () => void = () => {},
  signal?: AbortSignal,
): { of(name: string): number | null; stop(): Promise<void> } {
  const first = new Map<string, number>();
  let running = true;
  const loop = (async () => {
    while (running && !signal?.aborted) {
      const s = await status();
      for (const w of s?.world.items ?? []) {
        const name = nameOfPeerId(w.peerId);
        if (!first.has(name)) first.set(name, s!.round);
      }
      onPoll();
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    of: (name) => first.get(name) ?? null,
    stop: async () => {
      running = false;
      await loop;
    },
  };
}
