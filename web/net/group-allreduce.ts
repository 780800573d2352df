/**
 * The grouped allreduce (sum): the world in groups (contiguous blocks of ranks, planned by
 * core/training/topology.ts), a ring inside each group, an exchange across groups per piece. Its latency
 * grows like √N where the plain ring's grows like N; its bytes per rank are the ring's.
 *
 * 1. **Reduce inside each group.** Group g of k members cuts the vector into k segments; member p owns
 *    segment p. Each segment's chain runs round the group's ring from the member after its owner: the
 *    first sends its own values, each next adds its own and passes the sum on, the owner keeps the group's
 *    partial sum P_g. All groups do this at once, pipelined chunk by chunk. k − 1 hops.
 * 2. **Seal** (only when `mayExclude`): each member, its owned segments complete, floods a seal round the
 *    group; no partial leaves the group before every member's seal arrived. k − 1 hops of tiny frames.
 * 3. **Across groups.** The groups' segmentations cut the vector into intervals; each interval is cut into
 *    one piece per group, and group j's owner of the interval is that piece's root. Every other group's
 *    owner sends it its partial; the root sums them **in group order** and sends the final sum back to
 *    each of them. 2 hops.
 * 4. **Gather inside each group.** Each owner passes the final sums of its segments round its ring;
 *    everyone forwards the root's bytes unchanged. k − 1 hops.
 *
 * **One reduction order, bit-identical ranks.** Element e's sum is ((P_0 + P_1) + …) + P_{G−1}, formed
 * once by its root, where P_g is the float32 chain sum of group g's members in ring order from the one
 * after e's owner. With fp16 or int8 every partial crossing a link is encoded by its sender and decoded
 * (and added to) by its receiver, each P_g once more on its way to the root (the root's own group's too,
 * so every group is treated alike), and the final sum once by the root; everyone decodes the root's bytes.
 *
 * **A failure inside a group costs that group's retry** (`mayExclude`, local sync mode: a lost member
 * costs its share, docs/local-steps.md). A member whose ring link closes, whom the coordinator reports
 * lost (`opts.lost`), or who sends nothing at all for `silenceMs`, is excluded: its group starts its reduce again without it (attempt + 1, from each member's
 * copy of its input), its segments go to the nearest member on its left, who dials the excluded member's
 * partners across groups; the other groups wait at the exchange, nothing more. A corrupted payload
 * (checksum) or a stalled reduce is retried the same way with nobody excluded. Members agree on who is
 * out through retry frames flooded round the group, each carrying the excluded set, which only grows. The
 * call resolves with the excluded ranks, the same on every rank: every final sum is tagged with the
 * excluded sets its partials were made under, and a rank holding sums under different sets fails.
 * Isolation holds while the failed group has not sealed; a loss after that (a partial may have left with
 * the lost member's values in it), or one with `mayExclude` off (every-step mode: invariant 6), fails the
 * call on every rank, as the ring's does.
 *
 * Ids: the exchange across groups uses `opts.id`; a group's ring uses `opts.id` with `seq + attempt`, so
 * a caller's next call must be newer than `seq + maxAttempts` (a new step is).
 */
import { GroupCall } from './group-call';
import type { GroupAllreduceOptions, GroupAllreduceResult, GroupLinks } from './group-support';

export {
  attemptId,
  DEFAULT_GROUP_ATTEMPTS,
  type GroupAllreduceOptions,
  type GroupAllreduceResult,
  type GroupLinks,
  type LostRanks,
} from './group-support';

/**
 * Sum `data` in place over every rank of `links.layout`; resolves when this rank holds the full sum
 * (identical bytes on every rank that resolves) and has handed all its frames to its links. Rejects
 * with `CollectiveError` like `ringAllreduce`; on rejection `data` is garbage.
 */
export async function groupAllreduce(
  links: GroupLinks,
  data: Float32Array,
  opts: GroupAllreduceOptions,
): Promise<GroupAllreduceResult> {
  return new GroupCall(links, data, opts).run();
}
