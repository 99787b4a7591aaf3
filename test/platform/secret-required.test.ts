import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { pino } from 'pino'
import t from 'tap'
import * as api from '../../services/roles/api/index.ts'
import { openRuntime } from '../../services/infrastructure/runtime.ts'
import { eventually, httpRequest, isolatedNames, removeIsolated, repoRoot, startHarness, testConfig, type HttpResponse } from '../support/harness.ts'
import { freshEmail, freshIp, newVerifiedUser, sessionFrom, startPlatformHarness, totpCode } from '../support/platform.ts'
import { startSmtpSink, tokenFromMail } from '../support/smtp-sink.ts'

/**
 * JOBSVC_SECRET (CONTRACT.md): no process runs on a throw-away key. Without it the service, the
 * command line and replay refuse to start, unless the development mode (`--dev`, which the npm
 * scripts pass) keeps a generated secret in a local file and reuses it. A TOTP secret sealed
 * under another secret is a clear 409, never a 500.
 */

const run = promisify(execFile)
/** The tsx loader by absolute URL, so the entry points can run with any working directory. */
const tsx = import.meta.resolve('tsx')
const entry = (name: string) => join(repoRoot, 'services', 'roles', name)

/** The test runner's environment without JOBSVC_SECRET (it may carry one). */
function envWithoutSecret(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, LOG_LEVEL: 'info', PORT: '0', ...extra }
  delete env.JOBSVC_SECRET
  return env
}

interface Started {
  url: string
  output: () => string
  stop(): Promise<void>
}

/** Runs services/roles/main.ts as a process in `cwd`; resolves on its ready line, rejects if it exits first. */
function startService(env: NodeJS.ProcessEnv, cwd: string, args: string[] = []): Promise<Started> {
  const child: ChildProcess = spawn(process.execPath, ['--import', tsx, entry('main.ts'), ...args], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout!.on('data', (d) => (out += String(d)))
  child.stderr!.on('data', (d) => (out += String(d)))
  const stop = () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve()
      child.once('exit', () => resolve())
      child.kill('SIGTERM')
    })
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void stop()
      reject(new Error(`the service did not start within 30 s:\n${out}`))
    }, 30_000)
    child.stdout!.on('data', () => {
      const m = /"msg":"jobsvc listening on (http:\/\/[^"]+)/.exec(out)
      if (m) {
        clearTimeout(timer)
        resolve({ url: m[1]!, output: () => out, stop })
      }
    })
    child.once('exit', (code) => {
      clearTimeout(timer)
      reject(Object.assign(new Error(`the service exited with ${code}:\n${out}`), { exitCode: code, output: out }))
    })
  })
}

/** Runs one of the command-line entry points to its end. */
async function runEntry(
  name: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  cwd: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', tsx, entry(name), ...args], { cwd, env, timeout: 60_000 })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string }
    return { code: e.code, stdout: e.stdout, stderr: e.stderr }
  }
}

const missingSecret = /JOBSVC_SECRET is not set/

t.test('without JOBSVC_SECRET the service, the command line and replay refuse to start, with one line', async (t) => {
  const names = isolatedNames(import.meta.filename, '_nosecret')
  t.teardown(() => removeIsolated(names))
  const env = envWithoutSecret({ JOBSVC_NAMESPACE: names.namespace, DATABASE_URL: names.databaseUrl })

  // As docker-compose and supervisors run it: no --dev, so no development mode.
  const started = await startService(env, repoRoot).then(
    async (svc) => {
      await svc.stop()
      return { exitCode: null, output: svc.output() }
    },
    (err: { exitCode?: number; output?: string }) => ({ exitCode: err.exitCode ?? null, output: err.output ?? String(err) }),
  )
  t.equal(started.exitCode, 1, `the service exits with 1 instead of starting (${started.output})`)
  t.match(started.output, /^jobsvc failed to start: JOBSVC_SECRET is not set[^\n]*\n$/, 'one line on stderr, naming the variable')
  t.match(started.output, /openssl rand -hex 32/, 'and how to make one')
  t.match(started.output, /npm start/, 'and the development mode')

  const cli = await runEntry('cli.ts', ['project', 'create', '--name', 'nosecret'], env, repoRoot)
  t.equal(cli.code, 2, 'the command line exits with 2, its code for a configuration error')
  t.match(cli.stderr, missingSecret)
  t.equal(cli.stdout, '', 'and creates nothing')
  const replay = await runEntry('replay.ts', [], env, repoRoot)
  t.equal(replay.code, 1, 'replay exits with 1')
  t.match(replay.stderr, missingSecret)
})

t.test('development mode: a generated secret in a 0600 file of the working directory, reused after a restart', async (t) => {
  const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
  t.equal(pkg.scripts.start, 'tsx services/roles/main.ts --dev', 'npm start runs the development mode')
  t.equal(pkg.scripts.cli, 'tsx services/roles/cli.ts --dev', 'npm run cli shares it')
  t.equal(pkg.scripts.replay, 'tsx services/roles/replay.ts --dev', 'npm run replay shares it')
  t.notMatch(readFileSync(join(repoRoot, 'docker-compose.yml'), 'utf8'), /--dev/, 'docker-compose does not')

  const names = isolatedNames(import.meta.filename, '_dev')
  t.teardown(() => removeIsolated(names))
  const smtp = await startSmtpSink(t)
  const cwd = mkdtempSync(join(tmpdir(), 'jobsvc-dev-'))
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }))
  const env = envWithoutSecret({ JOBSVC_NAMESPACE: names.namespace, DATABASE_URL: names.databaseUrl, SMTP_URL: smtp.url })
  const secretFile = join(cwd, '.jobsvc-dev-secret')

  let svc = await startService(env, cwd, ['--dev'])
  t.teardown(() => svc.stop())
  t.match(svc.output(), /development mode/i, 'the log says it runs in development mode')
  const mode = statSync(secretFile).mode & 0o777
  t.equal(mode.toString(8), '600', 'the secret file is readable by its owner only')
  const secret = readFileSync(secretFile, 'utf8')
  t.match(secret, /^[0-9a-f]{64}\n$/, '32 random bytes, hex')

  const anon = (url: string, path: string, body: unknown, jwt?: string) =>
    httpRequest(url, null, 'POST', path, body, jwt === undefined ? {} : { authorization: `Bearer ${jwt}` })
  const email = freshEmail('dev')
  const password = `pw-${randomBytes(8).toString('hex')}`
  t.equal((await anon(svc.url, '/platform/v1/auth/signup', { email, password, accept_terms: true })).status, 201)
  const verified = await anon(svc.url, '/platform/v1/auth/verify', { token: tokenFromMail(await smtp.next(email, /verify/i)) })
  t.equal(verified.status, 200, JSON.stringify(verified.body))
  const jwt = sessionFrom(await anon(svc.url, '/platform/v1/auth/login', { email, password }))
  const setup = await anon(svc.url, '/platform/v1/auth/2fa/setup', {}, jwt)
  t.equal(setup.status, 200, JSON.stringify(setup.body))
  const enabled = await anon(svc.url, '/platform/v1/auth/2fa/verify', { code: totpCode(setup.body.secret) }, jwt)
  t.equal(enabled.status, 200, JSON.stringify(enabled.body))

  await svc.stop()
  svc = await startService(env, cwd, ['--dev'])
  t.equal(readFileSync(secretFile, 'utf8'), secret, 'the restart kept the file')
  const me = await httpRequest(svc.url, null, 'GET', '/platform/v1/auth/me', undefined, { authorization: `Bearer ${jwt}` })
  t.equal(me.status, 200, `a session from before the restart still works (${JSON.stringify(me.body)})`)
  // The next step's code: the current one was spent on 2fa/verify.
  const login = await anon(svc.url, '/platform/v1/auth/login', { email, password, totp_code: totpCode(setup.body.secret, new Date(), 1) })
  t.equal(login.status, 200, `a TOTP login after the restart works (${JSON.stringify(login.body)})`)

  const cli = await runEntry('cli.ts', ['--dev', 'project', 'create', '--name', 'dev'], env, cwd)
  t.equal(cli.code, 0, `npm run cli works with the same environment (${cli.stderr})`)
  const created = JSON.parse(cli.stdout.trim().split('\n').at(-1)!) as { api_key: string }
  t.equal((await httpRequest(svc.url, created.api_key, 'GET', '/jobsvc/v1/jobs')).status, 200, 'its key works on the service')
  const replay = await runEntry('replay.ts', ['--dev'], { ...env, LOG_LEVEL: 'silent' }, cwd)
  t.equal(replay.code, 0, `npm run replay too (${replay.stderr})`)
  t.equal(readFileSync(secretFile, 'utf8'), secret, 'all of them read the same file')

  const explicit = await runEntry('cli.ts', ['--dev', 'project', 'create', '--name', 'explicit'], { ...env, JOBSVC_SECRET: 'x'.repeat(8) }, cwd)
  t.equal(explicit.code, 2, 'a JOBSVC_SECRET that is set is used, and checked, even with --dev')
  t.match(explicit.stderr, /JOBSVC_SECRET/)
})

t.test('a TOTP secret sealed under another JOBSVC_SECRET: 409 totp_secret_unreadable, never 500', async (t) => {
  const h = await startPlatformHarness(t, import.meta.filename)
  // A second API on the same install with another secret, as after a secret was lost or changed.
  const other = await openRuntime(testConfig({ ...h.config, secret: `another-${h.config.secret}` }), pino({ level: 'silent' }), 'jobsvc-test-other')
  t.teardown(() => other.close())
  const role = await api.start(other)
  t.teardown(role.stop)
  const onOther = (path: string, body: unknown, jwt?: string): Promise<HttpResponse> =>
    httpRequest(role.address, null, 'POST', path, body, {
      'x-forwarded-for': freshIp(),
      ...(jwt === undefined ? {} : { authorization: `Bearer ${jwt}` }),
    })
  const isUnreadable = (res: HttpResponse, what: string) => {
    t.equal(res.status, 409, `${what}: 409 (${JSON.stringify(res.body)})`)
    t.equal(res.body?.error?.code, 'totp_secret_unreadable', `${what}: code totp_secret_unreadable`)
  }

  const u = await newVerifiedUser(h)
  const setup = await h.platform('POST', '/platform/v1/auth/2fa/setup', undefined, { jwt: u.jwt })
  t.equal((await h.platform('POST', '/platform/v1/auth/2fa/verify', { code: totpCode(setup.body.secret) }, { jwt: u.jwt })).status, 200)
  const codes = (await h.platform('POST', '/platform/v1/auth/2fa/recovery/regenerate', undefined, { jwt: u.jwt })).body.codes as string[]

  isUnreadable(
    await onOther('/platform/v1/auth/login', { email: u.email, password: u.password, totp_code: totpCode(setup.body.secret, new Date(), 1) }),
    'a TOTP login',
  )
  const recovered = await onOther('/platform/v1/auth/login', { email: u.email, password: u.password, recovery_code: codes[0] })
  t.equal(recovered.status, 200, `a recovery code still logs in (${JSON.stringify(recovered.body)})`)
  isUnreadable(
    await onOther(
      '/platform/v1/auth/2fa/disable',
      { password: u.password, code: totpCode(setup.body.secret, new Date(), 1) },
      sessionFrom(recovered),
    ),
    '2fa/disable',
  )

  // A secret staged by 2fa/setup, then confirmed where it cannot be read.
  const v = await newVerifiedUser(h)
  const staged = await h.platform('POST', '/platform/v1/auth/2fa/setup', undefined, { jwt: v.jwt })
  t.equal(staged.status, 200)
  const vOnOther = sessionFrom(await onOther('/platform/v1/auth/login', { email: v.email, password: v.password }))
  isUnreadable(await onOther('/platform/v1/auth/2fa/verify', { code: totpCode(staged.body.secret) }, vOnOther), '2fa/verify')
  const again = await onOther('/platform/v1/auth/2fa/setup', {}, vOnOther)
  t.equal(again.status, 200, '2fa/setup again replaces it')
  t.equal(
    (await onOther('/platform/v1/auth/2fa/verify', { code: totpCode(again.body.secret) }, vOnOther)).status,
    200,
    'and the new one is confirmed',
  )

  // Not a failed attempt: ten more of them lock nothing.
  for (let i = 0; i < 10; i++) {
    isUnreadable(
      await onOther('/platform/v1/auth/login', { email: u.email, password: u.password, totp_code: totpCode(setup.body.secret, new Date(), 1) }),
      `TOTP login ${i + 2}`,
    )
  }
  const home = await h.platform('POST', '/platform/v1/auth/login', {
    email: u.email,
    password: u.password,
    totp_code: totpCode(setup.body.secret, new Date(), 1),
  })
  t.equal(home.status, 200, `with the secret it was sealed under, the TOTP login works (${JSON.stringify(home.body)})`)
})

t.test('an idempotent answer sealed under another JOBSVC_SECRET is refused, not run again', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'], suffix: '_idem' })
  const other = await openRuntime(testConfig({ ...h.config, secret: `another-${h.config.secret}` }), pino({ level: 'silent' }), 'jobsvc-test-other')
  t.teardown(() => other.close())
  const role = await api.start(other)
  t.teardown(role.stop)
  const create = (url: string) =>
    httpRequest(url, h.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'sealed', payload: { n: 1 } }, { 'idempotency-key': 'sealed-1' })

  const first = await create(h.url)
  t.equal(first.status, 201, JSON.stringify(first.body))
  const replay = await create(h.url)
  t.same([replay.status, replay.headers.get('idempotent-replay'), replay.body.id], [201, 'true', first.body.id], 'replayed where it was sealed')
  const elsewhere = await create(role.address)
  t.equal(elsewhere.status, 409, `refused where it cannot be unsealed (${JSON.stringify(elsewhere.body)})`)
  t.equal(elsewhere.body?.error?.code, 'idempotency_key_reuse')
  const jobs = await eventually(
    async () => {
      const list = await httpRequest(h.url, h.apiKey, 'GET', '/jobsvc/v1/jobs')
      return list.body?.data?.length > 0 ? (list.body.data as Array<{ id: string }>) : null
    },
    15_000,
    'the job list',
  )
  t.same(
    jobs.map((j) => j.id),
    [first.body.id],
    'and no second job was created',
  )
})
