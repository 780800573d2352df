/**
 * How many peer connections a link to a neighbour gets (web/net/stripe-policy.ts), as a table: one stripe
 * per 20 ms of the first connection's RTT, 1 to 16, and fixed settings clamped to that range.
 */
import { describe, expect, it } from 'vitest';
import { MAX_STRIPES, stripesFor, stripesForRtt } from '../../../../web/net/stripe-policy';

describe('stripesForRtt', () => {
  const cases: Array<[number | null, number]> = [
    [null, 1], // not measured: the cheap path
    [0, 1],
    [2, 1], // a LAN
    [29, 1],
    [31, 2],
    [80, 4], // a broadband hop (20 ms each way on two access links)
    [170, 9], // bench:net's 80 ms access RTT, as ICE measured it
    [320, 16], // bench:sync's poor profile
    [5000, MAX_STRIPES],
    [Number.NaN, 1],
    [-5, 1],
  ];
  for (const [rtt, stripes] of cases)
    it(`opens ${stripes} for an RTT of ${rtt} ms`, () => expect(stripesForRtt(rtt)).toBe(stripes));
});

describe('stripesFor', () => {
  it('takes a fixed count as it is, within 1 … MAX_STRIPES, whatever the RTT', () => {
    expect(stripesFor(4, 2)).toBe(4);
    expect(stripesFor(1, 320)).toBe(1);
    expect(stripesFor(100, null)).toBe(MAX_STRIPES);
    expect(stripesFor(0, 320)).toBe(1);
    expect(stripesFor(2.5, 320)).toBe(1);
  });

  it("decides 'auto' from the RTT", () => {
    expect(stripesFor('auto', 320)).toBe(16);
    expect(stripesFor('auto', null)).toBe(1);
  });
});
