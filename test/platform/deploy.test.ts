import { execFile } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { cp, mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { basename, isAbsolute, join, relative } from 'node:path'
import { promisify } from 'node:util'
import semver from 'semver'
import t from 'tap'
import { parse as parseYaml } from 'yaml'
import { envOf, instructionsOf, parseCopy, parseDockerfile, parseExecForm, type Stage } from '../support/dockerfile.ts'
import { httpRequest, isolatedNames, removeIsolated, repoRoot, spawnService, testSecret } from '../support/harness.ts'

/**
 * The Dockerfile, read, and the image, built as far as this machine can: there is no docker
 * daemon here, so the test does what each instruction does in a folder per stage (COPY from the
 * repository or from an earlier stage's folder, the same `npm ci`, offline, from the npm cache)
 * and then runs the runtime stage's CMD from its folder, with nothing of the repository's
 * node_modules or environment beneath it, against the local NATS and Postgres in a namespace
 * and database of its own. What it cannot check is the base images themselves and USER.
 */
const run = promisify(execFile)
const { args: buildArgs, stages } = parseDockerfile(readFileSync(join(repoRoot, 'Dockerfile'), 'utf8'))
const runtime = stages.at(-1)!
const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as {
  engines: { node: string }
  dependencies: Record<string, string>
  devDependencies: Record<string, string>
}
const compose = parseYaml(readFileSync(join(repoRoot, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
  services: Record<string, { environment?: Record<string, string>; healthcheck?: { test: string[] } }>
}
const cmd = parseExecForm(instructionsOf(runtime, 'CMD').at(-1)!.args).argv
const healthcheck = parseExecForm(instructionsOf(runtime, 'HEALTHCHECK').at(-1)!.args)

t.test('Dockerfile: production dependencies installed in one stage, run by a non-root user in another', async (t) => {
  t.ok(stages.length >= 2, `a multi-stage build (${stages.map((s) => s.name).join(', ')})`)
  const installs = stages.flatMap((s) => instructionsOf(s, 'RUN').filter((i) => /\bnpm (ci|install|i)\b/.test(i.args)))
  t.ok(installs.length > 0, 'an npm install')
  for (const install of installs) t.match(install.args, /\bnpm ci --omit=dev\b/, `production dependencies only, from the lock file: ${install.args}`)
  t.same(instructionsOf(runtime, 'RUN'), [], 'the runtime stage runs nothing at build time: it copies what the install made')
  const fromStage = instructionsOf(runtime, 'COPY')
    .map((i) => parseCopy(i.args))
    .find((c) => c.options.from !== undefined)
  t.ok(fromStage && stages.slice(0, -1).some((s) => s.name === fromStage.options.from), 'node_modules comes from an earlier stage')
  t.match(fromStage?.sources, [/\/node_modules$/])

  const user = instructionsOf(runtime, 'USER').at(-1)?.args
  t.ok(user !== undefined && !/^(root|0)(:|$)/.test(user), `runs as a non-root user (${user})`)
  const copies = runtime.instructions.filter((i) => i.keyword === 'COPY')
  t.ok(
    runtime.instructions.indexOf(copies.at(-1)!) < runtime.instructions.findIndex((i) => i.keyword === 'USER'),
    'the code is copied before USER, so it stays root-owned and the service cannot rewrite it',
  )

  const node = semver.minVersion(pkg.engines.node)!
  t.equal(buildArgs.NODE_VERSION, String(node.major), `the image runs the Node line the service claims (${pkg.engines.node})`)
  for (const stage of stages) t.match(stage.base, new RegExp(`^node:${node.major}-bookworm(-slim)?$`), `${stage.name}: official Node image`)
  t.ok(pkg.dependencies.tsx, 'tsx, which runs the TypeScript, is a production dependency')
  t.ok(pkg.dependencies['patch-package'], "patch-package, the install's postinstall, is a production dependency")

  const env = envOf(runtime)
  t.equal(env.HOST, '0.0.0.0', 'listens beyond the container’s loopback')
  t.same(
    instructionsOf(runtime, 'EXPOSE').flatMap((i) => i.args.split(' ')),
    [env.PORT, compose.services.jobsvc!.environment!.METRICS_PORT],
    'exposes the API and metrics ports',
  )
  t.equal(cmd[0], 'node', 'node itself is PID 1 and gets SIGTERM (not npm, which does not pass it on)')
  t.notOk(cmd.includes('--dev'), 'the image never runs the development mode')
  t.same(healthcheck.argv, ['node', 'deploy/healthcheck.mjs'], 'HEALTHCHECK asks the readiness route')
  for (const option of ['interval', 'timeout', 'start-period', 'retries']) t.ok(healthcheck.options[option], `HEALTHCHECK --${option}`)
})

t.test('.dockerignore keeps secrets and the host’s node_modules out, and nothing the Dockerfile copies', async (t) => {
  const ignored = readFileSync(join(repoRoot, '.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
  for (const entry of ['.git', '.env', '.jobsvc-dev-secret*', '**/node_modules']) t.ok(ignored.includes(entry), `ignores ${entry}`)
  const copied = stages.flatMap((s) =>
    instructionsOf(s, 'COPY')
      .map((i) => parseCopy(i.args))
      .filter((c) => c.options.from === undefined)
      .flatMap((c) => c.sources),
  )
  for (const source of copied) {
    t.ok(existsSync(join(repoRoot, source)), `${source} exists`)
    t.notOk(
      ignored.some((entry) => source === entry || source.startsWith(`${entry}/`)),
      `${source} is in the build context`,
    )
  }
})

/** Does what `stage` does, in `folders[stage.name]`; answers the output of what it ran. */
async function buildStage(stage: Stage, folders: Map<string, { dir: string; workdir: string }>, root: string): Promise<string> {
  const dir = join(root, stage.name)
  await mkdir(dir, { recursive: true })
  const folder = { dir, workdir: '/' }
  folders.set(stage.name, folder)
  const inStage = (path: string) => join(dir, isAbsolute(path) ? relative(folder.workdir, path) : path)
  let output = ''
  for (const { keyword, args } of stage.instructions) {
    if (keyword === 'WORKDIR') {
      folder.workdir = args
    } else if (keyword === 'COPY') {
      const { options, sources, destination } = parseCopy(args)
      const intoFolder = sources.length > 1 || destination.endsWith('/')
      for (const source of sources) {
        const from = options.from === undefined ? null : folders.get(options.from)!
        const path = from === null ? join(repoRoot, source) : join(from.dir, relative(from.workdir, source))
        const target = intoFolder ? join(inStage(destination), basename(source)) : inStage(destination)
        await cp(path, target, { recursive: true, verbatimSymlinks: true })
      }
    } else if (keyword === 'RUN') {
      for (const command of args.split('&&').map((c) => c.trim())) {
        // Emptying the cache would empty this machine's, which the offline install reads.
        if (/^npm cache clean\b/.test(command)) continue
        if (!/^npm ci\b/.test(command)) throw new Error(`the test does not know how to do RUN ${command}`)
        const npmArgs = [...command.split(' ').slice(1), '--offline']
        const done = await run('npm', npmArgs, { cwd: dir, env: { PATH: process.env.PATH, HOME: process.env.HOME }, maxBuffer: 16 << 20 })
        output += done.stdout + done.stderr
      }
    } else if (!['ENV', 'USER', 'EXPOSE', 'HEALTHCHECK', 'CMD', 'ARG'].includes(keyword)) {
      throw new Error(`the test does not know how to do ${keyword} ${args}`)
    }
  }
  return output
}

/** Runs a probe (the health check's command) in `cwd`; answers its exit code and what it wrote. */
async function probe(argv: string[], cwd: string, env: Record<string, string | undefined>): Promise<{ code: number; stderr: string }> {
  const [node, ...rest] = argv
  return run(node === 'node' ? process.execPath : node!, rest, { cwd, env }).then(
    (done) => ({ code: 0, stderr: done.stderr }),
    (err: { code: number; stderr: string }) => ({ code: err.code, stderr: err.stderr }),
  )
}

t.test('the runtime stage, built as far as it can be here, runs the service and passes its health checks', async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'jobsvc-image-'))
  t.teardown(() => rm(root, { recursive: true, force: true }))
  const folders = new Map<string, { dir: string; workdir: string }>()
  let installOutput = ''
  for (const stage of stages) installOutput += await buildStage(stage, folders, root)
  const app = folders.get(runtime.name)!.dir
  t.notMatch(installOutput, /EBADENGINE/, `the install warns of no unsupported engine on Node ${process.versions.node}`)
  t.ok(existsSync(join(app, 'node_modules/tsx')), 'tsx is installed')
  t.notOk(existsSync(join(app, 'node_modules/typescript')), 'no development dependency is installed (typescript)')
  t.notOk(existsSync(join(app, 'node_modules/tap')), 'no development dependency is installed (tap)')
  t.notOk(existsSync(join(app, 'node_modules/@jobsvc/sdk')), 'the SDK workspace is not in the image')
  t.match(readFileSync(join(app, 'node_modules/postgres/cf/src/connection.js'), 'utf8'), /CONNECTION_CLOSED/, 'patches/ was applied')

  const names = isolatedNames(import.meta.filename)
  t.teardown(() => removeIsolated(names))
  // Only the image's environment and the install's: nothing of this shell (NODE_OPTIONS, npm_*).
  const baseEnv = { PATH: process.env.PATH, HOME: process.env.HOME, ...envOf(runtime) }
  const env = {
    NATS_URL: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
    JOBSVC_NAMESPACE: names.namespace,
    DATABASE_URL: names.databaseUrl,
    METRICS_PORT: '0',
  }
  const svc = await spawnService(env, [], { cwd: app, command: cmd, baseEnv })
  t.teardown(() => svc.stop())
  const port = new URL(svc.url).port
  const metricsPort = /"msg":"metrics on http:\/\/[^:]+:(\d+)\/metrics"/.exec(svc.output())?.[1]
  t.ok(metricsPort, 'serves /metrics')
  const probeEnv = { ...baseEnv, PORT: port, METRICS_PORT: metricsPort }

  const ready = await probe(healthcheck.argv, app, probeEnv)
  t.equal(ready.code, 0, `the HEALTHCHECK passes: the readiness route answers 200 ${ready.stderr}`)
  const roleCheck = compose.services.projector!.healthcheck!.test
  t.equal(roleCheck[0], 'CMD')
  const connected = await probe(roleCheck.slice(1), app, probeEnv)
  t.equal(connected.code, 0, `the background roles' check passes: /metrics reports NATS and Postgres up ${connected.stderr}`)
  const wrongPort = await probe(roleCheck.slice(1), app, { ...probeEnv, METRICS_PORT: port })
  t.equal(wrongPort.code, 1, 'and fails where no /metrics answers')
  t.match(wrongPort.stderr, /^unhealthy: GET \/metrics answered 404/)

  const cli = await run(
    process.execPath,
    ['--import', 'tsx', 'services/roles/cli.ts', 'project', 'create', '--name', 'image', '--plan', 'business'],
    {
      cwd: app,
      env: { ...baseEnv, ...env, JOBSVC_SECRET: testSecret, LOG_LEVEL: 'silent' },
    },
  )
  const { api_key: apiKey } = JSON.parse(cli.stdout.trim().split('\n').at(-1)!) as { api_key: string }
  t.match(apiKey, /^sv_test_sk_/, 'the operator command line runs from the image too')
  const url = `http://127.0.0.1:${port}`
  const created = await httpRequest(url, apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'email', payload: { to: 'a@example.com' } })
  t.equal(created.status, 201, 'a job is created')
  const got = await httpRequest(url, apiKey, 'GET', `/jobsvc/v1/jobs/${created.body.id}`)
  t.equal(got.status, 200)
  t.equal(got.body.state, 'pending')
  t.equal((await httpRequest(url, null, 'GET', '/dashboard')).status, 200, 'the dashboard is served from the copied files')
  t.equal((await httpRequest(url, null, 'GET', '/docs/static/index.html')).status, 200, 'and the API reference page from node_modules')
})
