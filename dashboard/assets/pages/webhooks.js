import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatTime, hasRoleAtLeast, namedOnlyWebhookEventTypes, webhookEventTypes } from '../format.js'
import { ErrorNotice, Facts, html, Link, ListStatus, Loading, navigate, RowsTable, useLoad, useSubmit } from '../ui.js'
import { Field, SecretOnce } from './account.js'
import { OperationList } from './operations.js'
import { Deliveries } from './webhook-deliveries.js'
import { Replay } from './webhook-replay.js'

const eventsLabel = (events) => (events === '*' ? 'every event' : events.join(', '))

const ActiveBadge = ({ active }) =>
  html`<span class=${`badge ${active ? 'state-succeeded' : 'state-cancelled'}`}>${active ? 'active' : 'paused'}</span>`

function NewWebhook({ project, onCreated }) {
  const [url, setUrl] = useState('')
  const [events, setEvents] = useState([])
  const create = useSubmit(async () => {
    const created = await call('POST', '/jobsvc/v1/webhooks', { project: project.id, body: { url, events: events.length === 0 ? '*' : events } })
    setUrl('')
    setEvents([])
    onCreated(created)
  })
  const toggle = (type) => (e) => setEvents(e.target.checked ? [...events, type] : events.filter((t) => t !== type))
  return html`<form onSubmit=${create.submit} aria-labelledby="new-webhook-title" class="panel">
    <h2 id="new-webhook-title">New webhook</h2>
    <${Field} label="URL" type="url" name="url" placeholder="https://example.com/jobsvc" maxlength="2048" required value=${url} onValue=${setUrl} />
    <fieldset>
      <legend>Events (none ticked: every event but ${namedOnlyWebhookEventTypes.join(', ')})</legend>
      ${webhookEventTypes.map((type) => html`<label class="check"><input type="checkbox" name="events" value=${type} checked=${events.includes(type)} onChange=${toggle(type)} /> ${type}</label>`)}
    </fieldset>
    <${ErrorNotice} error=${create.error} />
    <button type="submit" disabled=${create.busy}>Create the webhook</button>
  </form>`
}

/** Webhooks are project settings: their routes, reads included, need the role admin (services/roles/api/routes/webhooks.ts). */
const AdminsOnly = () =>
  html`<section aria-labelledby="webhooks-title">
    <h1 id="webhooks-title">Webhooks</h1>
    <p class="muted">Webhooks are shown to the project's admins and owner only.</p>
  </section>`

export const WebhooksPage = ({ project }) =>
  hasRoleAtLeast(project.role, 'admin') ? html`<${WebhookList} project=${project} />` : html`<${AdminsOnly} />`

export const WebhookPage = ({ project, webhookId }) =>
  hasRoleAtLeast(project.role, 'admin') ? html`<${Webhook} project=${project} webhookId=${webhookId} />` : html`<${AdminsOnly} />`

function WebhookList({ project }) {
  const { data, error, loading, reload } = useLoad(() => call('GET', '/jobsvc/v1/webhooks', { project: project.id }), [project.id])
  const [created, setCreated] = useState(null)
  const onCreated = (webhook) => {
    setCreated(webhook)
    reload()
  }
  return html`<section aria-labelledby="webhooks-title">
    <h1 id="webhooks-title">Webhooks</h1>
    <p>Each subscription receives the project's job and alert events as signed POSTs.</p>
    ${
      created
        ? html`<div role="status">
            <p>Webhook <code>${created.id}</code> created. Its signing secret:</p>
            <${SecretOnce} value=${created.secret} />
          </div>`
        : null
    }
    <${ListStatus} error=${error} loading=${loading} rows=${data?.data} what="Loading webhooks" empty="No webhooks yet." />
    <${RowsTable}
      className="webhooks"
      busy=${loading}
      columns=${['URL', 'Events', 'State', 'Created']}
      rows=${data?.data}
      row=${(w) => html`<tr data-webhook=${w.id}>
                <td><${Link} to=${`/projects/${project.id}/webhooks/${w.id}`}>${w.url}</${Link}></td>
                <td>${eventsLabel(w.events)}</td>
                <td><${ActiveBadge} active=${w.is_active} /></td>
                <td>${formatTime(w.created_at)}</td>
              </tr>`}
    />
    <${NewWebhook} project=${project} onCreated=${onCreated} />
    <${OperationList} project=${project} />
  </section>`
}

function Webhook({ project, webhookId }) {
  const path = `/jobsvc/v1/webhooks/${encodeURIComponent(webhookId)}`
  const { data, error, reload } = useLoad(() => call('GET', path, { project: project.id }), [project.id, webhookId])
  const [rotated, setRotated] = useState(null)
  const [confirmDelete, setConfirmDelete] = useState(false)
  // A replay's progress as one text: the deliveries are read again when it changes, not on every poll.
  const [progress, setProgress] = useState('')
  const onProgress = (op) => setProgress(`${op.status} ${op.processed} ${op.succeeded} ${op.failed}`)
  const rotate = useSubmit(async () => setRotated(await call('POST', `${path}/rotate-secret`, { project: project.id })))
  const toggle = useSubmit(async () => {
    await call('PATCH', path, { project: project.id, body: { is_active: !data.is_active } })
    reload()
  })
  const remove = useSubmit(async () => {
    await call('DELETE', path, { project: project.id })
    navigate(`/projects/${project.id}/webhooks`)
  })
  if (error) return html`<${ErrorNotice} error=${error} />`
  if (!data) return html`<${Loading} what="Loading the webhook" />`
  return html`<section aria-labelledby="webhook-title">
    <p><${Link} to=${`/projects/${project.id}/webhooks`}>← Webhooks</${Link}></p>
    <h1 id="webhook-title"><code>${data.id}</code></h1>
    <${Facts}
      items=${[
        ['URL', data.url],
        ['Events', eventsLabel(data.events)],
        ['State', html`<${ActiveBadge} active=${data.is_active} />`],
        ['Created', formatTime(data.created_at)],
      ]}
    />
    ${
      rotated
        ? html`<div role="status">
            <p>New secret. The previous one is accepted until ${formatTime(rotated.previous_secret_expires_at)}.</p>
            <${SecretOnce} value=${rotated.secret} />
          </div>`
        : null
    }
    <div class="actions">
      <button type="button" onClick=${rotate.submit} disabled=${rotate.busy}>Rotate the secret</button>
      <button type="button" onClick=${toggle.submit} disabled=${toggle.busy}>${data.is_active ? 'Pause' : 'Resume'}</button>
      ${
        confirmDelete
          ? html`<span class="confirm"
              >Delete this webhook?
              <button type="button" class="danger" onClick=${remove.submit} disabled=${remove.busy}>Delete</button>
              <button type="button" onClick=${() => setConfirmDelete(false)}>Keep it</button></span
            >`
          : html`<button type="button" class="danger" onClick=${() => setConfirmDelete(true)}>Delete…</button>`
      }
    </div>
    <${ErrorNotice} error=${rotate.error ?? toggle.error ?? remove.error} />
    <${Deliveries} key=${data.id} project=${project} webhookId=${data.id} active=${data.is_active} refreshKey=${progress} />
    <${Replay} key=${data.id} project=${project} webhook=${data} onProgress=${onProgress} />
  </section>`
}
