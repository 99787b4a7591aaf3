import { parseArgs } from 'node:util'
import * as api from './api/index.ts'
import * as dispatcher from './dispatcher/index.ts'
import { ConfigError, devSecretFileName, loadConfig } from '../infrastructure/config.ts'
import { StreamSettingsMismatch } from '../../streams/definitions.ts'
import * as projector from './projector/index.ts'
import { createLogger, openRuntime } from '../infrastructure/runtime.ts'
import { serveMetrics } from './metrics-endpoint.ts'
import { backgroundRoles, startRoleThread, type RoleThread } from './role-thread.ts'
import * as scheduler from './scheduler/index.ts'

const roles = ['api', 'projector', 'dispatcher', 'scheduler'] as const
type Role = (typeof roles)[number]

/**
 * `--role` (repeated or comma-separated; none or `all` is every role) and `--dev`, the development
 * mode `npm start` passes: without JOBSVC_SECRET it keeps a generated one in a local file.
 * Supervisors and docker-compose run `node --import tsx services/roles/main.ts` without it.
 */
function parseArguments(argv: string[]): { roles: Role[]; dev: boolean } {
  const { values } = parseArgs({
    args: argv,
    options: { role: { type: 'string', multiple: true }, dev: { type: 'boolean', default: false } },
    allowPositionals: false,
  })
  const wanted = (values.role ?? [])
    .flatMap((r) => r.split(','))
    .map((r) => r.trim())
    .filter(Boolean)
  for (const r of wanted) {
    if (r !== 'all' && !roles.includes(r as Role)) throw new ConfigError(`unknown role ${JSON.stringify(r)}; roles are ${roles.join(', ')}`)
  }
  return { roles: wanted.length === 0 || wanted.includes('all') ? [...roles] : (wanted as Role[]), dev: values.dev }
}

async function main(): Promise<void> {
  const { roles: selected, dev } = parseArguments(process.argv.slice(2))
  const config = loadConfig(process.env, { devSecretFile: dev ? devSecretFileName : null, dev, terminal: process.stdout.isTTY === true })
  const log = createLogger(config)
  if (config.devSecretFile !== null) {
    log.warn(
      { file: config.devSecretFile },
      `development mode: JOBSVC_SECRET is not set, so the secret kept in ${config.devSecretFile} is used; set JOBSVC_SECRET in production`,
    )
  }
  const runtime = await openRuntime(config, log, `jobsvc-${selected.join('+')}`)
  const stops: Array<() => Promise<void>> = []
  let address: string | null = null
  const background = backgroundRoles.filter((r) => selected.includes(r))
  let roleThread: RoleThread | null = null
  if (selected.includes('api') && background.length > 0) {
    // With the API in the same process, the other roles get an event loop of their own.
    roleThread = await startRoleThread(config, background, log)
    stops.push(roleThread.stop)
  } else {
    if (selected.includes('projector')) stops.push(await projector.start(runtime))
    if (selected.includes('scheduler')) stops.push(await scheduler.start(runtime))
    if (selected.includes('dispatcher')) stops.push(await dispatcher.start(runtime))
  }
  if (selected.includes('api')) {
    const role = await api.start(runtime)
    address = role.address
    stops.push(role.stop)
  }
  if (config.metricsPort !== null) {
    const thread = roleThread
    const metrics = await serveMetrics(runtime, config.metricsPort, async () => (thread === null ? [] : [await thread.metrics()]))
    log.info({ address: metrics.address }, `metrics on ${metrics.address}`)
    stops.push(async () => void metrics.server.close())
  }
  log.info(
    { roles: selected, address, namespace: config.namespace },
    address ? `jobsvc listening on ${address}` : `jobsvc ready (${selected.join(', ')})`,
  )

  let stopping = false
  const shutdown = async (signal: string) => {
    if (stopping) return
    stopping = true
    log.info({ signal }, 'jobsvc stopping')
    for (const stop of stops.reverse()) await stop().catch((err) => log.error({ err }, 'stop failed'))
    await runtime.close()
    process.exit(0)
  }
  process.on('SIGTERM', () => void shutdown('SIGTERM'))
  process.on('SIGINT', () => void shutdown('SIGINT'))
}

main().catch((err) => {
  const message = err instanceof ConfigError || err instanceof StreamSettingsMismatch ? err.message : String(err?.stack ?? err)
  process.stderr.write(`jobsvc failed to start: ${message}\n`)
  process.exit(1)
})
