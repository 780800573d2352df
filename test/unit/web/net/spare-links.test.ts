/** The ranks a ring member keeps spare links to (web/net/spare-links.ts), checked against the ring they must cover. */
import { describe, expect, it } from 'vitest';
import { spareRanks } from '../../../../web/net/spare-links';

describe('spareRanks', () => {
  it('names the ranks two places away, never a neighbour, itself or a repeat', () => {
    expect(spareRanks(8, 0)).toEqual([2, 6]);
    expect(spareRanks(8, 7)).toEqual([1, 5]);
    expect(spareRanks(5, 4)).toEqual([1, 2]);
    expect(spareRanks(4, 1)).toEqual([3]);
    for (const size of [1, 2, 3]) for (let r = 0; r < size; r++) expect(spareRanks(size, r)).toEqual([]);
  });

  it('links, for any single lost rank, the two neighbours the survivors’ ring joins', () => {
    for (let size = 4; size <= 12; size++)
      for (let lost = 0; lost < size; lost++) {
        const left = (lost - 1 + size) % size;
        const right = (lost + 1) % size;
        expect(spareRanks(size, left)).toContain(right);
        expect(spareRanks(size, right)).toContain(left);
      }
  });

  it('is symmetric, so both ends ask for the link (the lower id dials, the other awaits)', () => {
    for (let size = 4; size <= 12; size++)
      for (let r = 0; r < size; r++) for (const s of spareRanks(size, r)) expect(spareRanks(size, s)).toContain(r);
  });

  it('refuses what is not a place in a ring', () => {
    expect(spareRanks(8, 8)).toEqual([]);
    expect(spareRanks(8, -1)).toEqual([]);
    expect(spareRanks(8.5, 1)).toEqual([]);
    expect(spareRanks(Number.NaN, 0)).toEqual([]);
  });
});
