import { defaultMaxAttempts } from './retry-policy.ts'

/**
 * What a client may ask of a job, wherever one is asked for (a create, a recurring schedule, a
 * worker's registration), and what an option left out becomes. Lengths are the spec's Limits;
 * the tag limits are ours, since the spec leaves them open (docs/api-notes.md, "Limits we chose").
 * `max_attempts` is bounded and defaulted by the retry policy (retry-policy.ts).
 */

export const maxJobTypeLength = 500
export const maxQueueNameLength = 100

/** A job's per-attempt timeout, in seconds. */
export const timeoutSecondsRange = { min: 1, max: 86_400 } as const

/**
 * The payload's JSON size a job may carry by default, in bytes (an operator changes it with the
 * `max_payload_bytes` tunable), and how deep it may nest: serializing deeper payloads (JSON,
 * msgpack) recurses and would overflow the stack.
 */
export const defaultMaxPayloadBytes = 256 * 1024
export const maxPayloadDepth = 64

export const maxTags = 50
export const maxTagKeyLength = 100
export const maxTagValueLength = 500
/** A job's `concurrency_key` (issue 29) is bounded like a tag's value. */
export const maxConcurrencyKeyLength = maxTagValueLength

/** The most parents a job of a graph may wait for (issue 30, `depends_on`). */
export const maxParents = 100

export const jobDefaults = { queue: 'default', max_attempts: defaultMaxAttempts, timeout_seconds: 1800 } as const

/**
 * How long a job may wait to be claimed once due, in seconds (issue 28, expiry): a second to 30
 * days, a bound well past any wait a job with a deadline means to allow.
 */
export const ttlSecondsRange = { min: 1, max: 2_592_000 } as const
