import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatTime, hasRoleAtLeast } from '../format.js'
import { DeleteCell, ErrorNotice, html, ListStatus, RowsTable, useProjectCollection, useSubmit } from '../ui.js'
import { Field } from './account.js'

const kinds = {
  dead_letter_count: 'Jobs dead-lettered in the window',
  queue_depth: 'Pending jobs',
  oldest_pending_age: 'Age of the oldest pending job (s)',
}

export function AlertsPage({ project }) {
  const { data, error, loading, reload, remove } = useProjectCollection(project, '/jobsvc/v1/alerts')
  const mayChange = hasRoleAtLeast(project.role, 'member')
  return html`<section aria-labelledby="alerts-title">
    <h1 id="alerts-title">Alerts</h1>
    <${ListStatus} error=${error ?? remove.error} loading=${loading} rows=${data?.data} what="Loading alerts" empty="No alerts." />
    <${RowsTable}
      className="alerts"
      busy=${loading}
      columns=${['Name', 'Measure', 'Threshold', 'Status', 'Last value', 'Last fired', '']}
      rows=${data?.data}
      row=${(a) =>
        html`<tr data-alert=${a.id}>
          <td>${a.name}${a.enabled ? '' : html` <span class="muted small">(off)</span>`}</td>
          <td>${kinds[a.kind] ?? a.kind}${a.queue ? html` <span class="muted small">on ${a.queue}</span>` : null}</td>
          <td>${a.threshold} <span class="muted small">/ ${a.window_minutes} min</span></td>
          <td><span class=${`badge ${a.status === 'firing' ? 'state-dead_letter' : 'state-succeeded'}`}>${a.status}</span></td>
          <td>${a.last_value ?? '—'}</td>
          <td>${formatTime(a.last_triggered_at)}</td>
          <${DeleteCell} allowed=${mayChange} label=${`Delete the alert ${a.name}`} action=${remove} id=${a.id} />
        </tr>`}
    />
    ${mayChange ? html`<${AlertForm} project=${project} onSaved=${reload} />` : html`<p class="muted">Changing alerts needs the role member or above.</p>`}
  </section>`
}

function AlertForm({ project, onSaved }) {
  const [draft, setDraft] = useState({ name: '', kind: 'dead_letter_count', queue: '', threshold: '0', window_minutes: '60', email: '' })
  const save = useSubmit(async () => {
    const email = draft.email
      .split(',')
      .map((address) => address.trim())
      .filter((address) => address !== '')
    const body = {
      name: draft.name,
      kind: draft.kind,
      queue: draft.queue === '' ? null : draft.queue,
      threshold: Number(draft.threshold),
      window_minutes: Number(draft.window_minutes),
      email,
    }
    await call('POST', '/jobsvc/v1/alerts', { project: project.id, body })
    setDraft({ ...draft, name: '', email: '' })
    onSaved()
  })
  const set = (key) => (value) => setDraft({ ...draft, [key]: value })
  return html`<form onSubmit=${save.submit} aria-labelledby="new-alert-title" class="panel">
    <h2 id="new-alert-title">New alert</h2>
    <${Field} label="Name" name="name" maxlength="100" required value=${draft.name} onValue=${set('name')} />
    <label class="field"
      ><span>Measure</span>
      <select name="kind" value=${draft.kind} onChange=${(e) => set('kind')(e.target.value)}>
        ${Object.entries(kinds).map(([value, label]) => html`<option value=${value}>${label}</option>`)}
      </select>
    </label>
    <${Field} label="Queue (empty: all queues)" name="queue" value=${draft.queue} onValue=${set('queue')} />
    <${Field} label="Fires above" type="number" name="threshold" min="0" step="1" required value=${draft.threshold} onValue=${set('threshold')} />
    <${Field}
      label="Window (minutes)"
      type="number"
      name="window_minutes"
      min="1"
      max="1440"
      required
      value=${draft.window_minutes}
      onValue=${set('window_minutes')}
    />
    <${Field} label="E-mail members (comma-separated)" name="email" value=${draft.email} onValue=${set('email')} />
    <${ErrorNotice} error=${save.error} />
    <button type="submit" disabled=${save.busy}>Create the alert</button>
  </form>`
}
