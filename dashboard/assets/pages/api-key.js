import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatTime, hasRoleAtLeast } from '../format.js'
import { ErrorNotice, html, useSubmit } from '../ui.js'
import { SecretOnce } from './account.js'

export function ApiKeyPage({ project, onProjectChanged }) {
  const [rotated, setRotated] = useState(null)
  const [confirmRevoke, setConfirmRevoke] = useState(false)
  const mayManage = hasRoleAtLeast(project.role, 'admin')
  const rotate = useSubmit(async () => {
    setRotated(await call('POST', `/platform/v1/projects/${project.id}/keys/rotate`))
    await onProjectChanged()
  })
  const revoke = useSubmit(async () => {
    await call('DELETE', `/platform/v1/projects/${project.id}/keys/revoke`)
    setConfirmRevoke(false)
    setRotated(null)
    await onProjectChanged()
  })
  return html`<section aria-labelledby="key-title">
    <h1 id="key-title">API key</h1>
    <p>
      Workers and back-ends use the project's API key. The dashboard never holds it: it acts with your session and your role
      (<strong>${project.role}</strong>).
    </p>
    ${
      project.keys_revoked_at
        ? html`<p class="notice">Every key of this project was revoked on ${formatTime(project.keys_revoked_at)}.</p>`
        : html`<p>Current key: <code data-key-prefix>${project.api_key_prefix}…</code></p>`
    }
    ${
      rotated
        ? html`<div role="status">
            <p>New key, created ${formatTime(rotated.rotated_at)}. The previous key keeps working for 24 hours.</p>
            <${SecretOnce} value=${rotated.api_key} />
          </div>`
        : null
    }
    ${
      mayManage && !project.keys_revoked_at
        ? html`<div class="actions">
            <button type="button" onClick=${rotate.submit} disabled=${rotate.busy}>Rotate the key</button>
            ${
              confirmRevoke
                ? html`<span class="confirm"
                    >Revoke every key now? Workers stop at once.
                    <button type="button" class="danger" onClick=${revoke.submit} disabled=${revoke.busy}>Revoke</button>
                    <button type="button" onClick=${() => setConfirmRevoke(false)}>Keep them</button></span
                  >`
                : html`<button type="button" class="danger" onClick=${() => setConfirmRevoke(true)}>Revoke…</button>`
            }
          </div>`
        : null
    }
    ${!mayManage ? html`<p class="muted">Rotating and revoking keys needs the role admin or owner.</p>` : null}
    <${ErrorNotice} error=${rotate.error ?? revoke.error} />
  </section>`
}
