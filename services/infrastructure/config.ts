import { randomBytes } from 'node:crypto'
import { existsSync, linkSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs'
import { isIP } from 'node:net'
import { z } from 'zod'
import { plans, type Plan } from '../../domain/project/index.ts'
import { defaultEventsMaxBytes } from '../../streams/definitions.ts'
import { isValidNamespace } from '../../streams/names.ts'
import { resolvePlans, type PlanLimits } from '../../domain/plans.ts'
import { deliveryAttemptTimeoutMs, deliveryRetryWaitsMs } from '../../domain/delivery-policy.ts'
import { defaultMaxPayloadBytes } from '../../domain/job-options.ts'

const planOverridesSchema = z
  .object({
    requests_per_hour: z.number().int().min(0),
    monthly_jobs: z.number().int().min(0),
    overage_cents_per_10k: z.number().min(0).nullable(),
    retention_days: z.number().int().min(1),
    log_bytes_per_hour: z.number().int().min(0),
    max_recurring_schedules: z.number().int().min(0),
    min_cron_interval_seconds: z.number().int().min(1).max(60),
    max_event_consumers: z.number().int().min(0),
    bulk_operation_max_jobs: z.number().int().min(0),
  })
  .partial()
  .strict()

const plansFileSchema = z
  .object(Object.fromEntries(plans.map((plan) => [plan, planOverridesSchema])) as Record<Plan, typeof planOverridesSchema>)
  .partial()
  .strict()

/** An address, an address/prefix, or one of proxy-addr's named ranges. */
function isProxyAddress(entry: string): boolean {
  if (['loopback', 'linklocal', 'uniquelocal'].includes(entry)) return true
  const [address = '', prefix, ...rest] = entry.split('/')
  const family = isIP(address)
  if (family === 0 || rest.length > 0) return false
  return prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128))
}

/**
 * `false`; a number of trusted proxy hops (`0` is false); a comma-separated list of trusted
 * proxy addresses or CIDRs; or `true`, every hop, which takes the left-most `X-Forwarded-For`
 * entry: a client writes that one itself wherever the proxy appends rather than replaces.
 */
const trustProxyValue = z
  .string()
  .trim()
  .transform((v, ctx): boolean | number | string[] => {
    if (v === 'true') return true
    if (v === 'false') return false
    if (/^\d+$/.test(v)) return Number(v) === 0 ? false : Number(v)
    const entries = v.split(',').map((e) => e.trim())
    if (entries.every(isProxyAddress)) return entries
    ctx.addIssue({ code: 'custom', message: 'must be false, true, a number of proxy hops, or a comma-separated list of proxy addresses or CIDRs' })
    return z.NEVER
  })

/** The environment of CONTRACT.md, one key each; nothing else reads process.env. */
export const environmentSchema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8080).describe('HTTP port; 0 picks a free one'),
  HOST: z.string().min(1).default('127.0.0.1').describe('bind address'),
  NATS_URL: z.string().min(1).default('nats://127.0.0.1:4222').describe('NATS server(s), comma-separated'),
  JOBSVC_REPLICAS: z
    .enum(['1', '3'], { message: 'JOBSVC_REPLICAS must be 1 or 3' })
    .default('1')
    .transform(Number)
    .describe('replicas of every stream and KV bucket: 1 on a single NATS server, 3 on a JetStream cluster of three or more'),
  DATABASE_URL: z
    .string()
    .min(1)
    .default('postgres://postgres@127.0.0.1:5432/jobsvc')
    .describe('Postgres for read models; the database is created if absent'),
  JOBSVC_NAMESPACE: z
    .string()
    .default('jobsvc')
    .refine(isValidNamespace, 'JOBSVC_NAMESPACE must be 1-64 of A-Z a-z 0-9 _ -')
    .describe('prefix of every stream, consumer, KV bucket and subject'),
  JOBSVC_SECRET: z
    .string()
    .min(16)
    .optional()
    .describe('key material for JWT signing and encryption at rest, the same in every process of an install; required outside the development mode'),
  JOBSVC_AUDIT_SIGNING_KEY: z
    .string()
    .refine(
      (v) => Buffer.from(v, 'base64').length === 32 && /^[A-Za-z0-9+/]+={0,2}$/.test(v),
      'JOBSVC_AUDIT_SIGNING_KEY must be 32 bytes in base64 (an Ed25519 seed)',
    )
    .optional()
    .describe('the Ed25519 seed (32 bytes, base64) that signs audit checkpoints; unset: derived from JOBSVC_SECRET (docs/audit.md, "Keys")'),
  SMTP_URL: z.string().optional().describe('e-mail transport; unset: e-mails are logged'),
  PUBLIC_URL: z.url().optional().describe('base of links in e-mails and the dashboard origin allowed by CORS; default http://HOST:PORT'),
  TRUST_PROXY: trustProxyValue
    .default(false)
    .describe(
      'whether the client IP comes from X-Forwarded-For: false, a number of trusted proxy hops, a list of trusted proxy addresses, or true (every hop)',
    ),
  WEBHOOK_ALLOW_HOSTS: z.string().default('').describe('host:port list exempt from the public-address rule'),
  JOBSVC_CONFIG: z.string().optional().describe('path of a JSON file overriding plan limits and tunables'),
  METRICS_PORT: z.coerce
    .number()
    .int()
    .min(0)
    .max(65535)
    .optional()
    .describe(
      'port of GET /metrics (Prometheus text format) of this process, whatever its roles, on HOST apart from the API; unset: no metrics endpoint',
    ),
  METRICS_TOKEN: z
    .string()
    .regex(/^[\x21-\x7e]{16,1024}$/, 'METRICS_TOKEN must be 16 to 1024 visible ASCII characters')
    .optional()
    .describe('bearer token every GET /metrics must carry (Authorization: Bearer <token>); unset: none is asked for'),
  OTEL_EXPORTER_OTLP_ENDPOINT: z
    .url()
    .optional()
    .describe("base URL of an OTLP/HTTP collector (spans go to <url>/v1/traces); unset: the service's own spans are not recorded"),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info').describe('pino log level'),
  LOG_FORMAT: z
    .enum(['json', 'pretty'])
    .optional()
    .describe('json (one object per line) or pretty (human-readable); default pretty with --dev on a terminal, json otherwise'),
  JOBSVC_V1_SUNSET: z.iso
    .datetime({ offset: true })
    .optional()
    .describe(
      'when v1 ends (ISO 8601 date-time); set, every v1 answer carries Deprecation, Sunset and Link, and after it every v1 route answers 410',
    ),
  JOBSVC_V1_DEPRECATION: z.iso
    .datetime({ offset: true })
    .optional()
    .describe('when v1 is (or was) deprecated, for the Deprecation header; default 12 months before JOBSVC_V1_SUNSET'),
  JOBSVC_V1_MIGRATION_URL: z.url().optional().describe('the migration notes the Link header points to; required with JOBSVC_V1_SUNSET'),
})

/** Operational knobs with production defaults; JOBSVC_CONFIG may override any of them. */
export const tunablesSchema = z
  .object({
    /**
     * While the log is busy, how long the projector lets a batch gather more messages before it
     * writes it (one transaction per batch): adds at most this much to the read models' lag under
     * load, none on a quiet log, and halves Postgres's CPU per job at 1,500 jobs/s (issue 31). 0: off.
     */
    projector_linger_ms: z.number().int().min(0).max(1_000).default(5),
    /** Extra time a processing attempt gets beyond its heartbeat window or timeout before the reaper takes it. */
    reaper_grace_ms: z.number().int().min(0).default(30_000),
    reaper_interval_ms: z.number().int().min(50).default(5_000),
    /**
     * How long a running job whose cancel was asked for (`include_running`, issue 28) waits for its
     * worker's ack; past it the scheduler's reaper pass ends it cancelled and a late ack gets 409.
     */
    cancel_grace_ms: z.number().int().min(0).default(30_000),
    /** How often the scheduler looks for continuations left waiting on a parent that has ended. */
    cascade_sweep_interval_ms: z.number().int().min(50).default(1_000),
    /**
     * How old a graph job must be before the cascade sweep cancels it for waiting on a parent that
     * was never created (a graph batch the process died in): a batch still being created names
     * parents it has yet to append, so this is far longer than any batch takes to create.
     */
    graph_orphan_grace_ms: z.number().int().min(0).default(300_000),
    /** How often the scheduler moves due scheduled jobs to pending. */
    scheduler_interval_ms: z.number().int().min(10).default(250),
    /** The spec's long-poll re-check interval, which also asks the read model; wake-ups normally answer far sooner. */
    poll_tick_ms: z.number().int().min(10).default(2_000),
    poll_max_wait_ms: z.number().int().min(0).max(30_000).default(30_000),
    /** Longest a list waits for the projector to reach the caller's last write (and a short poll on a cold queue, for this process's creates). */
    read_your_writes_wait_ms: z.number().int().min(0).default(2_000),
    /**
     * The request limit and the monthly allowance. Off only to measure their cost (`npm run bench
     * -- --no-metering`) or on a self-hosted install that bills nobody.
     */
    metering_enabled: z.boolean().default(true),
    /** Waits between webhook attempts, one after each failed attempt but the last; the policy's (domain/delivery-policy.ts) unless tests shorten them. */
    webhook_retry_delays_ms: z
      .array(z.number().int().min(0))
      .length(deliveryRetryWaitsMs.length)
      .default([...deliveryRetryWaitsMs]),
    /** Waits between attempts at an alert e-mail the SMTP server refused or could not take; given up after the last. */
    mail_retry_delays_ms: z.array(z.number().int().min(0)).min(1).max(20).default([10_000, 60_000, 300_000, 1_800_000, 7_200_000]),
    /** Each webhook attempt's total deadline (domain/delivery-policy.ts): address lookup, connecting, headers and body together. */
    webhook_timeout_ms: z.number().int().min(1).default(deliveryAttemptTimeoutMs),
    /** Requests a webhook replay sends to one endpoint (a URL origin) per second at most, all replays together. */
    webhook_replay_requests_per_second: z.number().positive().max(1_000).default(10),
    /**
     * Jobs one bulk action (`POST /jobsvc/v1/jobs/bulk`) changes per second at most, and the job
     * appends it keeps in flight at once: bounded per operation so that one tenant's bulk retry
     * leaves the log and the projector to everyone else's work too.
     */
    bulk_jobs_per_second: z.number().positive().max(100_000).default(5_000),
    bulk_jobs_in_flight: z.number().int().min(1).max(1_024).default(256),
    /** How often the scheduler evaluates the alert settings. */
    alert_interval_ms: z.number().int().min(50).default(30_000),
    /** How often the scheduler looks for terminal jobs past their plan's retention; while a pass finds a full batch (1,000 jobs) the next follows at once. */
    retention_interval_ms: z.number().int().min(50).default(60_000),
    /** Keep the projects' Merkle logs (docs/audit.md); off: no leaves, checkpoints or proofs (503), as the benchmark's comparison runs. */
    audit_log_enabled: z.boolean().default(true),
    /** How often the scheduler signs a checkpoint of each project's audit log that grew since its last one (docs/audit.md). */
    audit_checkpoint_interval_ms: z.number().int().min(50).default(3_600_000),
    /** How often the scheduler checks whether a new billing period (UTC month) began. */
    billing_period_check_interval_ms: z.number().int().min(50).default(60_000),
    /**
     * Check every success body against its schema before it is written (a drift from the
     * OpenAPI document then fails loudly, as a 500). On in the tests; off in production, where
     * bodies are written by serializers compiled from the same schemas.
     */
    validate_responses: z.boolean().default(false),
    /** Largest JSON payload accepted on job creation, in bytes. */
    max_payload_bytes: z.number().int().min(1).default(defaultMaxPayloadBytes),
    /**
     * Worker polls of one project in flight at once in one API process (waiting or claiming);
     * more answer 429. Per process because what a poll holds (memory, a place in the claim
     * line, the process's pool) is per process.
     */
    max_polls_per_project: z.number().int().min(1).default(500),
    /** Progress streams (`GET /jobs/{id}/events`) of one project open at once in one API process; more answer 429. */
    max_event_streams_per_project: z.number().int().min(1).default(100),
    /**
     * scrypt runs (password checks and hashes: 128 MiB and ~350 ms of a core each) in flight at once
     * in one API process, running or queued on libuv's pool of 4; one more answers 429 at once. Above
     * the 10 failed logins of an account's window, so parallel guesses at one account are refused
     * by its lockout, not by this.
     */
    password_hashes_in_flight: z.number().int().min(1).default(16),
    /**
     * Claim transactions (each holds a Postgres connection) one project may run at once in one
     * API process; its other polls wait their turn in memory and share the next transaction.
     */
    claim_transactions_per_project: z.number().int().min(1).default(4),
    /** Claim transactions of all projects at once in one API process: half the pool of 20, so reads always find a connection. */
    claim_transactions: z.number().int().min(1).default(10),
    /**
     * Claimable jobs the ready index of one API process holds for one project (all its queues).
     * Past it the index drops the newest and the project's polls also run the read-model query,
     * until the index has room to read the queue again.
     */
    ready_index_jobs_per_project: z.number().int().min(1).default(10_000),
    /** Claimable jobs the ready index of one API process holds for all projects together; past it, as above. */
    ready_index_jobs: z.number().int().min(1).default(100_000),
    /** Alerts a project may have (deleted ones do not count); one more is refused with 400. */
    max_alerts_per_project: z.number().int().min(1).default(100),
    /**
     * The events stream's `max_bytes`: past it every append is refused (503) until retention frees
     * space. Applied to the stream at start; JetStream reserves it from the server's storage.
     */
    events_max_bytes: z
      .number()
      .int()
      .min(1024 * 1024)
      .default(defaultEventsMaxBytes),
  })
  .strict()

export type Tunables = z.infer<typeof tunablesSchema>

/** The end of `v1` an operator announced (spec, Versioning 3). */
export interface VersionSunset {
  /** From this instant every route of the version answers 410. */
  sunsetAt: Date
  deprecatedAt: Date
  migrationUrl: string
}

const configFileSchema = z
  .object({
    plans: plansFileSchema.optional(),
    tunables: tunablesSchema.partial().optional(),
    /** The payment provider's webhook signing secret; without it, billing webhooks answer 503. */
    billing: z
      .object({ webhook_secret: z.string().min(16) })
      .partial()
      .strict()
      .optional(),
    /** The e-mail provider's webhook signing secret; without it, no e-mail-provider webhook verifies. */
    email: z
      .object({ webhook_secret: z.string().min(16) })
      .partial()
      .strict()
      .optional(),
  })
  .passthrough()

export interface Config {
  port: number
  host: string
  natsUrl: string
  /** Replicas of every stream and KV bucket (JOBSVC_REPLICAS). */
  replicas: 1 | 3
  databaseUrl: string
  namespace: string
  secret: string
  /** The development mode's secret file the secret came from; null when JOBSVC_SECRET gave it. */
  devSecretFile: string | null
  /** JOBSVC_AUDIT_SIGNING_KEY (base64 Ed25519 seed); null: derived from `secret`. */
  auditSigningKey: string | null
  smtpUrl: string | null
  publicUrl: string | null
  /** Fastify's `trustProxy`: false, every hop (true), a number of hops, or the proxies' addresses. */
  trustProxy: boolean | number | string[]
  webhookAllowHosts: string[]
  /** Development mode (`--dev`): webhooks may target loopback addresses (a receiver on this machine). */
  webhookAllowLoopback: boolean
  logLevel: z.infer<typeof environmentSchema>['LOG_LEVEL']
  /** `pretty`: human-readable lines (development on a terminal); `json`: one object per line, for log pipelines. */
  logFormat: 'json' | 'pretty'
  /** METRICS_PORT; null: no metrics endpoint. */
  metricsPort: number | null
  /** METRICS_TOKEN; null: /metrics asks for no credentials. */
  metricsToken: string | null
  /** OTEL_EXPORTER_OTLP_ENDPOINT; null: no spans. */
  otlpEndpoint: string | null
  tunables: Tunables
  plans: Readonly<Record<Plan, PlanLimits>>
  /** HMAC secret of the payment provider's webhooks; null: billing is not configured. */
  billingWebhookSecret: string | null
  /** null: no end of v1 is announced, and v1 answers carry no deprecation headers. */
  v1Sunset: VersionSunset | null
  /** HMAC secret of the e-mail provider's webhooks (bounces, complaints); null: none is accepted. */
  emailWebhookSecret: string | null
}

export class ConfigError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}

/**
 * Where the development mode (`--dev`, which `npm start`, `npm run cli` and `npm run replay`
 * pass) keeps its generated JOBSVC_SECRET: in the working directory, which for npm scripts is the
 * package root, so every script of a checkout shares it. Git-ignored.
 */
export const devSecretFileName = '.jobsvc-dev-secret'

const missingSecret =
  'JOBSVC_SECRET is not set: give every process of the install the same secret, at least 16 characters (`openssl rand -hex 32` makes a good one), or, for development, run `npm start`, which keeps a generated one in .jobsvc-dev-secret'

/**
 * The development secret in `path`, created (32 random bytes, hex, mode 0600) if there is none.
 * It is written under a temporary name and linked into place, so that processes started
 * together agree on one secret and none reads a half-written file.
 */
function devSecret(path: string): string {
  try {
    if (!existsSync(path)) {
      const temp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`
      writeFileSync(temp, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' })
      try {
        linkSync(temp, path)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      } finally {
        unlinkSync(temp)
      }
    }
    const mode = statSync(path).mode & 0o777
    if ((mode & 0o077) !== 0) throw new ConfigError(`${path} is readable by others (mode ${mode.toString(8)}); chmod 600 ${path}`)
    const secret = readFileSync(path, 'utf8').trim()
    if (!/^[0-9a-f]{64}$/.test(secret)) throw new ConfigError(`${path} does not hold a development secret; delete it and a new one is generated`)
    return secret
  } catch (err) {
    if (err instanceof ConfigError) throw err
    throw new ConfigError(`the development secret file ${path}: ${(err as Error).message}`)
  }
}

/** The spec's deprecation cycle (Versioning 3): a version is deprecated 12 months before its sunset. */
const deprecationMonthsBeforeSunset = 12

function toVersionSunset(e: z.infer<typeof environmentSchema>): VersionSunset | null {
  if (e.JOBSVC_V1_SUNSET === undefined) {
    if (e.JOBSVC_V1_DEPRECATION !== undefined) throw new ConfigError('JOBSVC_V1_DEPRECATION is set without JOBSVC_V1_SUNSET')
    return null
  }
  // Every answer links to the notes: a sunset announced without them would tell clients that v1 ends but not what to do.
  if (e.JOBSVC_V1_MIGRATION_URL === undefined)
    throw new ConfigError('JOBSVC_V1_SUNSET needs JOBSVC_V1_MIGRATION_URL, the migration notes every v1 answer links to')
  const sunsetAt = new Date(e.JOBSVC_V1_SUNSET)
  const deprecatedAt = new Date(e.JOBSVC_V1_DEPRECATION ?? e.JOBSVC_V1_SUNSET)
  if (e.JOBSVC_V1_DEPRECATION === undefined) deprecatedAt.setUTCMonth(deprecatedAt.getUTCMonth() - deprecationMonthsBeforeSunset)
  if (deprecatedAt > sunsetAt) throw new ConfigError('JOBSVC_V1_DEPRECATION must not be after JOBSVC_V1_SUNSET')
  // Serialized, so that the URL carries no raw `<` or `>` that would end the Link header's target early.
  return { sunsetAt, deprecatedAt, migrationUrl: new URL(e.JOBSVC_V1_MIGRATION_URL).href }
}

/**
 * Parses and freezes the configuration from an environment (process.env at start). Without
 * JOBSVC_SECRET it refuses, unless `devSecretFile` names the development mode's secret file: a
 * process never runs on a throw-away key, which would end every session at a restart and leave
 * what it sealed unreadable to the install's other processes.
 */
export function loadConfig(
  env: Record<string, string | undefined>,
  options: { devSecretFile?: string | null; dev?: boolean; terminal?: boolean } = {},
): Readonly<Config> {
  const parsed = environmentSchema.safeParse(env)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!
    throw new ConfigError(`${issue.path.join('.')}: ${issue.message}`)
  }
  const e = parsed.data
  const devSecretFile = e.JOBSVC_SECRET === undefined ? (options.devSecretFile ?? null) : null
  if (e.JOBSVC_SECRET === undefined && devSecretFile === null) throw new ConfigError(missingSecret)
  const secret = e.JOBSVC_SECRET ?? devSecret(devSecretFile!)
  let fileTunables: Partial<Tunables> = {}
  let filePlans: z.infer<typeof plansFileSchema> = {}
  let billingWebhookSecret: string | null = null
  let emailWebhookSecret: string | null = null
  if (e.JOBSVC_CONFIG) {
    let raw: unknown
    try {
      raw = JSON.parse(readFileSync(e.JOBSVC_CONFIG, 'utf8'))
    } catch (err) {
      throw new ConfigError(`JOBSVC_CONFIG ${e.JOBSVC_CONFIG}: ${(err as Error).message}`)
    }
    const file = configFileSchema.safeParse(raw)
    if (!file.success) throw new ConfigError(`JOBSVC_CONFIG ${e.JOBSVC_CONFIG}: ${file.error.issues[0]!.message}`)
    fileTunables = file.data.tunables ?? {}
    filePlans = file.data.plans ?? {}
    billingWebhookSecret = file.data.billing?.webhook_secret ?? null
    emailWebhookSecret = file.data.email?.webhook_secret ?? null
  }
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    natsUrl: e.NATS_URL,
    replicas: e.JOBSVC_REPLICAS as 1 | 3,
    databaseUrl: e.DATABASE_URL,
    namespace: e.JOBSVC_NAMESPACE,
    secret,
    devSecretFile,
    auditSigningKey: e.JOBSVC_AUDIT_SIGNING_KEY ?? null,
    smtpUrl: e.SMTP_URL ?? null,
    publicUrl: e.PUBLIC_URL ?? null,
    trustProxy: e.TRUST_PROXY,
    webhookAllowHosts: e.WEBHOOK_ALLOW_HOSTS.split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    webhookAllowLoopback: options.dev ?? false,
    logLevel: e.LOG_LEVEL,
    logFormat: e.LOG_FORMAT ?? (options.dev === true && options.terminal === true ? 'pretty' : 'json'),
    metricsPort: e.METRICS_PORT ?? null,
    metricsToken: e.METRICS_TOKEN ?? null,
    otlpEndpoint: e.OTEL_EXPORTER_OTLP_ENDPOINT ?? null,
    tunables: Object.freeze(tunablesSchema.parse(fileTunables)),
    plans: resolvePlans(filePlans),
    billingWebhookSecret,
    v1Sunset: toVersionSunset(e),
    emailWebhookSecret,
  })
}
