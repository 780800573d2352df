/**
 * The coordinator's CLI flags for its defences (trust.ts), kept apart from cli.ts:
 *   --join open|invite                who may join: anyone with the URL (default), or invite links only
 *   --allow-origin <origins>          extra origins allowed on /ws and /peer (comma-separated; repeatable).
 *                                     Default: only the coordinator's own origin (the Host it was reached at).
 *   --max-sockets-per-address <n>     open WebSockets per client address (default 64)
 *   --joins-per-minute <n>            hellos per client address per minute (default 60)
 *   --ready-timeout-ms <ms>           a round member not ready by then is dropped, no restart (default 30000)
 *   --worker-restart-quota <n>        restarts charged to one worker per window before it is cooled off (3)
 *   --address-restart-quota <n>       … to one client address (20)
 *   --cool-off-ms <ms>                first cooling-off period; doubles with each ban (30000)
 *   --max-events <n>                  event-log rows kept (100000; evaluations are always kept)
 */
import { type Command, InvalidArgumentError } from 'commander';
import { DEFAULT_TRUST_POLICY, type TrustPolicy } from '../machine/machine';
import type { JoinMode } from '../runtime/admission';
import { parseOriginList } from '../runtime/origin';
import {
  DEFAULT_JOINS_PER_MINUTE,
  DEFAULT_MAX_EVENTS,
  DEFAULT_MAX_SOCKETS_PER_ADDRESS,
  type TrustOptions,
} from '../trust/trust';

export interface TrustFlags {
  join?: JoinMode;
  allowOrigin?: string[];
  maxSocketsPerAddress?: number;
  joinsPerMinute?: number;
  readyTimeoutMs?: number;
  workerRestartQuota?: number;
  addressRestartQuota?: number;
  coolOffMs?: number;
  maxEvents?: number;
}

function integer(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(`an integer in ${min}..${max}`);
    return n;
  };
}

function joinMode(value: string): JoinMode {
  if (value !== 'open' && value !== 'invite') throw new InvalidArgumentError('open or invite');
  return value;
}

function origins(value: string, previous: string[] = []): string[] {
  try {
    return [...previous, ...parseOriginList([value])];
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}

export function addTrustFlags(command: Command): Command {
  return command
    .option('--join <mode>', 'who may join: open (anyone with the URL) or invite (invite links only)', joinMode, 'open')
    .option('--allow-origin <origins>', "origins allowed on /ws and /peer besides the coordinator's own", origins)
    .option(
      '--max-sockets-per-address <n>',
      `open WebSockets per client address (default ${DEFAULT_MAX_SOCKETS_PER_ADDRESS})`,
      integer(1, 1_000_000),
    )
    .option(
      '--joins-per-minute <n>',
      `hellos per client address per minute (default ${DEFAULT_JOINS_PER_MINUTE})`,
      integer(1, 1_000_000),
    )
    .option(
      '--ready-timeout-ms <ms>',
      `drop round members not ready after this long (plus the state's transfer at 1 Mbit/s when the sync sends it), without a restart (default ${DEFAULT_TRUST_POLICY.readyTimeoutMs})`,
      integer(100, 86_400_000),
    )
    .option(
      '--worker-restart-quota <n>',
      `restarts charged to one worker per window before it is cooled off (default ${DEFAULT_TRUST_POLICY.workerQuota})`,
      integer(0, 1_000_000),
    )
    .option(
      '--address-restart-quota <n>',
      `restarts charged to one client address per window before it is cooled off (default ${DEFAULT_TRUST_POLICY.addressQuota})`,
      integer(0, 1_000_000),
    )
    .option(
      '--cool-off-ms <ms>',
      `first cooling-off period, doubled with each ban (default ${DEFAULT_TRUST_POLICY.coolOffMs})`,
      integer(1, 86_400_000),
    )
    .option('--max-events <n>', `event-log rows kept (default ${DEFAULT_MAX_EVENTS})`, integer(100, 1_000_000_000));
}

export function trustOptionsOf(flags: TrustFlags): TrustOptions {
  const policy: Partial<TrustPolicy> = {};
  if (flags.readyTimeoutMs !== undefined) policy.readyTimeoutMs = flags.readyTimeoutMs;
  if (flags.workerRestartQuota !== undefined) policy.workerQuota = flags.workerRestartQuota;
  if (flags.addressRestartQuota !== undefined) policy.addressQuota = flags.addressRestartQuota;
  if (flags.coolOffMs !== undefined) policy.coolOffMs = flags.coolOffMs;
  return {
    policy,
    allowedOrigins: flags.allowOrigin ?? [],
    maxSocketsPerAddress: flags.maxSocketsPerAddress,
    joinsPerMinute: flags.joinsPerMinute,
    maxEvents: flags.maxEvents,
    join: flags.join,
  };
}
