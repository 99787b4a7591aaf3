import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { z } from 'zod'
import type { Plan } from '../domain/project.ts'
import { isValidNamespace } from '../streams/names.ts'
import { plansFileSchema, resolvePlans, type PlanLimits } from './metering/plans.ts'

const booleanString = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'])
  .transform((v) => v === 'true' || v === '1' || v === 'yes')

/** The environment of CONTRACT.md, one key each; nothing else reads process.env. */
export const environmentSchema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8080).describe('HTTP port; 0 picks a free one'),
  HOST: z.string().min(1).default('127.0.0.1').describe('bind address'),
  NATS_URL: z.string().min(1).default('nats://127.0.0.1:4222').describe('NATS server(s), comma-separated'),
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
  JOBSVC_SECRET: z.string().min(16).optional().describe('key material for JWT signing and encryption at rest'),
  SMTP_URL: z.string().optional().describe('e-mail transport; unset: e-mails are logged'),
  PUBLIC_URL: z.url().optional().describe('base of links in e-mails and the dashboard origin allowed by CORS; default http://HOST:PORT'),
  TRUST_PROXY: booleanString.default(false).describe('take the client IP from X-Forwarded-For'),
  WEBHOOK_ALLOW_HOSTS: z.string().default('').describe('host:port list exempt from the public-address rule'),
  JOBSVC_CONFIG: z.string().optional().describe('path of a JSON file overriding plan limits and tunables'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info').describe('pino log level'),
})

/** Operational knobs with production defaults; JOBSVC_CONFIG may override any of them. */
export const tunablesSchema = z
  .object({
    /** Extra time a processing attempt gets beyond its heartbeat window or timeout before the reaper takes it. */
    reaper_grace_ms: z.number().int().min(0).default(30_000),
    reaper_interval_ms: z.number().int().min(50).default(5_000),
    /** How often the scheduler looks for continuations left waiting on a parent that has ended. */
    cascade_sweep_interval_ms: z.number().int().min(50).default(1_000),
    /** How often the scheduler moves due scheduled jobs to pending (and wakes pollers for due retries). */
    scheduler_interval_ms: z.number().int().min(10).default(250),
    /** The spec's long-poll re-check interval; wake-ups normally answer far sooner. */
    poll_tick_ms: z.number().int().min(10).default(2_000),
    poll_max_wait_ms: z.number().int().min(0).max(30_000).default(30_000),
    /** Longest a list waits for the projector to reach the caller's last write. */
    read_your_writes_wait_ms: z.number().int().min(0).default(2_000),
    /**
     * The request limit and the monthly allowance. Off only to measure their cost (`npm run bench
     * -- --no-metering`) or on a self-hosted install that bills nobody.
     */
    metering_enabled: z.boolean().default(true),
    /** Waits between webhook attempts (spec: 5 s, 30 s, 5 min, 1 h); tests shorten them. */
    webhook_retry_delays_ms: z.array(z.number().int().min(0)).length(4).default([5_000, 30_000, 300_000, 3_600_000]),
    /** Waits between attempts at an alert e-mail the SMTP server refused or could not take; given up after the last. */
    mail_retry_delays_ms: z.array(z.number().int().min(0)).min(1).max(20).default([10_000, 60_000, 300_000, 1_800_000, 7_200_000]),
    /** Each webhook attempt's total deadline (spec: 10 s): address lookup, connecting, headers and body together. */
    webhook_timeout_ms: z.number().int().min(1).default(10_000),
    /** How often the scheduler evaluates the alert settings. */
    alert_interval_ms: z.number().int().min(50).default(30_000),
    /** How often the scheduler deletes terminal jobs past their plan's retention (a bounded batch each time). */
    retention_interval_ms: z.number().int().min(50).default(60_000),
    /** How often the scheduler checks whether a new billing period (UTC month) began. */
    billing_period_check_interval_ms: z.number().int().min(50).default(60_000),
    /** Largest JSON payload accepted on job creation, in bytes. */
    max_payload_bytes: z.number().int().min(1).default(256 * 1024),
  })
  .strict()

export type Tunables = z.infer<typeof tunablesSchema>

const configFileSchema = z
  .object({
    plans: plansFileSchema.optional(),
    tunables: tunablesSchema.partial().optional(),
    /** The payment provider's webhook signing secret; without it, billing webhooks answer 503. */
    billing: z.object({ webhook_secret: z.string().min(16) }).partial().strict().optional(),
  })
  .passthrough()

export interface Config {
  port: number
  host: string
  natsUrl: string
  databaseUrl: string
  namespace: string
  secret: string
  /** True when no JOBSVC_SECRET was given and a throw-away one was generated. */
  secretGenerated: boolean
  smtpUrl: string | null
  publicUrl: string | null
  trustProxy: boolean
  webhookAllowHosts: string[]
  logLevel: z.infer<typeof environmentSchema>['LOG_LEVEL']
  tunables: Tunables
  plans: Readonly<Record<Plan, PlanLimits>>
  /** HMAC secret of the payment provider's webhooks; null: billing is not configured. */
  billingWebhookSecret: string | null
}

export class ConfigError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}

/** Parses and freezes the configuration from an environment (process.env at start). */
export function loadConfig(env: Record<string, string | undefined>): Readonly<Config> {
  const parsed = environmentSchema.safeParse(env)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!
    throw new ConfigError(`${issue.path.join('.')}: ${issue.message}`)
  }
  const e = parsed.data
  let fileTunables: Partial<Tunables> = {}
  let filePlans: z.infer<typeof plansFileSchema> = {}
  let billingWebhookSecret: string | null = null
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
  }
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    natsUrl: e.NATS_URL,
    databaseUrl: e.DATABASE_URL,
    namespace: e.JOBSVC_NAMESPACE,
    secret: e.JOBSVC_SECRET ?? randomBytes(32).toString('hex'),
    secretGenerated: e.JOBSVC_SECRET === undefined,
    smtpUrl: e.SMTP_URL ?? null,
    publicUrl: e.PUBLIC_URL ?? null,
    trustProxy: e.TRUST_PROXY,
    webhookAllowHosts: e.WEBHOOK_ALLOW_HOSTS.split(',').map((s) => s.trim()).filter(Boolean),
    logLevel: e.LOG_LEVEL,
    tunables: Object.freeze(tunablesSchema.parse(fileTunables)),
    plans: resolvePlans(filePlans),
    billingWebhookSecret,
  })
}
