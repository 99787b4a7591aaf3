import type { Webhook } from '../../../domain/webhook.ts'
import { decryptAtRest } from '../../infrastructure/secrets.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { webhookSealKey } from '../../use-cases/webhooks/webhook-service.ts'

/**
 * Opens subscriptions' sealed secrets for signing. A secret sealed under another JOBSVC_SECRET
 * (a restart with a generated one, or roles given different ones) never opens here, so retrying
 * is pointless; each such secret is reported once per process, not once per delivery.
 */
export class SigningSecrets {
  readonly #deps: Deps
  readonly #sealKey: Uint8Array
  readonly #unsealableReported = new Set<string>()

  constructor(deps: Deps) {
    this.#deps = deps
    this.#sealKey = webhookSealKey(deps.config.secret)
  }

  /**
   * The secrets to sign with at `now`, newest first; null when the current one cannot be opened
   * (the attempt then fails for good). A previous secret still in its grace period that cannot
   * be opened is left out of the header; the current one still signs.
   */
  of(hook: Webhook, now: Date): string[] | null {
    const current = this.#unseal(hook.secret_encrypted)
    if (current === null) {
      if (this.#isFirstReport(hook.secret_encrypted)) {
        this.#deps.log.error(
          { project_id: hook.project_id, webhook_id: hook.id },
          'dispatcher: the subscription secret was sealed with another JOBSVC_SECRET and cannot be opened; its deliveries fail until the secret is rotated',
        )
      }
      return null
    }
    const secrets = [current]
    if (hook.previous_secret_encrypted && hook.previous_secret_expires_at && Date.parse(hook.previous_secret_expires_at) > now.getTime()) {
      const previous = this.#unseal(hook.previous_secret_encrypted)
      if (previous !== null) secrets.push(previous)
      else if (this.#isFirstReport(hook.previous_secret_encrypted)) {
        this.#deps.log.warn(
          { project_id: hook.project_id, webhook_id: hook.id },
          'dispatcher: the previous secret of a rotated subscription was sealed with another JOBSVC_SECRET; deliveries are signed with the current secret only',
        )
      }
    }
    return secrets
  }

  /** The plaintext of a sealed secret, or null when this install's key cannot open it. */
  #unseal(sealed: string): string | null {
    try {
      return decryptAtRest(this.#sealKey, sealed)
    } catch {
      return null
    }
  }

  #isFirstReport(sealed: string): boolean {
    if (this.#unsealableReported.has(sealed)) return false
    this.#unsealableReported.add(sealed)
    return true
  }
}
