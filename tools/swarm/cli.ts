/**
 * The swarm tool's own entry: `npm run swarm -- (--url URL | --job FILE) --workers N [...]`, which is
 * `tsx tools/swarm/cli.ts swarm …` (the flags: swarm-command.ts). A developer tool beside the product:
 * the coordinator's CLI (coordinator/cli.ts) never imports tools/, and playwright-core, which this
 * tool needs, is a dev dependency. The `swarm` word stays so `tabswarm swarm …` lines in docs and tests
 * keep their shape.
 */
import { Command } from 'commander';
import { registerSwarmCommand } from './swarm-command';

function buildProgram(): Command {
  const program = new Command('tabswarm');
  program
    .description('Developer tools: headless Chromium tabs against a coordinator (not part of the product).')
    .showHelpAfterError(false);
  registerSwarmCommand(program);
  return program;
}

try {
  await buildProgram().parseAsync(process.argv);
} catch (error) {
  // The swarm command reports its own failures in one line; this is only for what escapes it.
  process.stderr.write(`tabswarm swarm: unexpected error: ${(error as Error).stack ?? error}\n`);
  process.exit(1);
}
