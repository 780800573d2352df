/** Two ring suspects are not neighbours in the next ring (coordinator/machine/ring-suspects.ts), for every pair of every ring of 3 to 8. */
import { describe, expect, it } from 'vitest';
import { separateSuspects } from '../../../../coordinator/machine/ring-suspects';

const ring = (n: number) => Array.from({ length: n }, (_, k) => `w${k}`);
const adjacent = (order: readonly string[], a: string, b: string) => {
  const i = order.indexOf(a);
  const j = order.indexOf(b);
  return (i + 1) % order.length === j || (j + 1) % order.length === i;
};
const successor = (order: readonly string[], a: string) => order[(order.indexOf(a) + 1) % order.length];

describe('separateSuspects', () => {
  it('leaves two suspects apart, or with the hop between them reversed in a ring of 3, moving no one else', () => {
    for (let n = 3; n <= 8; n++) {
      const members = ring(n);
      for (const a of members)
        for (const b of members) {
          if (a === b) continue;
          const out = separateSuspects(members, [a, b]);
          expect([...out].sort()).toEqual([...members].sort());
          if (!adjacent(members, a, b)) {
            expect(out).toEqual(members);
            continue;
          }
          if (n === 3) {
            // The hop a sent on (or received) goes elsewhere now.
            expect(successor(out, a)).not.toBe(successor(members, a));
          } else expect(adjacent(out, a, b)).toBe(false);
          expect(out.filter((m, k) => m !== members[k]).length).toBe(2);
        }
    }
  });

  it('changes nothing without two suspects of this ring', () => {
    expect(separateSuspects(ring(5), null)).toEqual(ring(5));
    expect(separateSuspects(ring(5), ['w1'])).toEqual(ring(5));
    expect(separateSuspects(ring(5), ['w1', 'gone'])).toEqual(ring(5));
    expect(separateSuspects(ring(2), ['w0', 'w1'])).toEqual(ring(2));
  });
});
