import tseslint from 'typescript-eslint'
import noClockOrIo from './tools/lint/no-clock-or-io.js'
import noReadModelSql from './tools/lint/no-read-model-sql.js'
import noUntypedStore from './tools/lint/no-untyped-store.js'
import routeDeclaresRole from './tools/lint/route-declares-role.js'

export default tseslint.config(
  { ignores: ['node_modules/**', '.tap/**', 'sdk/typescript/dist/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // The domain is pure: no I/O, no clock, no randomness. The edge passes them in on commands.
    files: ['domain/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['node:*', 'fs', 'net', 'http', 'crypto'], message: 'domain/ does no I/O' },
            { group: ['@nats-io/*', 'postgres', 'fastify', 'fastify-*', 'pino', 'ulid'], message: 'domain/ does no I/O' },
            {
              group: ['../streams/*', '../projections/*', '../services/*', '../../streams/*', '../../projections/*', '../../services/*'],
              message: 'dependencies point services -> streams, projections -> domain',
            },
          ],
        },
      ],
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'time arrives on the command (meta.now)' },
        { object: 'Math', property: 'random', message: 'randomness arrives on the command (meta.random)' },
      ],
    },
  },
  {
    // Which session role may call a route is declared on the route (README, "Roles per route").
    files: ['services/roles/api/routes/**/*.ts'],
    plugins: { 'jobsvc-routes': { rules: { 'route-declares-role': routeDeclaresRole } } },
    rules: { 'jobsvc-routes/route-declares-role': 'error' },
  },
  {
    // The ready index's lanes are pure: time is passed in, timers and I/O are its other parts'.
    files: ['services/use-cases/jobs/ready-index/lanes.ts'],
    plugins: { 'jobsvc-pure': { rules: { 'no-clock-or-io': noClockOrIo } } },
    rules: { 'jobsvc-pure/no-clock-or-io': 'error' },
  },
  {
    // Issue 24, item 3: above streams/, aggregates are loaded and decided through their typed handlers.
    files: ['projections/**/*.ts', 'services/**/*.ts', 'tools/**/*.ts', 'test/**/*.ts'],
    ignores: ['test/streams/**'],
    plugins: { 'jobsvc-aggregates': { rules: { 'no-untyped-store': noUntypedStore } } },
    rules: { 'jobsvc-aggregates/no-untyped-store': 'error' },
  },
  {
    // Tests may append raw messages and read them back untyped (and make a billing provider's `evt_` ids).
    files: ['test/**/*.ts'],
    ignores: ['test/streams/**'],
    rules: { 'jobsvc-aggregates/no-untyped-store': ['error', { eventIds: false, storeCalls: false }] },
  },
  {
    // Read models own their queries (tools/lint/no-read-model-sql.js). Tests and benches are left
    // out: they seed and inspect read-model rows directly, as fixtures.
    files: ['domain/**/*.ts', 'streams/**/*.ts', 'services/**/*.ts', 'tools/**/*.ts'],
    ignores: ['tools/bench/**'],
    plugins: { 'jobsvc-read-models': { rules: { 'no-read-model-sql': noReadModelSql } } },
    rules: { 'jobsvc-read-models/no-read-model-sql': 'error' },
  },
)
