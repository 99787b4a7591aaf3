import { randomBytes } from 'node:crypto'
import type { Actor } from '../../../domain/decider.ts'
import { WebhookLimitReached, WebhookNotFound } from '../../../domain/errors.ts'
import { maxWebhooksPerProject, type EventFilter, type Webhook, type WebhookCommand, type WebhookEvent } from '../../../domain/webhook.ts'
import type { Queryable } from '../../../projections/database.ts'
import { applyWebhookRows, webhookSubscriptions } from '../../../projections/webhooks.ts'
import type { CommandResult } from '../../../streams/aggregate-handler.ts'
import { webhookHandler } from '../../../streams/aggregates.ts'
import { commandWithRows } from '../../infrastructure/command-with-rows.ts'
import { deriveKey, encryptAtRest } from '../../infrastructure/secrets.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

const webhookIdPattern = /^whk_[0-9a-z]{26}$/

/** The key that seals subscription secrets at rest; the dispatcher opens them with the same one. */
export function webhookSealKey(secret: string): Uint8Array {
  return deriveKey(secret, 'webhook-secret-at-rest')
}

/** Subscriptions: commands on the webhook aggregate; secrets leave only in create and rotate answers. */
export class WebhookService {
  readonly #deps: Deps
  readonly #sealKey: Uint8Array

  constructor(deps: Deps) {
    this.#deps = deps
    this.#sealKey = webhookSealKey(deps.config.secret)
  }

  #newSecret(): { secret: string; sealed: string } {
    const secret = `whsec_${randomBytes(32).toString('base64url')}`
    return { secret, sealed: encryptAtRest(this.#sealKey, secret) }
  }

  async #on(
    projectId: string,
    webhookId: string,
    command: WebhookCommand,
    db: Queryable = this.#deps.sql,
  ): Promise<CommandResult<WebhookEvent, Webhook>> {
    if (!webhookIdPattern.test(webhookId)) throw new WebhookNotFound(`webhook ${webhookId} was not found`)
    return commandWithRows(this.#deps, webhookHandler, webhookHandler.ref(projectId, webhookId), command, applyWebhookRows, db)
  }

  /** `actor`: the dashboard member who asked, recorded on the events (none for an API key). */
  #meta(actor: Actor | undefined) {
    return { now: this.#deps.now().toISOString(), actor }
  }

  /**
   * Refused with `webhook_limit_reached` when the project already has `maxWebhooksPerProject`
   * subscriptions. The count and the create run under a per-project advisory lock, and the new
   * row is written in the same transaction, so concurrent creates (in any process) are counted
   * one after the other and cannot both take the last place.
   */
  async create(
    projectId: string,
    input: { url: string; events: EventFilter },
    actor?: Actor,
  ): Promise<{ result: CommandResult<WebhookEvent, Webhook>; secret: string }> {
    const webhookId = `whk_${this.#deps.newUlid().toLowerCase()}`
    const { secret, sealed } = this.#newSecret()
    const result = await this.#deps.sql.begin(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(hashtext('webhook_subscriptions'), hashtext(${projectId}))`
      if ((await webhookSubscriptions.liveCount(tx, projectId)) >= maxWebhooksPerProject) {
        throw new WebhookLimitReached(`a project can have at most ${maxWebhooksPerProject} webhook subscriptions; delete one to add another`)
      }
      return this.#on(
        projectId,
        webhookId,
        {
          type: 'create_webhook',
          data: { webhook_id: webhookId, project_id: projectId, url: input.url, events: input.events, secret_encrypted: sealed },
          meta: this.#meta(actor),
        },
        tx,
      )
    })
    return { result, secret }
  }

  async load(projectId: string, webhookId: string): Promise<Webhook> {
    const hook = webhookIdPattern.test(webhookId)
      ? (await webhookHandler.load(this.#deps.store, webhookHandler.ref(projectId, webhookId))).state
      : null
    if (hook === null || hook.deleted) throw new WebhookNotFound(`webhook ${webhookId} was not found`)
    return hook
  }

  update(projectId: string, webhookId: string, changes: { url?: string; events?: EventFilter; is_active?: boolean }, actor?: Actor) {
    return this.#on(projectId, webhookId, { type: 'update_webhook', data: changes, meta: this.#meta(actor) })
  }

  async rotateSecret(projectId: string, webhookId: string, actor?: Actor): Promise<{ result: CommandResult<WebhookEvent, Webhook>; secret: string }> {
    const { secret, sealed } = this.#newSecret()
    const result = await this.#on(projectId, webhookId, {
      type: 'rotate_webhook_secret',
      data: { secret_encrypted: sealed },
      meta: this.#meta(actor),
    })
    return { result, secret }
  }

  delete(projectId: string, webhookId: string, actor?: Actor) {
    return this.#on(projectId, webhookId, { type: 'delete_webhook', data: {}, meta: this.#meta(actor) })
  }
}
