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

/**
 * The event log: one stream for every aggregate of the install. Direct gets are on because
 * loading an aggregate is one direct get of its subject's last message. The duplicate window
 * bounds how long a re-sent message id is recognised (the publish retry horizon, not the
 * Idempotency-Key lifetime, which lives elsewhere).
 */
export function eventsStreamConfig(ns: string): Partial<StreamConfig> & { name: string } {
  return { ...fileStream(eventsStreamName(ns), eventsSubjectFilter(ns), RetentionPolicy.Limits), allow_direct: true }
}

/** Heartbeats are liveness, not history: one KV entry per running job, gone after two days. */
export const heartbeatMaxAgeMs = 2 * 24 * 60 * 60 * 1000

/** The webhook work queue: a message is removed once its consumer acks it (the delivery settled). */
export function deliveriesStreamConfig(ns: string): Partial<StreamConfig> & { name: string } {
  return fileStream(deliveriesStreamName(ns), deliveriesSubjectFilter(ns), RetentionPolicy.Workqueue)
}

/** The alert e-mail work queue: a message is removed once its consumer acks it (sent or given up). */
export function mailStreamConfig(ns: string): Partial<StreamConfig> & { name: string } {
  return fileStream(mailStreamName(ns), mailSubjectFilter(ns), RetentionPolicy.Workqueue)
}

/** What every stream of the install shares: one subject filter, files, one replica, the same duplicate window. */
function fileStream(name: string, subject: string, retention: RetentionPolicy): Partial<StreamConfig> & { name: string } {
  return {
    name,
    subjects: [subject],
    retention,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    duplicate_window: 2 * 60 * 1000 * nanosPerMs,
    num_replicas: 1,
  }
}

/** Creates what is missing and leaves what exists (several processes start at once). */
export async function ensureStreams(jsm: JetStreamManager, ns: string): Promise<void> {
  await ensureStream(jsm, eventsStreamConfig(ns))
  await ensureStream(jsm, deliveriesStreamConfig(ns))
  await ensureStream(jsm, mailStreamConfig(ns))
}

async function ensureStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string }): Promise<void> {
  try {
    await jsm.streams.info(config.name)
  } catch {
    try {
      await jsm.streams.add(config)
    } catch (err) {
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
async function openBucket(nc: NatsConnection, name: string, ttlMs: number): Promise<KV> {
  const kvm = new Kvm(nc)
  for (let attempt = 1; ; attempt++) {
    try {
      return await kvm.create(name, { history: 1, ttl: ttlMs })
    } catch (err) {
      if (attempt >= 5) throw err
      await new Promise((resolve) => setTimeout(resolve, 50 * attempt))
    }
  }
}

export async function openHeartbeatBucket(nc: NatsConnection, ns: string): Promise<KV> {
  return openBucket(nc, heartbeatBucketName(ns), heartbeatMaxAgeMs)
}

/**
 * Windows of the auth limits (15 minutes at most) and cooldowns: an entry not written for an
 * hour has nothing left to count, so the bucket forgets it.
 */
export async function openAuthLimitsBucket(nc: NatsConnection, ns: string): Promise<KV> {
  return openBucket(nc, authLimitsBucketName(ns), 60 * 60 * 1000)
}

/** Stored answers of requests sent with an idempotency key, forgotten 24 hours after their last write. */
export async function openIdempotencyBucket(nc: NatsConnection, ns: string): Promise<KV> {
  return openBucket(nc, idempotencyBucketName(ns), 24 * 60 * 60 * 1000)
}

/** Removes everything `ensureStreams` and the bucket openers made for `ns` (tests only). */
export async function deleteNamespace(jsm: JetStreamManager, ns: string): Promise<void> {
  const names = [
    eventsStreamName(ns),
    deliveriesStreamName(ns),
    mailStreamName(ns),
    keyValueStreamName(heartbeatBucketName(ns)),
    keyValueStreamName(authLimitsBucketName(ns)),
    keyValueStreamName(idempotencyBucketName(ns)),
  ]
  for (const name of names) {
    await jsm.streams.delete(name).catch(() => undefined)
  }
}
