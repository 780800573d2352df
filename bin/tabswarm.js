#!/usr/bin/env node
// The `tabswarm` command: the sources are TypeScript, so register tsx's loader and run the subcommand:
// `tabswarm coordinator …` (coordinator/cli.ts) or `tabswarm worker …` (headless/entry.js: a headless
// worker; the coordinator never loads its code).
import { register } from 'tsx/esm/api';

register();
if (process.argv[2] === 'worker') await import('../headless/entry.js');
else await import('../coordinator/cli.ts');
