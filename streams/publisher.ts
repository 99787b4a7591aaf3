import type { MsgHdrs, NatsConnection } from '@nats-io/transport-node'
import { ReplyRequests } from './reply-requests.ts'

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

/**
 * Publishes to JetStream over one reply subscription: a plain publish with a reply subject,
 * matched to its acknowledgement by a token. nats.js's request/reply allocates two Error
 * objects per request (with stack traces) and its JetStream client re-parses the answer, which
 * cost several percent of a job's CPU; appends are the service's hottest call.
 */
export class JetStreamPublisher {
  readonly #requests: ReplyRequests

  constructor(nc: NatsConnection, timeoutMs = 10_000) {
    this.#requests = new ReplyRequests(nc, timeoutMs)
  }

  /** Publishes `data` to `subject` with `headers` and resolves to JetStream's acknowledgement. */
  async publish(subject: string, data: Uint8Array, headers: MsgHdrs): Promise<PublishAck> {
    const msg = await this.#requests.request(subject, data, headers, `a publish to ${subject}`)
    // With no stream on the subject the server answers a bare 503 status (no responders).
    if (msg.headers?.hasError) throw new JetStreamPublishError(msg.headers.code, 0, msg.headers.description || 'no stream answered')
    const ack = JSON.parse(msg.string()) as { seq?: number; duplicate?: boolean; error?: { code: number; err_code: number; description: string } }
    if (ack.error) throw new JetStreamPublishError(ack.error.code, ack.error.err_code, ack.error.description)
    return { seq: ack.seq!, duplicate: ack.duplicate === true }
  }

  close(): void {
    this.#requests.close('publisher')
  }
}
