import { parseArgs } from 'node:util'
import { ConfigError, devSecretFileName, loadConfig } from '../infrastructure/config.ts'
import { StreamSettingsMismatch } from '../../streams/definitions.ts'
import { rebuildReadModels } from './projector/rebuild.ts'
import { createLogger, openRuntime } from '../infrastructure/runtime.ts'

/**
 * `npm run replay`: empties every read model and rebuilds it from sequence 1 of the log. `--dev`
 * (which the npm script passes, as `npm start` does) reads the development mode's secret file
 * when JOBSVC_SECRET is not set.
 */
async function main(): Promise<void> {
  const { values } = parseArgs({ args: process.argv.slice(2), options: { dev: { type: 'boolean', default: false } }, allowPositionals: false })
  const config = loadConfig(process.env, { devSecretFile: values.dev ? devSecretFileName : null })
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
  process.stderr.write(
    `replay failed: ${err instanceof ConfigError || err instanceof StreamSettingsMismatch ? err.message : String(err?.stack ?? err)}\n`,
  )
  process.exit(1)
})
