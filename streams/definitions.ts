import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream'
import { Kvm, type KV } from '@nats-io/kv'
import type { NatsConnection } from '@nats-io/transport-node'
import {
  authLimitsBucketName,
  deliveriesStreamName,
  deliveriesSubjectFilter,
  eventsStreamName,
  eventsSubjectFilter,
  heartbeatBucketName,
  idempotencyBucketName,
  keyValueStreamName,
  mailStreamName,
  mailSubjectFilter,
} from './names.ts'

const nanosPerMs = 1_000_000

/** The events stream's `max_bytes` unless configured (`events_max_bytes`). */
export const defaultEventsMaxBytes = 2 ** 30

/**
 * The event log: one stream for every aggregate of the install. Direct gets are on because
 * loading an aggregate is one direct get of its subject's last message. The duplicate window
 * bounds how long a re-sent message id is recognised (the publish retry horizon, not the
 * Idempotency-Key lifetime, which lives elsewhere).
 *
 * At `maxBytes` the stream refuses new messages (discard "new", answered as LogFull) rather than
 * dropping its oldest ones, which would silently delete live jobs' history. JetStream reserves
 * `maxBytes` of the server's storage for the stream when it is made.
 */
export function eventsStreamConfig(ns: string, replicas = 1, maxBytes = defaultEventsMaxBytes): Partial<StreamConfig> & { name: string } {
  return {
    ...fileStream(eventsStreamName(ns), eventsSubjectFilter(ns), RetentionPolicy.Limits, replicas),
    allow_direct: true,
    max_bytes: maxBytes,
    discard: DiscardPolicy.New,
  }
}

/** Heartbeats are liveness, not history: one KV entry per running job, gone after two days. */
export const heartbeatMaxAgeMs = 2 * 24 * 60 * 60 * 1000

/** The webhook work queue: a message is removed once its consumer acks it (the delivery settled). */
export function deliveriesStreamConfig(ns: string, replicas = 1): Partial<StreamConfig> & { name: string } {
  return fileStream(deliveriesStreamName(ns), deliveriesSubjectFilter(ns), RetentionPolicy.Workqueue, replicas)
}

/** The alert e-mail work queue: a message is removed once its consumer acks it (sent or given up). */
export function mailStreamConfig(ns: string, replicas = 1): Partial<StreamConfig> & { name: string } {
  return fileStream(mailStreamName(ns), mailSubjectFilter(ns), RetentionPolicy.Workqueue, replicas)
}

/** What every stream of the install shares: one subject filter, files, the install's replica count, the same duplicate window. */
function fileStream(name: string, subject: string, retention: RetentionPolicy, replicas: number): Partial<StreamConfig> & { name: string } {
  return {
    name,
    subjects: [subject],
    retention,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    duplicate_window: 2 * 60 * 1000 * nanosPerMs,
    num_replicas: replicas,
  }
}

/**
 * The log cannot be used as configured: streams of the install have another replica count than
 * asked for, or the NATS servers cannot hold that many replicas. The message says what to do;
 * the service prints it as its one start-up error line.
 */
export class StreamSettingsMismatch extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'StreamSettingsMismatch'
  }
}

/** Every stream of `ns`, KV buckets included, as `ensureStreams` and the bucket openers make them. */
function namespaceStreamNames(ns: string): string[] {
  return [
    eventsStreamName(ns),
    deliveriesStreamName(ns),
    mailStreamName(ns),
    keyValueStreamName(heartbeatBucketName(ns)),
    keyValueStreamName(authLimitsBucketName(ns)),
    keyValueStreamName(idempotencyBucketName(ns)),
  ]
}

/**
 * Creates what is missing and leaves what exists (several processes start at once). Streams that
 * exist with another replica count are refused before anything is created: a JetStream update
 * would change them under the other processes of the install, which is the operator's decision.
 */
export async function ensureStreams(jsm: JetStreamManager, ns: string, replicas = 1, eventsMaxBytes = defaultEventsMaxBytes): Promise<void> {
  await refuseOtherReplicas(jsm, ns, replicas)
  await ensureStream(jsm, eventsStreamConfig(ns, replicas, eventsMaxBytes))
  await applyLogLimit(jsm, ns, eventsMaxBytes)
  await ensureStream(jsm, deliveriesStreamConfig(ns, replicas))
  await ensureStream(jsm, mailStreamConfig(ns, replicas))
}

/**
 * A limit is lowered only while the stream holds at most this share of the new one: JetStream
 * deletes the oldest messages of a stream whose new `max_bytes` is below what it holds, whatever
 * its discard policy, and the stream may grow between the check and the update.
 */
const lowerableShare = 0.9

/**
 * Gives an events stream made before, or with another `events_max_bytes`, the configured limit and
 * discard policy. Every process of an install starts with the same configuration, so they agree.
 * Raising the limit is always safe; lowering it below what the stream holds (plus headroom) would
 * make JetStream delete the oldest messages, live jobs' history among them, so the start is
 * refused instead, saying what limit the log needs.
 */
async function applyLogLimit(jsm: JetStreamManager, ns: string, maxBytes: number): Promise<void> {
  const name = eventsStreamName(ns)
  const { config, state } = await jsm.streams.info(name)
  if (config.max_bytes === maxBytes && config.discard === DiscardPolicy.New) return
  const lowering = config.max_bytes <= 0 || config.max_bytes > maxBytes
  if (lowering && state.bytes > maxBytes * lowerableShare) {
    throw new StreamSettingsMismatch(
      `events_max_bytes=${maxBytes} is too small for the events stream ${name}, which holds ${state.bytes} bytes: ` +
        `JetStream would delete its oldest messages to fit. Set events_max_bytes in JOBSVC_CONFIG to at least ` +
        `${Math.ceil(state.bytes / lowerableShare)} (more, to leave room to grow), or let retention shrink the log first`,
    )
  }
  await jsm.streams.update(name, { ...config, max_bytes: maxBytes, discard: DiscardPolicy.New }).catch((err: unknown) => {
    throw isStorageUnavailable(err) ? storageUnavailable(maxBytes, err) : err
  })
}

/** JetStream's answer when a stream's `max_bytes` is more than the server has left to reserve. */
function isStorageUnavailable(err: unknown): boolean {
  return /insufficient storage resources/i.test(String((err as Error)?.message))
}

function storageUnavailable(maxBytes: number, err: unknown): StreamSettingsMismatch {
  return new StreamSettingsMismatch(
    `events_max_bytes=${maxBytes} is more than the NATS server has left to reserve for the events stream (${(err as Error).message}): ` +
      `lower events_max_bytes in JOBSVC_CONFIG, or give the server more storage (max_file_store)`,
  )
}

async function refuseOtherReplicas(jsm: JetStreamManager, ns: string, replicas: number): Promise<void> {
  const other: string[] = []
  for (const name of namespaceStreamNames(ns)) {
    const info = await jsm.streams.info(name).catch(() => null)
    if (info !== null && info.config.num_replicas !== replicas) other.push(`${name} has ${info.config.num_replicas}`)
  }
  if (other.length === 0) return
  throw new StreamSettingsMismatch(
    `JOBSVC_REPLICAS=${replicas} but this install's streams were made with other replica counts (${other.join(', ')}): ` +
      `start with the JOBSVC_REPLICAS they were made with, or change each of them first ` +
      `(\`nats stream edit <stream> --replicas ${replicas}\`, on a JetStream cluster of at least ${replicas} servers) and start again`,
  )
}

/** JetStream's answer when a stream asks for more replicas than the servers can place. */
function isReplicasUnavailable(err: unknown): boolean {
  const code = (err as { api_error?: { err_code?: number } }).api_error?.err_code
  return code === 10074 || code === 10023 || /replicas > 1 not supported|insufficient resources/i.test(String((err as Error)?.message))
}

function replicasUnavailable(replicas: number, err: unknown): StreamSettingsMismatch {
  return new StreamSettingsMismatch(
    `JOBSVC_REPLICAS=${replicas} needs a JetStream cluster of at least ${replicas} servers, and the NATS servers refused (${(err as Error).message}): ` +
      `point NATS_URL at such a cluster, or start with JOBSVC_REPLICAS=1 on a single server`,
  )
}

async function ensureStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string }): Promise<void> {
  try {
    await jsm.streams.info(config.name)
  } catch {
    try {
      await jsm.streams.add(config)
    } catch (err) {
      if (isReplicasUnavailable(err)) throw replicasUnavailable(config.num_replicas ?? 1, err)
      if (isStorageUnavailable(err) && config.max_bytes !== undefined) throw storageUnavailable(config.max_bytes, err)
      await jsm.streams.info(config.name).catch(() => {
        throw err
      })
    }
  }
}

/**
 * Creates or opens a KV bucket. Processes starting together race to create it, and the loser's
 * create can fail ("subjects overlap"); the bucket then exists, so opening it again succeeds.
 */
async function openBucket(nc: NatsConnection, name: string, ttlMs: number, replicas: number): Promise<KV> {
  const kvm = new Kvm(nc)
  for (let attempt = 1; ; attempt++) {
    try {
      return await kvm.create(name, { history: 1, ttl: ttlMs, replicas })
    } catch (err) {
      if (isReplicasUnavailable(err)) throw replicasUnavailable(replicas, err)
      if (attempt >= 5) throw err
      await new Promise((resolve) => setTimeout(resolve, 50 * attempt))
    }
  }
}

export async function openHeartbeatBucket(nc: NatsConnection, ns: string, replicas = 1): Promise<KV> {
  return openBucket(nc, heartbeatBucketName(ns), heartbeatMaxAgeMs, replicas)
}

/**
 * Windows of the auth limits (15 minutes at most) and cooldowns: an entry not written for an
 * hour has nothing left to count, so the bucket forgets it.
 */
export async function openAuthLimitsBucket(nc: NatsConnection, ns: string, replicas = 1): Promise<KV> {
  return openBucket(nc, authLimitsBucketName(ns), 60 * 60 * 1000, replicas)
}

/** Stored answers of requests sent with an idempotency key, forgotten 24 hours after their last write. */
export async function openIdempotencyBucket(nc: NatsConnection, ns: string, replicas = 1): Promise<KV> {
  return openBucket(nc, idempotencyBucketName(ns), 24 * 60 * 60 * 1000, replicas)
}

/** Removes everything `ensureStreams` and the bucket openers made for `ns` (tests only). */
export async function deleteNamespace(jsm: JetStreamManager, ns: string): Promise<void> {
  for (const name of namespaceStreamNames(ns)) {
    await jsm.streams.delete(name).catch(() => undefined)
  }
}
