import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { basename } from 'node:path'
import { fileURLToPath } from 'node:url'
import { pino } from 'pino'
import { dropDatabase } from '../../projections/database.ts'
import { connectNats } from '../../streams/connection.ts'
import { deleteNamespace } from '../../streams/definitions.ts'
import * as api from '../../services/roles/api/index.ts'
import { tunablesSchema, type Config, type Tunables } from '../../services/infrastructure/config.ts'
import { resolvePlans } from '../../domain/plans.ts'
import * as projector from '../../services/roles/projector/index.ts'
import { createProject } from '../../services/use-cases/projects/project-service.ts'
import { openRuntime, type Runtime } from '../../services/infrastructure/runtime.ts'
import * as scheduler from '../../services/roles/scheduler/index.ts'
import * as dispatcher from '../../services/roles/dispatcher/index.ts'

export const repoRoot = fileURLToPath(new URL('../../', import.meta.url))

/** Minimal view of tap's Test used here, so support code does not depend on tap's types. */
export interface TestLike {
  teardown(fn: () => unknown): void
}

/** The secret of every install a test starts, in this process or in spawned ones. */
export const testSecret = 'test-secret-test-secret-test-secret'

const runId = process.env.JOBSVC_TEST_RUN ?? randomBytes(3).toString('hex')

/**
 * A namespace and database of this test file's own (`jobsvc_t_<run>_<file>`), so files run in
 * parallel, and beside other runs on the shared NATS and Postgres, without touching each other.
 */
export function isolatedNames(file: string, suffix = ''): { namespace: string; databaseUrl: string } {
  const slug = basename(file)
    .replace(/\.test\.ts$/, '')
    .replace(/[^a-z0-9]+/gi, '_')
    .toLowerCase()
    .slice(0, 30)
  const namespace = `jobsvc_t_${runId}_${slug}${suffix}`
  return { namespace, databaseUrl: `postgres://postgres@127.0.0.1:5432/${namespace}` }
}

export function testConfig(overrides: Partial<Config> & { namespace: string; databaseUrl: string }, tunables: Partial<Tunables> = {}): Config {
  return {
    port: 0,
    host: '127.0.0.1',
    natsUrl: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
    replicas: 1,
    metricsPort: null,
    metricsToken: null,
    otlpEndpoint: null,
    secret: testSecret,
    devSecretFile: null,
    auditSigningKey: null,
    smtpUrl: null,
    publicUrl: null,
    trustProxy: false,
    webhookAllowHosts: [],
    webhookAllowLoopback: false,
    logLevel: 'silent',
    logFormat: 'json',
    plans: resolvePlans(),
    billingWebhookSecret: null,
    v1Sunset: null,
    emailWebhookSecret: null,
    ...overrides,
    tunables: tunablesSchema.parse(tunables),
  }
}

/** The variables that point a separate process (the service, the CLI, replay) at a harness's install. */
export function installEnv(config: Pick<Config, 'namespace' | 'databaseUrl' | 'secret'>): Record<string, string> {
  return { JOBSVC_NAMESPACE: config.namespace, DATABASE_URL: config.databaseUrl, JOBSVC_SECRET: config.secret }
}

/** Removes a namespace's streams and its database; registered as a teardown right after setup. */
export async function removeIsolated(names: { namespace: string; databaseUrl: string }): Promise<void> {
  const nats = await connectNats(process.env.NATS_URL ?? 'nats://127.0.0.1:4222', 'jobsvc-test-cleanup')
  try {
    await deleteNamespace(nats.jsm, names.namespace)
  } finally {
    await nats.nc.close()
  }
  await dropDatabase(names.databaseUrl)
}

export interface HttpResponse<T = any> {
  status: number
  headers: Headers
  body: T
}

export interface Harness {
  url: string
  apiKey: string
  projectId: string
  runtime: Runtime
  config: Config
  request<T = any>(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<HttpResponse<T>>
  /** A second project in the same install, for isolation tests. */
  newProject(): Promise<{ projectId: string; apiKey: string }>
  stopRole(role: Role): Promise<void>
  startRole(role: 'projector' | 'scheduler' | 'dispatcher'): Promise<void>
}

export type Role = 'api' | 'projector' | 'scheduler' | 'dispatcher'

/** Sends one request with the project's key unless `authorization` is given in headers. */
export async function httpRequest<T = any>(
  url: string,
  apiKey: string | null,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<HttpResponse<T>> {
  const h: Record<string, string> = { ...headers }
  if (apiKey !== null && !('authorization' in h)) h.authorization = `Bearer ${apiKey}`
  let payload: string | undefined
  if (body !== undefined) {
    payload = typeof body === 'string' ? body : JSON.stringify(body)
    if (!('content-type' in h)) h['content-type'] = 'application/json'
  }
  const res = await fetch(url + path, { method, headers: h, body: payload })
  const text = await res.text()
  let parsed: unknown = text
  try {
    parsed = text === '' ? null : JSON.parse(text)
  } catch {
    // leave non-JSON bodies as text
  }
  return { status: res.status, headers: res.headers, body: parsed as T }
}

/**
 * Starts the service in this process (all roles by default) against the real NATS and Postgres,
 * in an isolated namespace and database, with one project and its API key.
 */
export async function startHarness(
  t: TestLike,
  file: string,
  options: { roles?: Role[]; tunables?: Partial<Tunables>; suffix?: string; config?: Partial<Config> } = {},
): Promise<Harness> {
  const names = isolatedNames(file, options.suffix)
  const config = testConfig(
    { ...options.config, ...names },
    { reaper_interval_ms: 200, scheduler_interval_ms: 100, validate_responses: true, ...options.tunables },
  )
  t.teardown(() => removeIsolated(names))
  const runtime = await openRuntime(config, pino({ level: 'silent' }), 'jobsvc-test')
  t.teardown(() => runtime.close())
  const roles = new Set(options.roles ?? ['api', 'projector', 'scheduler'])
  const stops = new Map<Role, () => Promise<void>>()
  const startRole = async (role: 'projector' | 'scheduler' | 'dispatcher') => {
    const starters = { projector: projector.start, scheduler: scheduler.start, dispatcher: dispatcher.start }
    stops.set(role, await starters[role](runtime))
  }
  const stopRole = async (role: Role) => {
    const stop = stops.get(role)
    stops.delete(role)
    await stop?.()
  }
  t.teardown(async () => {
    for (const role of ['api', 'dispatcher', 'scheduler', 'projector'] as const) await stopRole(role)
  })
  if (roles.has('projector')) await startRole('projector')
  if (roles.has('scheduler')) await startRole('scheduler')
  if (roles.has('dispatcher')) await startRole('dispatcher')
  let url = ''
  if (roles.has('api')) {
    const role = await api.start(runtime)
    url = role.address
    stops.set('api', role.stop)
  }
  const { project, apiKey } = await createProject(runtime, { name: 'test', plan: 'business', ownerEmail: null, keyEnvironment: 'test' })
  return {
    url,
    apiKey,
    projectId: project.id,
    runtime,
    config,
    request: (method, path, body, headers) => httpRequest(url, apiKey, method, path, body, headers),
    async newProject() {
      const created = await createProject(runtime, { name: 'other', plan: 'free', ownerEmail: null, keyEnvironment: 'test' })
      return { projectId: created.project.id, apiKey: created.apiKey }
    },
    stopRole,
    startRole,
  }
}

/** Runs `fn` with the service clock (`runtime.now`) `ms` ahead of real time, then puts it back. */
export async function withClockShifted<T>(runtime: { now: () => Date }, ms: number, fn: () => Promise<T>): Promise<T> {
  const real = runtime.now
  runtime.now = () => new Date(Date.now() + ms)
  try {
    return await fn()
  } finally {
    runtime.now = real
  }
}

/**
 * The promise's value, or 'pending' if it has not settled while the guard ran: a generous bound
 * that tells "never answered" from "answered", not a timing assertion.
 */
export async function answerWithin<T>(promise: Promise<T>, guardMs = 15_000): Promise<T | 'pending'> {
  let timer: NodeJS.Timeout | undefined
  const guard = new Promise<'pending'>((r) => (timer = setTimeout(() => r('pending'), guardMs)))
  try {
    return await Promise.race([promise, guard])
  } finally {
    clearTimeout(timer)
  }
}

/** Polls `check` until it returns a truthy value (state, not time), failing after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T | null | undefined | false>, timeoutMs = 15_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const value = await check()
      if (value) return value
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

export interface SpawnedService {
  url: string
  process: ChildProcess
  output: () => string
  stop(signal?: NodeJS.Signals): Promise<void>
}

/**
 * Runs `services/roles/main.ts` as a separate process, as `npm start` would, and resolves when it logs
 * its ready line. `from` runs another copy of the service (`command` in `cwd`, with only
 * `baseEnv` beneath `env`), as a production install in a folder of its own runs it.
 */
export async function spawnService(
  env: Record<string, string>,
  args: string[] = [],
  from: { cwd: string; command: string[]; baseEnv: NodeJS.ProcessEnv } = {
    cwd: repoRoot,
    command: ['node', '--import', 'tsx', 'services/roles/main.ts'],
    baseEnv: process.env,
  },
): Promise<SpawnedService> {
  const [node, ...nodeArgs] = from.command
  const child = spawn(node === 'node' ? process.execPath : node!, [...nodeArgs, ...args], {
    cwd: from.cwd,
    env: { ...from.baseEnv, PORT: '0', LOG_LEVEL: 'info', JOBSVC_SECRET: testSecret, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  child.stdout!.on('data', (d) => (out += String(d)))
  child.stderr!.on('data', (d) => (out += String(d)))
  const url = await new Promise<string>((resolve, reject) => {
    // A process that never got ready is killed, so that it cannot outlive the test. The bound is
    // generous: on two cores shared with the rest of the suite a start (tsx compiling the service,
    // NATS and Postgres set-up) has taken 25-44 s, and how fast it starts is not what tests check.
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`service did not start:\n${out}`))
    }, 90_000)
    const onData = () => {
      const m = /"msg":"jobsvc (?:listening on (http:\/\/[^"]+)|ready)/.exec(out)
      if (m) {
        clearTimeout(timer)
        resolve(m[1] ?? '')
      }
    }
    child.stdout!.on('data', onData)
    child.once('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`service exited with ${code}:\n${out}`))
    })
  })
  return {
    url,
    process: child,
    output: () => out,
    stop: (signal = 'SIGTERM') =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve()
        child.once('exit', () => resolve())
        child.kill(signal)
      }),
  }
}
