/**
 * A process that builds a one-home network test bed, prints `ready <prefix>` and waits to be signalled:
 * test/integration/netbed.test.ts interrupts it as Ctrl-C under tsx or npm does (the signal twice) and
 * checks that its namespaces are gone. Run with `node --import tsx`.
 */
import { Netbed } from '../../tools/netbed/netbed';

const bed = await Netbed.create([
  { nat: 'endpoint-independent', link: { delayMs: 10, jitterMs: 0, rateMbit: 10, lossPercent: 0 } },
]);
console.log(`ready ${bed.prefix}`);
// Held open until a signal ends the process (bounded: the test kills it long before).
setTimeout(() => process.exit(3), 60_000);
