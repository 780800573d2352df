/**
 * One fault script shared by the local-mode loop tests (local-steps-loop.test.ts, overlap-loop.test.ts):
 * three tabs train; inside an outer step `a` says goodbye, `d` joins, then inside another `b` crashes.
 * A goodbye and a join are no failure (no restart); the crash is one. Returns the survivors once the job
 * is done and they saw it; what each test then asserts of the record is its own.
 */
import { expect } from 'vitest';
import type { SimTab, simulatedSwarm } from './simulation';

export async function goodbyeJoinCrash(
  swarm: Pick<ReturnType<typeof simulatedSwarm>, 'coordinator' | 'open' | 'committed' | 'waitFor'>,
  delayMs = 2,
): Promise<{ survivors: [SimTab, SimTab] }> {
  const { coordinator, open, committed, waitFor } = swarm;
  const [a, b, c] = [open('a', delayMs), open('b', delayMs), open('c', delayMs)];
  const midOuter = () => coordinator.state.rendezvous.participants.some((p) => p.lastStep > committed());
  await waitFor(() => committed() >= 4 && coordinator.state.rendezvous.participants.length === 3, 'three tabs');
  await waitFor(midOuter, 'inner steps reported past the commit');
  const restarts = coordinator.state.restarts;
  a.goodbye();
  await waitFor(() => coordinator.state.rendezvous.participants.length === 2 && midOuter(), 'two tabs on');
  const d = open('d', delayMs);
  await waitFor(() => coordinator.state.rendezvous.participants.length === 3, 'the newcomer admitted', 20_000);
  await waitFor(midOuter, 'inner steps of the three');
  expect(coordinator.state.restarts).toBe(restarts); // neither a goodbye nor a join is a failure
  b.crash();
  await waitFor(() => coordinator.state.restarts === restarts + 1, 'the crash to count');
  await waitFor(() => coordinator.state.status === 'done', 'the job to finish', 30_000);
  await waitFor(() => [c, d].every((t) => t.loop.status.phase === 'done'), 'survivors to see done');
  return { survivors: [c, d] };
}
