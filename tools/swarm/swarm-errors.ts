/** Errors that end a swarm before it has a report, each with one line saying why (and the fix). */

/** A run that cannot start or cannot go on. */
export class SwarmError extends Error {}

/** No Chromium to drive. */
export class NoChromiumError extends Error {}
