/**
 * The admin page's event-log filters: every event the pure core logs falls into a named category
 * (`categoryOf`), so no kind of event hides under "other". The events are read from the core's
 * source (`log(ctx, level, 'event', …)` calls), so an event added later without a category fails here.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { categoryOf } from '../../../core/protocol/admin-feed';

const MACHINE = resolve(import.meta.dirname, '../../../coordinator/machine');
/** Debug-level lines the feed never shows (admin-feed-projection.ts keeps info and above). */
const NOT_SHOWN = new Set(['commit']);

function loggedEvents(): string[] {
  const events = new Set<string>();
  for (const file of readdirSync(MACHINE).filter((f) => f.endsWith('.ts'))) {
    const text = readFileSync(join(MACHINE, file), 'utf8');
    for (const m of text.matchAll(/log\(ctx, [^,]+, '([a-z_]+)'/g)) events.add(m[1]);
  }
  return [...events].sort();
}

describe('admin feed categories', () => {
  it('finds the events the core logs (the scan itself works)', () => {
    expect(loggedEvents()).toEqual(expect.arrayContaining(['join', 'leave', 'round_closed', 'cooled_off']));
  });

  it.each(loggedEvents().filter((e) => !NOT_SHOWN.has(e)))('puts %s in a named category', (event) => {
    expect(categoryOf(event, {})).not.toBe('other');
  });

  it('counts a round closed by a failure as a restart, and an orderly one as a round', () => {
    expect(categoryOf('round_closed', { restart: true })).toBe('restart');
    expect(categoryOf('round_closed', { restart: false })).toBe('round');
  });
});
