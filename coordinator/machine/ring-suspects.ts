/**
 * Where two ring suspects go in the next round's ring: not next to each other.
 *
 * A failed hop check (or a data dispute) names two neighbours, the sender and the receiver of the hop, and
 * cannot tell which lied (verification.ts `suspectsFailIn`). The next failure narrows the suspects to
 * the one both failures name, but only if the next ring puts other neighbours around them. Swapping the two
 * in the wait list did that only while the ring followed the wait list: a ring planned from measured link
 * costs (topology.ts) put the same pair back side by side, and the liar took part in a third failed round
 * (hostile-tabs, local mode: 4 failed rounds against the test's bound of 3; at best 2 are needed).
 *
 * So the rule works on the planned ring itself: when the two are adjacent, the second swaps places with
 * its other neighbour, which leaves them two apart (rings of 4 or more). In a ring of 3 every two members
 * are adjacent; there they swap places, which reverses the hop between them.
 *
 * ```ts
 * separateSuspects(['a', 'b', 'c', 'd'], ['a', 'b']); // ['a', 'c', 'b', 'd']
 * separateSuspects(['a', 'b', 'c'], ['a', 'b']);      // ['b', 'a', 'c']
 * ```
 */

/** `members` (a ring, in rank order) with the first two `suspects` not adjacent where the size allows. */
export function separateSuspects(members: readonly string[], suspects: readonly string[] | null | undefined): string[] {
  const out = [...members];
  const n = out.length;
  if (!suspects || suspects.length < 2 || n < 3) return out;
  const i = out.indexOf(suspects[0]!);
  const j = out.indexOf(suspects[1]!);
  if (i < 0 || j < 0 || i === j) return out;
  if ((i + 1) % n !== j && (j + 1) % n !== i) return out;
  const other = n === 3 ? i : (j + 1) % n === i ? (j - 1 + n) % n : (j + 1) % n;
  [out[j], out[other]] = [out[other]!, out[j]!];
  return out;
}
