/**
 * The control protocol between tabs and the coordinator (JSON text frames on the `/ws` WebSocket).
 * Every message is a discriminated union member on `type` (the message kind) with `v: PROTOCOL_VERSION`
 * (a frame of another version is answered with `error {code:'bad_version'}`), validated with zod
 * on receipt on both sides: strict objects (unknown fields rejected), finite numbers only (zod 4 rejects
 * NaN and ±Infinity, e.g. a `1e999` literal), bounded strings, and a bounded frame size.
 *
 * Steps are numbered from 1 over the whole run; "step 0" is the initial state (parameters initialised
 * from the job seed). Which samples form a step follows from the sample record where its commit group
 * starts (`round` and `committed` carry it: epoch, cursor, holes) and the step's offset in the group
 * (`groupPlan` in core/training/groups.ts); it never depends on the world, which only decides who
 * computes which part.
 *
 * Worker life cycle: hello → welcome → (wait)* → round → sync state (stateFrom) + connect the ring → ready →
 * train → step_report per step, waiting for `committed` after each group's last step (its commit point;
 * with overlapped outer steps, docs/local-steps.md, an `outer_report` follows each outer step's allreduce
 * while the next group's steps go on) →
 * … → round_closed (restore or not) → round … → done. Heartbeats throughout. Rank 0 also sends
 * `evaluation` after the commits that are evaluation points (`isEvaluationCommit` in core/training/commit-schedule.ts).
 *
 * This file: the version and the field schemas both directions share. The messages are in
 * tab-messages.ts (tab → coordinator) and coordinator-messages.ts (coordinator → tab); reading a frame
 * (size cap, JSON, version, schema) is control-parse.ts.
 */
import { z } from 'zod';
import { MAX_HOLES, validHoles } from '../training/groups';

export const PROTOCOL_VERSION = 1;

/** Names an object inherits (`__proto__`, `constructor`, …): never valid ids, so no lookup can reach them. */
const PROTOTYPE_KEYS = new Set(Object.getOwnPropertyNames(Object.prototype));

/** Run ids, worker ids, peer ids: short, printable, no spaces, not an inherited property name. */
export const idSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_.:-]+$/, 'ids are [A-Za-z0-9_.:-]{1,64}')
  .refine((id) => !PROTOTYPE_KEYS.has(id), 'ids may not be a property name of Object.prototype');

/** The reconnect secret of `welcome` (base64url). */
export const secretSchema = z
  .string()
  .min(16)
  .max(128)
  .regex(/^[A-Za-z0-9_-]+$/, 'secrets are base64url');
/** A state hash (hash.ts) or a checkpoint file's sha256: both SHA-256, 64 lower-case hex digits. */
export const hashSchema = z.string().regex(/^[0-9a-f]{64}$/, 'hashes are SHA-256: 64 lower-case hex digits');
/** A step number (0: the initial state). */
export const stepSchema = z.int().min(0);
/** A round number (0 before the first). */
export const roundSchema = z.int().min(0);
/** A rank in a world of up to 4096. */
export const rankSchema = z.int().min(0).max(4095);
/** Free text of at most `max` characters. */
export const textSchema = (max: number) => z.string().max(max);

/** Every message's `v` field: the protocol version. */
export const versionSchema = z.literal(PROTOCOL_VERSION);

/**
 * The holes of a sample record (core/training/groups.ts): position ranges `[start, end)` of the epoch's
 * order, ascending, disjoint and not adjacent, at most `MAX_HOLES`. That they lie below the record's
 * cursor is checked by the message that carries both (`holesBelowCursor`).
 */
export const holesSchema = z
  .array(z.tuple([z.int().min(0), z.int().min(1)]))
  .max(MAX_HOLES)
  .refine((holes) => validHoles(holes, Number.MAX_SAFE_INTEGER), 'holes are ascending, disjoint, non-empty ranges');

/** A refinement for messages with `cursor` and `holes`: every hole lies below the cursor. */
export function holesBelowCursor(msg: { cursor: number; holes: [number, number][] }): boolean {
  return validHoles(msg.holes, msg.cursor);
}
