import { createInbox, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from '@nats-io/transport-node'
import { isNatsConnected } from './connection.ts'
import { LogUnavailable } from './errors.ts'

/** JetStream's answer to a publish: the stored sequence, or its API error. */
export interface PublishAck {
  seq: number
  duplicate: boolean
}

/** A JetStream API error answered to a publish (`err_code` 10071: wrong last sequence). */
export class JetStreamPublishError extends Error {
  readonly errCode: number
  readonly status: number
  constructor(status: number, errCode: number, description: string) {
    super(`JetStream refused the publish: ${description} (${errCode})`)
    this.name = 'JetStreamPublishError'
    this.status = status
    this.errCode = errCode
  }
}

interface Pending {
  resolve: (ack: PublishAck) => void
  reject: (err: Error) => void
  timer: NodeJS.Timeout
}

/**
 * Publishes to JetStream over one reply subscription: a plain publish with a reply subject,
 * matched to its acknowledgement by a token. nats.js's request/reply allocates two Error
 * objects per request (with stack traces) and its JetStream client re-parses the answer, which
 * cost several percent of a job's CPU; appends are the service's hottest call.
 */
export class JetStreamPublisher {
  readonly #nc: NatsConnection
  readonly #prefix: string
  readonly #timeoutMs: number
  readonly #pending = new Map<string, Pending>()
  readonly #subscription: Subscription
  #next = 0

  constructor(nc: NatsConnection, timeoutMs = 10_000) {
    this.#nc = nc
    this.#timeoutMs = timeoutMs
    this.#prefix = createInbox()
    this.#subscription = nc.subscribe(`${this.#prefix}.*`, { callback: (_err, msg) => this.#settle(msg) })
  }

  /** Publishes `data` to `subject` with `headers` and resolves to JetStream's acknowledgement. */
  publish(subject: string, data: Uint8Array, headers: MsgHdrs): Promise<PublishAck> {
    if (!isNatsConnected(this.#nc)) return Promise.reject(new LogUnavailable('the NATS connection is down; nothing was published'))
    const token = (this.#next++).toString(36)
    return new Promise<PublishAck>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(token)
        reject(new LogUnavailable(`JetStream did not acknowledge a publish to ${subject} within ${this.#timeoutMs} ms`))
      }, this.#timeoutMs)
      this.#pending.set(token, { resolve, reject, timer })
      try {
        this.#nc.publish(subject, data, { reply: `${this.#prefix}.${token}`, headers })
      } catch (err) {
        clearTimeout(timer)
        this.#pending.delete(token)
        reject(err as Error)
      }
    })
  }

  close(): void {
    this.#subscription.unsubscribe()
    for (const [token, p] of this.#pending) {
      clearTimeout(p.timer)
      p.reject(new Error('the publisher was closed'))
      this.#pending.delete(token)
    }
  }

  #settle(msg: Msg): void {
    const token = msg.subject.slice(this.#prefix.length + 1)
    const pending = this.#pending.get(token)
    if (pending === undefined) return
    this.#pending.delete(token)
    clearTimeout(pending.timer)
    // With no stream on the subject the server answers a bare 503 status (no responders).
    if (msg.headers?.hasError) {
      pending.reject(new JetStreamPublishError(msg.headers.code, 0, msg.headers.description || 'no stream answered'))
      return
    }
    try {
      const ack = JSON.parse(msg.string()) as { seq?: number; duplicate?: boolean; error?: { code: number; err_code: number; description: string } }
      if (ack.error) pending.reject(new JetStreamPublishError(ack.error.code, ack.error.err_code, ack.error.description))
      else pending.resolve({ seq: ack.seq!, duplicate: ack.duplicate === true })
    } catch (err) {
      pending.reject(err as Error)
    }
  }
}
