/**
 * Import boundaries, checked in `npm test` (test/unit/boundaries.test.ts; docs/boundaries.md explains each rule).
 * Product: core/, coordinator/, node/, web/, kernels/, verifier/, headless/, bin/. Not product: tools/ (swarm, test bed),
 * bench/, test/, scripts/, which may import the product but are never imported by it.
 */
const PRODUCT = '^(core|coordinator|node|web|kernels|verifier|headless|bin)/';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'core-imports-nothing-of-the-project',
      comment:
        'core/ is the contract every process shares (tabs, kernels, verifier, coordinator): it imports only itself, zod and @noble/*.',
      severity: 'error',
      from: { path: '^core/' },
      to: { path: '^(coordinator|node|tools|web|kernels|verifier|headless|bin|test|bench|scripts)/' },
    },
    {
      name: 'core-only-zod-and-noble',
      comment: 'core/ runs in browsers, workers and Node alike: of npm packages only zod and @noble/*.',
      severity: 'error',
      from: { path: '^core/' },
      to: {
        dependencyTypes: ['npm', 'npm-dev', 'npm-optional', 'npm-peer', 'npm-no-pkg'],
        pathNot: '(^|/)node_modules/(zod|@noble/[^/]+)/',
      },
    },
    {
      name: 'core-no-node-apis',
      comment: 'core/ runs in browsers too: no node: modules.',
      severity: 'error',
      from: { path: '^core/' },
      to: { dependencyTypes: ['core'] },
    },
    {
      name: 'machine-only-core',
      comment:
        'coordinator/machine is the pure handle(state, event, now): it imports core/ and itself, no I/O, no Node APIs, nothing of the runtime.',
      severity: 'error',
      from: { path: '^coordinator/machine/' },
      to: { path: '^(coordinator/(?!machine/)|(node|tools|web|kernels|verifier|headless|bin|test|bench|scripts)/)' },
    },
    {
      name: 'machine-no-node-apis',
      comment: 'coordinator/machine is pure: time and randomness enter as arguments, not through Node APIs.',
      severity: 'error',
      from: { path: '^coordinator/machine/' },
      to: { dependencyTypes: ['core'] },
    },
    {
      name: 'coordinator-not-into-web-or-kernels',
      comment:
        'The coordinator process imports coordinator/, core/ and node/; types it shares with the tabs belong in core/.',
      severity: 'error',
      from: { path: '^coordinator/' },
      to: { path: '^(web|kernels)/' },
    },
    {
      name: 'verifier-is-a-process',
      comment:
        'The coordinator talks to the verifier only across the process boundary: the verifier client forks a file path.',
      severity: 'error',
      from: { path: '^(coordinator|node)/' },
      to: { path: '^verifier/' },
    },
    {
      name: 'node-only-core',
      comment: 'node/ is what the Node processes share (coordinator, verifier): it imports core/ and itself only.',
      severity: 'error',
      from: { path: '^node/' },
      to: { path: '^(coordinator|web|kernels|verifier|headless|tools|bin)/' },
    },
    {
      name: 'verifier-only-kernels-core-node',
      comment: 'The verifier process runs kernels/ on core/, with node/ for the GPU environment and the IDX loader.',
      severity: 'error',
      from: { path: '^verifier/' },
      to: { path: '^(web|bin|coordinator|headless|tools)/' },
    },
    {
      name: 'kernels-only-core',
      comment: 'kernels/ imports only core/ (model specs), nothing of web/ or of a Node process.',
      severity: 'error',
      from: { path: '^kernels/' },
      to: { path: '^(web|verifier|coordinator|node|headless|tools)/' },
    },
    {
      name: 'web-only-kernels-and-core',
      comment: 'web/ runs in the browser: it may import kernels/ and core/, never a Node process.',
      severity: 'error',
      from: { path: '^web/' },
      to: { path: '^(verifier|coordinator|node|headless|tools)/' },
    },
    {
      name: 'headless-only-web-kernels-core-node',
      comment:
        "The headless worker runs a tab's code in Node: it may import web/, kernels/, core/ and node/, never the coordinator or the verifier.",
      severity: 'error',
      from: { path: '^headless/' },
      to: { path: '^(coordinator|verifier|bin)/' },
    },
    {
      name: 'headless-is-a-process',
      comment:
        'Only bin/ loads the headless worker (`tabswarm worker`); the coordinator starts it as a child process by path (--local-workers).',
      severity: 'error',
      from: { path: '^(core|coordinator|node|web|kernels|verifier)/' },
      to: { path: '^headless/' },
    },
    {
      name: 'worker-not-into-pages',
      comment:
        'The training Web Worker is its own thread: it imports no page code (volunteer, admin) and not the loop that runs on the page.',
      severity: 'error',
      from: { path: '^web/worker/' },
      to: { path: '^web/(volunteer|admin|elastic)/' },
    },
    {
      name: 'product-not-into-tools-bench-or-test',
      comment: 'Tools, benchmarks and tests never ship: nothing in the product imports them.',
      severity: 'error',
      from: { path: PRODUCT },
      to: { path: '^(tools|test|bench|scripts)/' },
    },
    {
      name: 'product-no-dev-dependencies',
      comment: 'The product runs on the runtime dependencies alone (npm ls --omit=dev); type-only imports are erased.',
      severity: 'error',
      from: { path: PRODUCT },
      to: { dependencyTypes: ['npm-dev'], dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'no-circular',
      comment: 'An import circle means one of its files holds something that belongs in a third place.',
      severity: 'error',
      from: { path: PRODUCT },
      to: { circular: true },
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
    exclude: { path: '(^|/)dist/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.base.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
  },
};
