// Node module hooks for the one Vite feature the kernels use: `import code from './x.wgsl?raw'` gives
// the file's text. Vite (the tabs' build, vitest) does this itself; the verifier process runs the same
// kernels under plain Node (registered by verifier/entry.js and headless/trainer-entry.js), so it answers such
// imports here.
import { readFile } from 'node:fs/promises';

const RAW = '?raw';

export async function resolve(specifier, context, next) {
  if (specifier.endsWith(RAW) && context.parentURL)
    return { url: new URL(specifier, context.parentURL).href, shortCircuit: true };
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (url.startsWith('file:') && url.endsWith(RAW)) {
    const text = await readFile(new URL(url.slice(0, -RAW.length)), 'utf8');
    return { format: 'module', source: `export default ${JSON.stringify(text)};`, shortCircuit: true };
  }
  return next(url, context);
}
