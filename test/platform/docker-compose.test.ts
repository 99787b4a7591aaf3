import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse as parseYaml } from 'yaml'
import { environmentSchema } from '../../services/infrastructure/config.ts'
import { exactExpectationsSince, isVersionBefore } from '../../services/infrastructure/write-guard.ts'
import { repoRoot } from '../support/harness.ts'

/**
 * docker-compose.yml ships no fixed secret and does not publish NATS or Postgres beyond the
 * compose network (both run without authentication there). Read as text and parsed as YAML
 * (with merge keys, as docker compose reads it): docker compose is not on every machine the
 * tests run on, so `docker compose config` runs only where it is.
 */
const compose = readFileSync(join(repoRoot, 'docker-compose.yml'), 'utf8')

/** The lines of one service under `services:`, up to the next service or top-level key. */
function serviceBlock(name: string): string {
  const lines = compose.split('\n')
  const start = lines.indexOf(`  ${name}:`)
  if (start < 0) throw new Error(`no service ${name} in docker-compose.yml`)
  const rest = lines.slice(start + 1)
  const end = rest.findIndex((line) => line.trim() !== '' && !/^ {4}/.test(line))
  return rest.slice(0, end < 0 ? undefined : end).join('\n')
}

t.test('docker-compose: no fixed secret, and only the API published', async (t) => {
  t.notMatch(serviceBlock('nats'), /^\s+ports:/m, 'NATS has no published ports')
  t.notMatch(serviceBlock('postgres'), /^\s+ports:/m, 'Postgres has no published ports')
  const service = serviceBlock('jobsvc')
  t.match(service, /^\s+ports:\s*\n\s+- "8080:8080"/m, 'the API is published')
  const secret = /^\s+JOBSVC_SECRET:\s*(.+)$/m.exec(service)?.[1]?.trim()
  t.match(secret, /^"?\$\{JOBSVC_SECRET:\?[^}]+\}"?$/, `JOBSVC_SECRET comes from the environment or .env and is required (${secret})`)
  t.notMatch(compose, /change-me/i, 'no placeholder secret anywhere')
  t.notMatch(service, /--dev\b/, 'the service does not run in the development mode')
})

interface ComposeService {
  image?: string
  build?: string
  restart?: string
  healthcheck?: { test: string[]; interval?: string; timeout?: string; retries?: number; start_period?: string }
  command?: string[]
  profiles?: string[]
  environment?: Record<string, string>
  ports?: string[]
  volumes?: string[]
  depends_on?: Record<string, { condition: string }>
}

/** The file as docker compose reads it: YAML with merge keys (`<<: *anchor`). */
const services = (parseYaml(compose, { merge: true }) as { services: Record<string, ComposeService> }).services
const clusterNodes = ['nats-1', 'nats-2', 'nats-3']

/** What `docker compose --profile cluster` adds to the default stack. */
const inProfile = Object.entries(services).filter(([, s]) => s.profiles?.includes('cluster'))
const roleOf = (s: ComposeService) => s.command?.[s.command.indexOf('--role') + 1]

t.test('docker-compose: the "cluster" profile, which `docker compose up` does not start', async (t) => {
  t.same(
    Object.entries(services)
      .filter(([, s]) => s.profiles === undefined)
      .map(([name]) => name)
      .sort(),
    ['jobsvc', 'nats', 'postgres'],
    'only the single-node stack has no profile',
  )
  t.same(
    inProfile.map(([name]) => name).sort(),
    ['api-1', 'api-2', 'dispatcher', 'nats-1', 'nats-2', 'nats-3', 'projector', 'proxy', 'scheduler'],
    'the profile has three NATS nodes, two APIs, one of each background role and the proxy',
  )
  t.ok(
    inProfile.every(([, s]) => s.profiles!.length === 1),
    'none of it is in another profile',
  )
})

t.test('docker-compose cluster: three NATS nodes routed to each other as one JetStream cluster', async (t) => {
  for (const name of clusterNodes) {
    const command = services[name]!.command!
    const flag = (f: string) => command[command.indexOf(f) + 1]
    t.ok(command.includes('-js'), `${name} runs JetStream`)
    t.equal(flag('-n'), name, `${name} has its own server name`)
    t.equal(flag('--cluster_name'), 'jobsvc', `${name} is in the cluster`)
    t.equal(flag('--cluster'), 'nats://0.0.0.0:6222', `${name} listens for routes`)
    t.same(
      flag('--routes')!.split(',').sort(),
      clusterNodes
        .filter((n) => n !== name)
        .map((n) => `nats://${n}:6222`)
        .sort(),
      `${name} routes to the other two`,
    )
    t.match(services[name]!.volumes, [`${name}-data:/data`], `${name} has its own store`)
    t.ok(command.includes('-m'), `${name} serves the monitoring port its health check asks`)
    const version = /^nats:(\d+\.\d+\.\d+)-alpine$/.exec(services[name]!.image ?? '')?.[1]
    t.notOk(
      isVersionBefore(version ?? '0.0.0', exactExpectationsSince),
      `${name}: nats-server ${version}, whose replicated streams check expected sequences exactly`,
    )
  }
})

t.test('docker-compose cluster: the roles, their commands and environment', async (t) => {
  const processes = inProfile.filter(([, s]) => s.command?.includes('--role'))
  t.same(processes.map(([, s]) => roleOf(s)).sort(), ['api', 'api', 'dispatcher', 'projector', 'scheduler'], 'two APIs and one of each other role')
  for (const [name, s] of processes) {
    t.same(s.command!.slice(0, 4), ['node', '--import', 'tsx', 'services/roles/main.ts'], `${name}: node is PID 1 and gets SIGTERM`)
    t.equal(s.image, services.jobsvc!.image, `${name}: the image of the single-node stack`)
    t.notOk(s.command!.includes('--dev'), `${name}: not the development mode`)
    const env = s.environment!
    t.equal(env.JOBSVC_REPLICAS, '3', `${name}: three replicas`)
    t.same(
      env.NATS_URL!.split(','),
      clusterNodes.map((n) => `nats://${n}:4222`),
      `${name}: NATS_URL lists the three nodes`,
    )
    t.match(env.JOBSVC_SECRET, /^\$\{JOBSVC_SECRET:\?[^}]+\}$/, `${name}: the secret comes from the environment`)
    t.match(env.DATABASE_URL, /@postgres:5432\/jobsvc_cluster$/, `${name}: a database apart from the single-node stack's`)
    t.equal(env.JOBSVC_NAMESPACE, services.jobsvc!.environment!.JOBSVC_NAMESPACE)
    t.same(Object.keys(s.depends_on!).sort(), [...clusterNodes, 'postgres'], `${name} starts after the three NATS nodes and Postgres`)
    if (roleOf(s) === 'api') t.equal(env.TRUST_PROXY, '1', `${name} trusts the one proxy hop`)
  }
})

t.test('docker-compose cluster: only the proxy publishes a port, in front of both APIs', async (t) => {
  t.same(
    inProfile.filter(([, s]) => s.ports !== undefined).map(([name]) => name),
    ['proxy'],
    'nothing else of the profile is published',
  )
  const proxy = services.proxy!
  t.same(proxy.ports, ['8081:8080'], 'beside the single-node API on 8080')
  t.same(Object.keys(proxy.depends_on!).sort(), ['api-1', 'api-2', 'dispatcher', 'projector', 'scheduler'], '`up proxy` starts the whole layout')
  const mount = proxy.volumes!.find((v) => v.endsWith(':/etc/nginx/nginx.conf:ro'))!
  const conf = readFileSync(join(repoRoot, mount.split(':')[0]!), 'utf8')
  t.match(conf, /upstream jobsvc_api \{\s*server api-1:8080;\s*server api-2:8080;\s*\}/, 'the proxy balances over both APIs')
  t.match(conf, /proxy_buffering off;/, 'the progress stream is not buffered')
  t.match(conf, /proxy_read_timeout (\d+)s;/, 'long polls outlive the read timeout')
  t.ok(Number(/proxy_read_timeout (\d+)s;/.exec(conf)?.[1]) > 30, 'a 30 s long poll is not cut')
})

/** The jobsvc processes: the services that run the image. */
const processes = Object.entries(services).filter(([, s]) => s.build !== undefined)
const isApi = (s: ComposeService) => s.command === undefined || roleOf(s) === 'api'

t.test('docker-compose: every service restarts and has a health check; each waits until what it needs is healthy', async (t) => {
  for (const [name, s] of Object.entries(services)) {
    t.equal(s.restart, 'unless-stopped', `${name} restarts unless stopped by hand`)
    t.equal(s.healthcheck?.test[0], 'CMD', `${name} has a health check, run without a shell`)
    for (const [dependency, { condition }] of Object.entries(s.depends_on ?? {})) {
      t.equal(condition, 'service_healthy', `${name} waits for ${dependency} to be healthy`)
    }
  }
})

t.test('docker-compose: the jobsvc processes run the image of the Dockerfile, not npm on a mounted tree', async (t) => {
  t.same(processes.map(([name]) => name).sort(), ['api-1', 'api-2', 'dispatcher', 'jobsvc', 'projector', 'scheduler'])
  for (const [name, s] of processes) {
    t.ok(existsSync(join(repoRoot, s.build!, 'Dockerfile')), `${name} builds ./Dockerfile`)
    t.equal(s.image, 'jobsvc:local', `${name}: one tag for every process`)
    t.notOk(s.volumes, `${name} mounts nothing`)
    t.equal(s.environment?.METRICS_PORT, '9464', `${name} serves /metrics on the port the image exposes`)
    t.same(
      s.healthcheck!.test,
      isApi(s) ? ['CMD', 'node', 'deploy/healthcheck.mjs'] : ['CMD', 'node', 'deploy/healthcheck.mjs', 'metrics'],
      `${name}: ${isApi(s) ? 'the readiness route' : 'NATS and Postgres up, as its /metrics says'}`,
    )
    const unknown = Object.keys(s.environment ?? {}).filter((key) => !(key in environmentSchema.shape))
    t.same(unknown, [], `${name}: only variables of the configuration table`)
  }
  t.same(services.jobsvc!.ports, ['8080:8080'], 'only the API is published; /metrics stays on the compose network')
  t.notMatch(compose, /npm ci|\.\/:\/app/, 'no install on a bind-mounted tree')
})

t.test('docker-compose: a current nats-server in every profile, healthy once JetStream is', async (t) => {
  const nats = Object.entries(services).filter(([, s]) => s.image?.startsWith('nats:'))
  t.same(nats.map(([name]) => name).sort(), ['nats', ...clusterNodes])
  for (const [name, s] of nats) {
    const version = /^nats:(\d+\.\d+\.\d+)-alpine$/.exec(s.image!)?.[1]
    t.ok(version, `${name}: a pinned release, alpine for wget in the health check (${s.image})`)
    t.notOk(isVersionBefore(version ?? '0.0.0', '2.10.0'), `${name}: nats-server ${version} is 2.10 or later`)
    t.ok(s.command!.includes('-js'), `${name} runs JetStream`)
    t.equal(s.command![s.command!.indexOf('-m') + 1], '8222', `${name} serves the monitoring port`)
    t.same(s.healthcheck!.test, ['CMD', 'wget', '-q', '-O', '/dev/null', 'http://127.0.0.1:8222/healthz'], `${name}: /healthz`)
  }
})

const hasDockerCompose = spawnSync('docker', ['compose', 'version'], { encoding: 'utf8' }).status === 0

t.test(
  'docker compose accepts the file with the profile, where it is installed',
  { skip: hasDockerCompose ? false : 'docker compose is not installed here; the checks above read the file' },
  async (t) => {
    const config = spawnSync('docker', ['compose', '--profile', 'cluster', 'config', '--quiet'], {
      cwd: repoRoot,
      encoding: 'utf8',
      env: { ...process.env, JOBSVC_SECRET: 'x'.repeat(64) },
    })
    t.equal(config.status, 0, config.stderr)
  },
)
