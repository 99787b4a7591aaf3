import { randomBytes } from 'node:crypto'
import { rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { dropDatabase } from '../../projections/database.ts'
import type { NatsHandles } from '../../streams/connection.ts'
import { defaultEventsMaxBytes, deleteNamespace } from '../../streams/definitions.ts'
import type { Options } from './options.ts'

/**
 * What the spawned service and its command line are given (CONTRACT.md's variables): under
 * --spawn a namespace and database of the run's own, NATS, port 0 and, where the run changes
 * tunables, a JOBSVC_CONFIG file of its own.
 */
export interface ServiceEnvironment {
  /** The spawned service's namespace, or --namespace against --url (null: unknown). */
  namespace: string | null
  databaseUrl: string
  env: NodeJS.ProcessEnv
  configPath: string | null
}

/** `webhookPort`: the --webhooks receiver, which the spawned service must be allowed to call. */
export function prepareServiceEnvironment(opts: Options, webhookPort: number | null): ServiceEnvironment {
  const runId = randomBytes(4).toString('hex')
  const namespace = opts.spawn ? `jobsvc_bench_${runId}` : opts.namespace
  const dbUrl = new URL(opts.databaseUrl)
  dbUrl.pathname = `/${namespace}`
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: '0',
    JOBSVC_NAMESPACE: namespace ?? '',
    DATABASE_URL: dbUrl.toString(),
    NATS_URL: opts.natsUrl,
  }
  if (webhookPort !== null && opts.spawn) env.WEBHOOK_ALLOW_HOSTS = `127.0.0.1:${webhookPort}`
  let configPath: string | null = null
  if (opts.spawn && (!opts.metering || !opts.auditLog || opts.retentionJobs !== null || opts.replayEvents !== null)) {
    configPath = join(tmpdir(), `jobsvc-bench-${runId}.json`)
    const tunables = {
      ...(opts.metering ? {} : { metering_enabled: false }),
      ...(opts.auditLog ? {} : { audit_log_enabled: false }),
      // The retention timed is this process's; the service's would share the backlog.
      ...(opts.retentionJobs === null ? {} : { retention_interval_ms: 86_400_000 }),
      // The replay's log (about 1.3 KB a message) must fit the events stream beside the other phases'.
      ...(opts.replayEvents === null ? {} : { events_max_bytes: Math.max(defaultEventsMaxBytes, opts.replayEvents * 2048 + 2 ** 29) }),
    }
    writeFileSync(configPath, JSON.stringify({ tunables }))
    env.JOBSVC_CONFIG = configPath
  }
  return { namespace, databaseUrl: dbUrl.toString(), env, configPath }
}

/**
 * Deletes what the run made: under --spawn the service's namespace and database (a failure is
 * reported, not thrown, so the rest of the cleanup goes on), and the tunables file.
 */
export async function removeServiceEnvironment(environment: ServiceEnvironment, spawned: boolean, nats: NatsHandles | null): Promise<void> {
  const reportFailure = (err: unknown) => process.stderr.write(`bench: cleanup: ${err}\n`)
  if (spawned && environment.namespace !== null) {
    if (nats !== null) await deleteNamespace(nats.jsm, environment.namespace).catch(reportFailure)
    await dropDatabase(environment.databaseUrl).catch(reportFailure)
  }
  if (environment.configPath !== null) rmSync(environment.configPath, { force: true })
}
