import { createHmac } from 'node:crypto'
import type { Webhook } from '../../../domain/webhook.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { checkWebhookUrl } from '../../infrastructure/url-safety.ts'
import type { DeliveryWorkItem } from './delivery-queue.ts'
import { SigningSecrets } from './signing-secrets.ts'
import { beforeDeadline, postWebhook, type AttemptResult } from './webhook-request.ts'

export const userAgent = 'Service-Webhooks/1.0'

/** On a redelivery (by hand or by a replay of an event delivered before): the id of the delivery it repeats. */
export const redeliveryHeader = 'X-Jobsvc-Redelivery'
/** On a replay's deliveries: the operation's id. */
export const operationHeader = 'X-Jobsvc-Operation'

/** What one attempt got, or why it sent nothing. */
export type SendResult = AttemptResult | { status: null; reason: 'blocked' | 'unsealable' | 'no_subscription' }

/** `t=<unix>,v1=<hex>[,v1=<hex of the previous secret>]` over `<t>.<body>`, new secret first. */
export function signatureHeader(secrets: string[], body: string, at: Date): string {
  const t = Math.floor(at.getTime() / 1000)
  return [`t=${t}`, ...secrets.map((s) => `v1=${createHmac('sha256', s).update(`${t}.${body}`).digest('hex')}`)].join(',')
}

/** The sender: one signed POST of a work item's body to its subscription's checked address. */
export class WebhookSender {
  readonly #deps: Deps
  readonly #secrets: SigningSecrets

  constructor(deps: Deps) {
    this.#deps = deps
    this.#secrets = new SigningSecrets(deps)
  }

  /** One attempt at one work item, under one deadline from the address check to the last byte read. */
  async send(hook: Webhook, item: DeliveryWorkItem): Promise<SendResult> {
    const deps = this.#deps
    const now = deps.now()
    const secrets = this.#secrets.of(hook, now)
    if (secrets === null) return { status: null, reason: 'unsealable' }
    const deadline = AbortSignal.timeout(deps.config.tunables.webhook_timeout_ms)
    const verdict = await beforeDeadline(
      checkWebhookUrl(hook.url, deps.config.webhookAllowHosts, deps.resolveHost, deadline, deps.config.webhookAllowLoopback),
      deadline,
    )
    if (verdict === 'timeout') return { status: null, reason: 'timeout' }
    if (!verdict.ok) return { status: null, reason: 'blocked' }
    const headers: Record<string, string | number> = {
      'Content-Type': 'application/json',
      'Content-Length': Buffer.byteLength(item.body),
      'User-Agent': userAgent,
      'X-Service-Signature': signatureHeader(secrets, item.body, now),
      'X-Service-Event-Id': item.event_id,
      'X-Service-Event-Type': item.event_type,
    }
    // Extensions, only on the deliveries they describe: a first delivery carries the spec's headers alone.
    if (item.redelivery_of) headers[redeliveryHeader] = item.redelivery_of
    if (item.operation_id) headers[operationHeader] = item.operation_id
    return postWebhook(verdict.url, { body: item.body, headers, pinnedAddress: verdict.addresses[0] }, deadline)
  }
}
