import { parseArgs } from 'node:util'
import { plans, type Plan } from '../domain/project.ts'
import { ConfigError, loadConfig } from './config.ts'
import { createProject } from './projects/project-service.ts'
import { createLogger, openRuntime } from './runtime.ts'

const usage = `usage: npm run --silent cli -- project create --name NAME [--plan free|starter|pro|business|enterprise] [--email E] [--env test|live]`

/** The operator command line (CONTRACT.md): same environment and same commands as the service. */
async function main(argv: string[]): Promise<void> {
  const [noun, verb, ...rest] = argv
  if (noun !== 'project' || verb !== 'create') throw new ConfigError(usage)
  const { values } = parseArgs({
    args: rest,
    options: { name: { type: 'string' }, plan: { type: 'string' }, email: { type: 'string' }, env: { type: 'string' } },
  })
  const name = values.name?.trim()
  if (!name || name.length > 100) throw new ConfigError('--name is required (1 to 100 characters)')
  const plan = (values.plan ?? 'free') as Plan
  if (!plans.includes(plan)) throw new ConfigError(`--plan must be one of ${plans.join(', ')}`)
  const env = values.env ?? 'test'
  if (env !== 'test' && env !== 'live') throw new ConfigError('--env must be test or live')
  const email = values.email?.trim() ?? null
  if (email !== null && !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email)) throw new ConfigError('--email is not an e-mail address')

  const config = loadConfig(process.env)
  const log = createLogger({ logLevel: config.logLevel === 'info' ? 'warn' : config.logLevel })
  const runtime = await openRuntime(config, log, 'jobsvc-cli')
  try {
    const { project, apiKey } = await createProject(runtime, { name, plan, ownerEmail: email, keyEnvironment: env })
    process.stdout.write(JSON.stringify({ project_id: project.id, api_key: apiKey }) + '\n')
  } finally {
    await runtime.close()
  }
}

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write(`${err instanceof ConfigError ? err.message : String(err?.stack ?? err)}\n`)
  process.exit(err instanceof ConfigError ? 2 : 1)
})
