import { execFile, spawn } from 'node:child_process'
import { access, cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { SDK_VERSION } from '@jobsvc/sdk'
import t, { type Test } from 'tap'
import { eventually, repoRoot, startHarness, type Harness } from '../support/harness.ts'
import { faultyProxy } from './support.ts'

// What a team does to use an SDK in its own repository (the README's Quick start): the TypeScript
// package packed and installed from its tarball, the Python one built from its pyproject.toml, each in a
// folder outside this repository, where neither tsx, the npm workspace nor this checkout's
// PYTHONPATH can help. A worker written there then runs a job of a real service.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
const outside = await mkdtemp(join(tmpdir(), 'jobsvc-install-'))
t.teardown(() => rm(outside, { recursive: true, force: true }))

const run = promisify(execFile)
// Only what a shell outside the repository would have: tap's NODE_OPTIONS (its TypeScript loader)
// and npm's npm_config_* from `npm test` would otherwise reach the children.
const plainEnv = { PATH: process.env.PATH!, HOME: process.env.HOME! }

/** Starts `command` in `cwd`, waits until the job it should run succeeded, then stops it with SIGTERM. */
async function runWorkerUntil(t: Test, h: Harness, jobId: string, command: string[], cwd: string, env: Record<string, string>) {
  const child = spawn(command[0]!, command.slice(1), { cwd, env: { ...plainEnv, ...env } })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')))
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')))
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  t.teardown(() => void child.kill('SIGKILL'))
  const job = await Promise.race([
    eventually(
      async () => {
        const { body } = await h.request('GET', `/jobsvc/v1/jobs/${jobId}`)
        return body.state === 'succeeded' ? body : null
      },
      30_000,
      `${jobId} to succeed`,
    ),
    exited.then((code) => Promise.reject(new Error(`the worker exited with ${code} before the job succeeded:\n${output}`))),
  ])
  child.kill('SIGTERM')
  return { job, code: await exited, output: () => output }
}

function createJob(queue: string) {
  return h.request('POST', '/jobsvc/v1/jobs', { job_type: 'send-email', queue, payload: { to: 'ada@example.com' } })
}

t.test('the TypeScript SDK, packed and installed from its tarball, runs a worker with plain node', async (t) => {
  // --ignore-scripts: prepack would rebuild dist/ under the other test files that import it;
  // `npm ci` (the root's postinstall) built the dist/ packed here.
  const packed = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', outside], {
    cwd: join(repoRoot, 'sdk/typescript'),
    env: plainEnv,
  })
  const [pack] = JSON.parse(packed.stdout) as Array<{ filename: string; files: Array<{ path: string }> }>
  const files = pack!.files.map((f) => f.path)
  t.ok(files.includes('dist/index.js') && files.includes('dist/index.d.ts'), 'the tarball holds the JavaScript and its declarations')
  t.same(
    files.filter((f) => !f.startsWith('dist/') && f !== 'README.md' && f !== 'package.json'),
    [],
    'and nothing of the repository besides (no sources, scripts or OpenAPI document)',
  )

  const app = join(outside, 'ts-app')
  await mkdir(app)
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'team-worker', private: true, type: 'module' }))
  // --offline: the SDK depends on nothing, so installing it needs no registry.
  await run('npm', ['install', '--offline', '--no-audit', '--no-fund', join(outside, pack!.filename)], { cwd: app, env: plainEnv })
  const installed = JSON.parse(await readFile(join(app, 'node_modules/@jobsvc/sdk/package.json'), 'utf8'))
  t.equal(installed.version, SDK_VERSION, 'SDK_VERSION is the package version')
  t.notOk(installed.private, 'the package is publishable')
  t.type(installed.license, 'string', 'with a license field')
  t.same(installed.dependencies ?? {}, {}, 'with no runtime dependency')
  t.same(
    Object.keys(installed.scripts ?? {}).filter((s) => ['preinstall', 'install', 'postinstall', 'prepare'].includes(s)),
    [],
    'and no script that runs when a team installs it',
  )

  // The declarations resolve from the installed package (with this repository's compiler and Node
  // types, as a team would have its own) and type the answers.
  await writeFile(
    join(app, 'typed.ts'),
    `import { JobsvcClient, SDK_VERSION, type Job } from '@jobsvc/sdk'

const client = new JobsvcClient({ baseUrl: 'http://127.0.0.1:8080', apiKey: 'sv_test_sk_x' })
const job: Promise<Job> = client.jobs.get('job_1')
const version: string = SDK_VERSION
// @ts-expect-error the job's states are the API's
const state: Job['state'] = 'no-such-state'
void [job, version, state]
`,
  )
  const tsc = [join(repoRoot, 'node_modules/typescript/bin/tsc'), '--noEmit', '--strict', '--module', 'nodenext', '--target', 'es2022']
  const types = ['--types', 'node', '--typeRoots', join(repoRoot, 'node_modules/@types')]
  const checked = await run('node', [...tsc, ...types, 'typed.ts'], { cwd: app, env: plainEnv }).then(
    () => '',
    (err: { stdout: string }) => err.stdout,
  )
  t.equal(checked, '', 'TypeScript finds the package’s declarations')

  await writeFile(
    join(app, 'worker.mjs'),
    `import { JobsvcClient, Worker, SDK_VERSION } from '@jobsvc/sdk'

const client = new JobsvcClient({ baseUrl: process.env.JOBSVC_URL, apiKey: process.env.JOBSVC_API_KEY })
const worker = new Worker({ client, queues: ['installed-ts'], handlers: { 'send-email': async (job) => ({ sent: job.payload.to }) } })
await worker.start()
console.log('worker of @jobsvc/sdk', SDK_VERSION, 'started')
process.once('SIGTERM', () => void worker.stop())
`,
  )
  const created = await createJob('installed-ts')
  const { job, code, output } = await runWorkerUntil(t, h, created.body.id, ['node', 'worker.mjs'], app, {
    JOBSVC_URL: h.url,
    JOBSVC_API_KEY: h.apiKey,
  })
  t.equal(job.attempt, 1, 'the worker ran the job and acked it succeeded')
  t.equal(code, 0, `and stopped on SIGTERM${code === 0 ? '' : `:\n${output()}`}`)
  t.match(output(), `worker of @jobsvc/sdk ${SDK_VERSION} started`, 'the installed package’s SDK_VERSION')
})

t.test('the Python SDK, built from its pyproject.toml, runs a worker that long-polls 30 s', async (t) => {
  // Built by setuptools from pyproject.toml, as `pip install` builds it, into a folder put on
  // PYTHONPATH. Not pip itself: with setuptools before 70.1 it needs the `wheel` package, which
  // this machine's Python lacks and an offline test cannot fetch. The build writes into the
  // source folder (build/, *.egg-info), hence a copy outside the checkout.
  const source = join(outside, 'py-source')
  await cp(join(repoRoot, 'sdk/python'), source, { recursive: true, filter: (path) => !/\/(tests|__pycache__|build)$|\.egg-info$/.test(path) })
  const site = join(outside, 'py-site')
  await mkdir(site)
  const build = [
    '-W',
    'ignore',
    '-c',
    'import setuptools; setuptools.setup()',
    '--quiet',
    'egg_info',
    '--egg-base',
    site,
    'build_py',
    '--build-lib',
    site,
  ]
  await run('python3', build, { cwd: source, env: plainEnv })
  await t.resolves(access(join(site, 'jobsvc/py.typed')), 'py.typed ships in the package, so type checkers read its hints')

  const app = join(outside, 'py-app')
  await mkdir(app)
  await writeFile(
    join(app, 'worker.py'),
    `import importlib.metadata
import os

import jobsvc

print("jobsvc", jobsvc.__version__, "installed as", importlib.metadata.version("jobsvc"), flush=True)
client = jobsvc.Client(os.environ["JOBSVC_URL"], os.environ["JOBSVC_API_KEY"])
worker = jobsvc.Worker(client, queues=["installed-py"], handlers={"send-email": lambda job, ctx: {"sent": job["payload"]["to"]}})
worker.run()
`,
  )
  const proxy = await faultyProxy(t, h.url, () => 'pass')
  const created = await createJob('installed-py')
  const { job, code, output } = await runWorkerUntil(t, h, created.body.id, ['python3', 'worker.py'], app, {
    JOBSVC_URL: proxy.url,
    JOBSVC_API_KEY: h.apiKey,
    PYTHONPATH: site,
    PYTHONDONTWRITEBYTECODE: '1',
  })
  t.equal(job.attempt, 1, 'the worker ran the job and acked it succeeded')
  t.equal(code, 0, `and stopped on SIGTERM${code === 0 ? '' : `:\n${output()}`}`)
  const pyproject = await readFile(join(repoRoot, 'sdk/python/pyproject.toml'), 'utf8')
  const version = /^version = "([^"]+)"/m.exec(pyproject)![1]
  t.match(output(), `jobsvc ${version} installed as ${version}`, 'jobsvc.__version__ is pyproject.toml’s version')
  const polls = proxy.seen.filter((r) => r.path === '/jobsvc/v1/workers/poll')
  t.ok(polls.length > 0, 'the worker polled')
  t.same(
    polls.map((p) => (p.body as { wait_seconds?: number }).wait_seconds),
    polls.map(() => 30),
    'every poll asked to wait 30 s, the service’s longest',
  )
})
