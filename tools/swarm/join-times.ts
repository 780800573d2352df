/**
 * How long a joiner took to contribute, one rule for every driver that measures it (bench:scale on
 * loopback and on the test bed, bench:joins): from its start to the first commit of a round it was a
 * member of, at or after its start. A commit of an earlier round, one made before it started, or one
 * after `endAt` does not count; a joiner never seen in a round counts nothing.
 */
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
