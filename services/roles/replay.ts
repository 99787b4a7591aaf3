import { parseArgs } from 'node:util'
import { ConfigError, devSecretFileName, loadConfig } from '../infrastructure/config.ts'
import { listFailures, type FailureScope } from '../../projections/projection-failures.ts'
import { StreamSettingsMismatch } from '../../streams/definitions.ts'
import { rebuildReadModels } from './projector/rebuild.ts'
import { reprojectFailed } from './projector/reproject.ts'
import { createLogger, openRuntime, type Runtime } from '../infrastructure/runtime.ts'
import type { Logger } from 'pino'

/**
 * `npm run replay`: empties every read model and rebuilds it from sequence 1 of the log.
 * `--subject <subject>` or `--project <project_id>` instead re-projects only that aggregate's or
 * project's messages a read model could not hold (projection_failures), emptying nothing; it exits
 * with 2 when some still fail. `--failures` prints the recorded failures, one JSON line each
 * (with `--project` or `--subject`, only theirs). `--dev` (which the npm script passes, as `npm
 * start` does) reads the development mode's secret file when JOBSVC_SECRET is not set.
 */
async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      dev: { type: 'boolean', default: false },
      subject: { type: 'string' },
      project: { type: 'string' },
      failures: { type: 'boolean', default: false },
    },
    allowPositionals: false,
  })
  if (values.subject !== undefined && values.project !== undefined) throw new UsageError('give --subject or --project, not both')
  const scope: FailureScope | null =
    values.subject !== undefined ? { subject: values.subject } : values.project !== undefined ? { projectId: values.project } : null
  const config = loadConfig(process.env, {
    devSecretFile: values.dev ? devSecretFileName : null,
    dev: values.dev ?? false,
    terminal: process.stdout.isTTY === true,
  })
  const log = createLogger(config)
  const runtime = await openRuntime(config, log, 'jobsvc-replay')
  try {
    if (values.failures) await printFailures(runtime, scope)
    else if (scope !== null) await reproject(runtime, log, scope)
    else {
      const { through, messages, events, ms } = await rebuildReadModels(runtime, (m) => log.info(m))
      const eventsPerS = Math.round(events / (Math.max(ms, 1) / 1000))
      log.info(
        { through, messages, events, ms, events_per_s: eventsPerS },
        `replay: read models rebuilt through sequence ${through} in ${ms} ms (${events} events in ${messages} messages, ${eventsPerS} events/s)`,
      )
    }
  } finally {
    await runtime.close()
  }
}

class UsageError extends Error {}

async function printFailures(runtime: Runtime, scope: FailureScope | null): Promise<void> {
  for (const f of await listFailures(runtime.sql, scope)) process.stdout.write(`${JSON.stringify({ ...f, failed_at: f.failed_at.toISOString() })}\n`)
}

async function reproject(runtime: Runtime, log: Logger, scope: FailureScope): Promise<void> {
  const { resolved, failing } = await reprojectFailed(runtime, scope)
  for (const { record, projection, projected, err } of failing) {
    log.error(
      { err, seq: record.seq, subject: record.subject, project_id: record.message.project_id, projection, projected },
      `replay: ${projection} still cannot hold message ${record.seq}; ${projected}, still recorded in projection_failures`,
    )
  }
  const named = 'subject' in scope ? { subject: scope.subject } : { project_id: scope.projectId }
  log.info({ ...named, resolved, failing: failing.length }, `replay: ${resolved} failure(s) re-projected, ${failing.length} still failing`)
  if (failing.length > 0) process.exitCode = 2
}

main().catch((err) => {
  const expected =
    err instanceof ConfigError || err instanceof StreamSettingsMismatch || err instanceof UsageError || String(err?.code).startsWith('ERR_PARSE_ARGS')
  process.stderr.write(`replay failed: ${expected ? err.message : String(err?.stack ?? err)}\n`)
  process.exit(1)
})
