import { ConfigError, loadConfig } from './config.ts'
import { rebuildReadModels } from './projector/rebuild.ts'
import { createLogger, openRuntime } from './runtime.ts'

/** `npm run replay`: empties every read model and rebuilds it from sequence 1 of the log. */
async function main(): Promise<void> {
  const config = loadConfig(process.env)
  const log = createLogger(config)
  const runtime = await openRuntime(config, log, 'jobsvc-replay')
  try {
    const { through, ms } = await rebuildReadModels(runtime, (m) => log.info(m))
    log.info({ through, ms }, `replay: read models rebuilt through sequence ${through} in ${ms} ms`)
  } finally {
    await runtime.close()
  }
}

main().catch((err) => {
  process.stderr.write(`replay failed: ${err instanceof ConfigError ? err.message : String(err?.stack ?? err)}\n`)
  process.exit(1)
})
