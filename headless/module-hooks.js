// Node module hooks for the headless worker's main thread (registered by entry.js): `import … from 'peerjs'`
// resolves to the package's ES module build (its `module` field, dist/bundler.mjs), as Vite resolves it
// for the tabs. Node alone would load its CommonJS `main`, whose named exports it cannot see.
export async function resolve(specifier, context, next) {
  if (specifier === 'peerjs') return next('peerjs/dist/bundler.mjs', context);
  return next(specifier, context);
}
