import { PassThrough } from 'node:stream'
import t from 'tap'
import { loadConfig } from '../../services/infrastructure/config.ts'
import { createLogger } from '../../services/infrastructure/runtime.ts'

// Issue 26, item 6: `--dev` on a terminal logs human-readable lines; anywhere else (a pipe, a
// container, a supervisor) one JSON object per line, as log pipelines expect. LOG_FORMAT decides
// when it is set.

const env = { JOBSVC_SECRET: 'log-format-secret-log-format-secret' }

t.test('the format: pretty only for --dev on a terminal, unless LOG_FORMAT says', async (t) => {
  t.equal(loadConfig(env, { dev: true, terminal: true }).logFormat, 'pretty')
  t.equal(loadConfig(env, { dev: true, terminal: false }).logFormat, 'json', 'piped: json')
  t.equal(loadConfig(env, { dev: false, terminal: true }).logFormat, 'json', 'production: json')
  t.equal(loadConfig({ ...env, LOG_FORMAT: 'json' }, { dev: true, terminal: true }).logFormat, 'json')
  t.equal(loadConfig({ ...env, LOG_FORMAT: 'pretty' }).logFormat, 'pretty')
})

async function linesOf(format: 'json' | 'pretty'): Promise<string[]> {
  const out = new PassThrough()
  const chunks: string[] = []
  out.on('data', (c: Buffer) => chunks.push(c.toString('utf8')))
  const log = createLogger({ logLevel: 'info', logFormat: format }, out)
  log.info({ port: 8080 }, 'jobsvc listening on http://127.0.0.1:8080')
  await new Promise((r) => setImmediate(r))
  return chunks.join('').trim().split('\n')
}

t.test('a pretty line reads as text, a json line parses', async (t) => {
  const [pretty] = await linesOf('pretty')
  t.match(pretty, /^\[?\d\d:\d\d:\d\d\.\d{3}\]? INFO.*: jobsvc listening on http:\/\/127\.0\.0\.1:8080/)
  t.throws(() => JSON.parse(pretty!), 'not JSON')
  const [json] = await linesOf('json')
  t.match(JSON.parse(json!), { level: 30, port: 8080, msg: 'jobsvc listening on http://127.0.0.1:8080' })
})
