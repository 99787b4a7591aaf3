import { parseArgs } from 'node:util'
import { isEmailAddress } from '../../domain/email-address.ts'
import { isPlan, maxProjectNameLength, plans } from '../../domain/project/index.ts'
import type { User } from '../../domain/user.ts'
import { ConfigError, devSecretFileName, loadConfig } from '../infrastructure/config.ts'
import { deleteNamespace, StreamSettingsMismatch } from '../../streams/definitions.ts'
import { connectNats } from '../../streams/connection.ts'
import { databaseName, dropDatabase } from '../../projections/database.ts'
import type { Config } from '../infrastructure/config.ts'
import { AccountService } from '../use-cases/platform/accounts.ts'
import { createProject } from '../use-cases/projects/project-service.ts'
import { createLogger, openRuntime, type Runtime } from '../infrastructure/runtime.ts'

const usage = `usage:
  npm run --silent cli -- project create --name NAME [--plan ${plans.join('|')}] [--email E] [--env test|live]
  npm run --silent cli -- user suspend --email E
  npm run --silent cli -- user reinstate --email E
  npm run --silent cli -- user admin --email E
  npm run --silent cli -- user unadmin --email E
  npm run --silent cli -- install remove --confirm NAMESPACE`

function emailOption(value: string | undefined, required: boolean): string | null {
  const email = value?.trim() ?? null
  if (email === null && required) throw new ConfigError('--email is required')
  if (email !== null && !isEmailAddress(email)) throw new ConfigError('--email is not an e-mail address')
  return email
}

type Command = (runtime: Runtime) => Promise<Record<string, unknown>>

function projectCreate(args: string[]): Command {
  const { values } = parseArgs({
    args,
    options: { name: { type: 'string' }, plan: { type: 'string' }, email: { type: 'string' }, env: { type: 'string' } },
  })
  const name = values.name?.trim()
  if (!name || name.length > maxProjectNameLength) throw new ConfigError(`--name is required (1 to ${maxProjectNameLength} characters)`)
  const plan = values.plan ?? 'free'
  if (!isPlan(plan)) throw new ConfigError(`--plan must be one of ${plans.join(', ')}`)
  const env = values.env ?? 'test'
  if (env !== 'test' && env !== 'live') throw new ConfigError('--env must be test or live')
  const email = emailOption(values.email, false)
  return async (runtime) => {
    // With --email, the owner is a verified user (created if new), who can sign in after
    // choosing a password through "forgot password".
    const accounts = new AccountService(runtime)
    const owner = email === null ? null : await accounts.ensureVerifiedUser(email, plan === 'enterprise' ? 'business' : plan)
    const { project, apiKey } = await createProject(runtime, {
      name,
      plan,
      ownerEmail: owner?.email ?? null,
      ownerUserId: owner?.id ?? null,
      keyEnvironment: env,
    })
    if (owner !== null) await accounts.indexProject(owner.id, project.id, true)
    return { project_id: project.id, api_key: apiKey, ...(owner ? { owner_user_id: owner.id } : {}) }
  }
}

/** A change to the user with the address `--email`, answered with what `answer` picks of the user after it. */
function onUser(args: string[], change: (accounts: AccountService, email: string) => Promise<User>, answer: (user: User) => object): Command {
  const { values } = parseArgs({ args, options: { email: { type: 'string' } } })
  const email = emailOption(values.email, true)!
  return async (runtime) => ({ ...answer(await change(new AccountService(runtime), email)) })
}

function commandOf(argv: string[]): Command {
  const [noun, verb, ...rest] = argv
  if (noun === 'project' && verb === 'create') return projectCreate(rest)
  if (noun === 'user' && (verb === 'suspend' || verb === 'reinstate')) {
    return onUser(
      rest,
      (accounts, email) => accounts.setSuspended(email, verb === 'suspend'),
      (user) => ({ user_id: user.id, status: user.status }),
    )
  }
  // Staff (`is_admin`) is given and taken here only: no route can make an admin.
  if (noun === 'user' && (verb === 'admin' || verb === 'unadmin')) {
    return onUser(
      rest,
      (accounts, email) => accounts.setAdmin(email, verb === 'admin'),
      (user) => ({ user_id: user.id, is_admin: user.is_admin }),
    )
  }
  throw new ConfigError(usage)
}

/**
 * The operator command line (CONTRACT.md): same environment and same commands as the service.
 * A leading `--dev` (which `npm run cli` passes, as `npm start` does) reads the development
 * mode's secret file when JOBSVC_SECRET is not set.
 */
async function main(argv: string[]): Promise<void> {
  const dev = argv[0] === '--dev'
  const args = dev ? argv.slice(1) : argv
  if (args[0] === 'install' && args[1] === 'remove') return removeInstall(args.slice(2), dev)
  const command = commandOf(args)
  const config = loadConfig(process.env, { devSecretFile: dev ? devSecretFileName : null, dev, terminal: process.stdout.isTTY === true })
  const log = createLogger({ logLevel: config.logLevel === 'info' ? 'warn' : config.logLevel, logFormat: config.logFormat })
  const runtime = await openRuntime(config, log, 'jobsvc-cli')
  try {
    process.stdout.write(JSON.stringify(await command(runtime)) + '\n')
  } finally {
    await runtime.close()
  }
}

/**
 * Removes the install of JOBSVC_NAMESPACE: its streams and key-value buckets on NATS and its
 * database (DATABASE_URL), whatever they hold; the log and every read model are gone. `--confirm`
 * must repeat the namespace, so a command run against the wrong environment removes nothing.
 * Nothing is opened or created first (the runtime would create what is missing).
 */
async function removeInstall(args: string[], dev: boolean): Promise<void> {
  const { values } = parseArgs({ args, options: { confirm: { type: 'string' } } })
  const config: Readonly<Config> = loadConfig(process.env, { devSecretFile: dev ? devSecretFileName : null, dev })
  if (values.confirm !== config.namespace) {
    throw new ConfigError(`--confirm must repeat the namespace to remove (JOBSVC_NAMESPACE is ${config.namespace}); nothing was removed`)
  }
  const nats = await connectNats(config.natsUrl, 'jobsvc-cli')
  try {
    await deleteNamespace(nats.jsm, config.namespace)
  } finally {
    await nats.nc.close()
  }
  await dropDatabase(config.databaseUrl)
  process.stdout.write(JSON.stringify({ removed_namespace: config.namespace, dropped_database: databaseName(config.databaseUrl) }) + '\n')
}

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write(`${err instanceof ConfigError || err instanceof StreamSettingsMismatch ? err.message : String(err?.stack ?? err)}\n`)
  process.exit(err instanceof ConfigError ? 2 : 1)
})
