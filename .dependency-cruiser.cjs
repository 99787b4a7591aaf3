// The house's layers, checked by `npm test` (README, "Architecture"): imports point down only,
// and nothing imports in a circle. From the top:
//   tools/, test/                 may use anything below
//   services/roles/               entry points and the four roles; a role never imports another
//   services/use-cases/           in the order of `useCases` below: each imports only those before it
//   services/infrastructure/      what every layer above uses (runtime, config, mailer, secrets)
//   streams/, projections/        the log and the read models (projections read streams' types)
//   domain/                       pure: imports nothing of ours outside itself
const useCases = ['projects', 'platform', 'metering', 'staff', 'events', 'operations', 'webhooks', 'jobs', 'alerts', 'workers']

const useCaseOrder = useCases.map((name, i) => ({
  name: `use-case-order-${name}`,
  comment: `services/use-cases/${name} may import only the use cases before it: ${useCases.slice(0, i).join(', ') || 'none'}`,
  severity: 'error',
  from: { path: `^services/use-cases/${name}/` },
  to: { path: `^services/use-cases/(${useCases.slice(i + 1).join('|') || '$^'})/` },
}))

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'an import circle ties modules that should be able to change apart',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    { name: 'domain-is-pure', severity: 'error', from: { path: '^domain/' }, to: { path: '^(streams|projections|services|tools|test|sdk)/' } },
    { name: 'streams-below-projections', severity: 'error', from: { path: '^streams/' }, to: { path: '^(projections|services|tools|test|sdk)/' } },
    { name: 'projections-below-services', severity: 'error', from: { path: '^projections/' }, to: { path: '^(services|tools|test|sdk)/' } },
    { name: 'services-below-tools-and-tests', severity: 'error', from: { path: '^services/' }, to: { path: '^(tools|test)/' } },
    {
      name: 'infrastructure-below-use-cases',
      severity: 'error',
      from: { path: '^services/infrastructure/' },
      to: { path: '^services/(use-cases|roles)/' },
    },
    { name: 'use-cases-below-roles', severity: 'error', from: { path: '^services/use-cases/' }, to: { path: '^services/roles/' } },
    {
      name: 'roles-apart',
      comment: 'a role reaches another only through the log and the read models; the entry files (main, cli, replay, role-thread) start them',
      severity: 'error',
      from: { path: '^services/roles/([^/]+)/' },
      to: { path: '^services/roles/', pathNot: '^services/roles/$1/' },
    },
    ...useCaseOrder,
    {
      name: 'services-layers-known',
      comment: 'every file of services/ belongs to one of the three layers',
      severity: 'error',
      from: { path: '^services/', pathNot: '^services/(roles|use-cases|infrastructure)/' },
      to: {},
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)node_modules/|^\\.tap/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.mjs', '.js', '.json'] },
  },
}
