/**
 * Whether a test needing `what` should skip: true when it is absent and we are not under CI.
 * Under CI it returns false, so the test runs and fails with the prerequisite's own clear error.
 */
export function skipWithout(what: string, present: boolean): boolean {
  if (present) return false;
  if (process.env.CI) return false;
  console.warn(`skipping: ${what} is not available (under CI this fails instead)`);
  return true;
}
