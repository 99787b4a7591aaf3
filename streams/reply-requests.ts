import { createInbox, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from '@nats-io/transport-node'
import { isNatsConnected } from './connection.ts'
import { LogUnavailable } from './errors.ts'
import { parseReplySubject, replySubject, replySubjectsFilter } from './names.ts'

interface Pending {
  resolve: (msg: Msg) => void
  reject: (err: Error) => void
  timer: NodeJS.Timeout
}

/**
 * Requests over one reply subscription: a plain publish with a reply subject, matched to its
 * answer by a token. nats.js's request path allocates two Error objects per request (with stack
 * traces) and a subscription per request; on the service's hottest calls (appends, retention's
 * deletes) that cost several percent of a job's CPU. A request made while the connection is
 * down, or not answered in time, fails with LogUnavailable.
 */
export class ReplyRequests {
  readonly #nc: NatsConnection
  readonly #inbox = createInbox()
  readonly #timeoutMs: number
  readonly #pending = new Map<string, Pending>()
  readonly #subscription: Subscription
  #next = 0

  constructor(nc: NatsConnection, timeoutMs = 10_000) {
    this.#nc = nc
    this.#timeoutMs = timeoutMs
    this.#subscription = nc.subscribe(replySubjectsFilter(this.#inbox), { callback: (_err, msg) => this.#settle(msg) })
  }

  /** Publishes `data` to `subject` and resolves to the answer; `what` names it in a timeout. */
  request(subject: string, data: Uint8Array, headers?: MsgHdrs, what = subject): Promise<Msg> {
    if (!isNatsConnected(this.#nc)) return Promise.reject(new LogUnavailable(`the NATS connection is down; ${what} was not sent`))
    const token = (this.#next++).toString(36)
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(token)
        reject(new LogUnavailable(`JetStream did not acknowledge ${what} within ${this.#timeoutMs} ms`))
      }, this.#timeoutMs)
      this.#pending.set(token, { resolve, reject, timer })
      try {
        this.#nc.publish(subject, data, { reply: replySubject(this.#inbox, token), ...(headers === undefined ? {} : { headers }) })
      } catch (err) {
        clearTimeout(timer)
        this.#pending.delete(token)
        reject(err as Error)
      }
    })
  }

  /** Stops listening; requests still waiting fail. */
  close(what: string): void {
    this.#subscription.unsubscribe()
    for (const [token, p] of this.#pending) {
      clearTimeout(p.timer)
      p.reject(new Error(`the ${what} was closed`))
      this.#pending.delete(token)
    }
  }

  #settle(msg: Msg): void {
    const token = parseReplySubject(this.#inbox, msg.subject)
    if (token === null) return
    const pending = this.#pending.get(token)
    if (pending === undefined) return
    this.#pending.delete(token)
    clearTimeout(pending.timer)
    pending.resolve(msg)
  }
}
