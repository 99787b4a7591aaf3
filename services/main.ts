import { parseArgs } from 'node:util'
import * as api from './api/index.ts'
import * as dispatcher from './dispatcher/index.ts'
import { ConfigError, loadConfig } from './config.ts'
import * as projector from './projector/index.ts'
import { createLogger, openRuntime } from './runtime.ts'
import { backgroundRoles, startRoleThread } from './role-thread.ts'
import * as scheduler from './scheduler/index.ts'

const roles = ['api', 'projector', 'dispatcher', 'scheduler'] as const
type Role = (typeof roles)[number]

function parseRoles(argv: string[]): Role[] {
  const { values } = parseArgs({ args: argv, options: { role: { type: 'string', multiple: true } }, allowPositionals: false })
  const wanted = (values.role ?? []).flatMap((r) => r.split(',')).map((r) => r.trim()).filter(Boolean)
  if (wanted.length === 0 || wanted.includes('all')) return [...roles]
  for (const r of wanted) {
    if (!roles.includes(r as Role)) throw new ConfigError(`unknown role ${JSON.stringify(r)}; roles are ${roles.join(', ')}`)
  }
  return wanted as Role[]
}

async function main(): Promise<void> {
  const config = loadConfig(process.env)
  const selected = parseRoles(process.argv.slice(2))
  const log = createLogger(config)
  if (config.secretGenerated) log.warn('JOBSVC_SECRET is not set: using a throw-away secret (development only)')
  const runtime = await openRuntime(config, log, `jobsvc-${selected.join('+')}`)
  const stops: Array<() => Promise<void>> = []
  let address: string | null = null
  const background = backgroundRoles.filter((r) => selected.includes(r))
  if (selected.includes('api') && background.length > 0) {
    // With the API in the same process, the other roles get an event loop of their own.
    stops.push(await startRoleThread(config, background, log, () => process.exit(1)))
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
  log.info({ roles: selected, address, namespace: config.namespace }, address ? `jobsvc listening on ${address}` : `jobsvc ready (${selected.join(', ')})`)

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
  const message = err instanceof ConfigError ? err.message : String(err?.stack ?? err)
  process.stderr.write(`jobsvc failed to start: ${message}\n`)
  process.exit(1)
})
