#!/usr/bin/env node
// The `tabswarm` command: the sources are TypeScript, so register tsx's loader and run the CLI.
import { register } from 'tsx/esm/api';

register();
await import('../coordinator/cli.ts');
