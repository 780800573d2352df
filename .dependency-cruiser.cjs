/**
 * Import boundaries, checked in `npm test` (docs/boundaries.md explains each rule).
 * Product: coordinator/ (with core/ and swarm/), web/, kernels/, verifier/, bin/. test/ and bench/ may import anything.
 */
const PRODUCT = '^(coordinator|web|kernels|verifier|bin)/';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'core-is-pure',
      comment:
        'coordinator/core is shared with the tabs: no Node APIs, no web, no kernels, no coordinator outside core.',
      severity: 'error',
      from: { path: '^coordinator/core/' },
      to: { path: '^(web|kernels|verifier|test|bench|bin)/|^coordinator/(?!core/)' },
    },
    {
      name: 'core-no-node-apis',
      comment: 'coordinator/core runs in browsers too: no node: modules.',
      severity: 'error',
      from: { path: '^coordinator/core/' },
      to: { dependencyTypes: ['core'] },
    },
    {
      name: 'coordinator-not-into-web-or-kernels',
      comment:
        'The coordinator process imports only coordinator/ and its core; types shared with the tabs belong in core.',
      severity: 'error',
      from: { path: '^coordinator/' },
      to: { path: '^(web|kernels)/' },
    },
    {
      name: 'coordinator-spawns-verifier',
      comment:
        'The coordinator talks to the verifier only across the process boundary: verifier-client.ts forks a file path.',
      severity: 'error',
      from: { path: '^coordinator/' },
      to: { path: '^verifier/' },
    },
    {
      name: 'verifier-only-kernels-and-core',
      comment:
        'The verifier process runs kernels/ on coordinator/core; of the rest of the coordinator only the IDX loader and the GPU environment.',
      severity: 'error',
      from: { path: '^verifier/' },
      to: { path: '^(web|bin)/|^coordinator/(?!core/|dataset\\.ts$|gpu-env\\.ts$)' },
    },
    {
      name: 'kernels-only-core',
      comment: 'kernels/ imports only coordinator/core (model specs), nothing of web or the Node process.',
      severity: 'error',
      from: { path: '^kernels/' },
      to: { path: '^(web|verifier)/|^coordinator/(?!core/)' },
    },
    {
      name: 'web-only-kernels-and-core',
      comment: 'web/ may import kernels/ and coordinator/core, not the Node process.',
      severity: 'error',
      from: { path: '^web/' },
      to: { path: '^verifier/|^coordinator/(?!core/)' },
    },
    {
      name: 'product-not-into-test-or-bench',
      comment: 'Test and benchmark code never ships: nothing in the product imports it.',
      severity: 'error',
      from: { path: PRODUCT },
      to: { path: '^(test|bench)/' },
    },
    {
      name: 'not-to-unresolvable',
      comment: 'An import that does not resolve is a typo or a missing dependency.',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(node_modules|dist)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.base.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
  },
};
