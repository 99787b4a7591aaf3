import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatTime } from '../format.js'
import { ErrorNotice, html, Link, Loading, Table, useLoad } from '../ui.js'

/** A job row links to its page; other targets are shown as their id. */
function Target({ project, row }) {
  if (!row.target_id) return '—'
  if (row.target_type === 'job') return html`<${Link} to=${`/projects/${project.id}/jobs/${row.target_id}`}><code>${row.target_id}</code></${Link}>`
  return html`<span class="muted small">${row.target_type}</span> <code>${row.target_id}</code>`
}

export function ActivityPage({ project }) {
  const [cursors, setCursors] = useState([])
  const cursor = cursors[cursors.length - 1] ?? null
  const { data, error, loading } = useLoad(
    () => call('GET', '/jobsvc/v1/activity', { project: project.id, query: { limit: 50, cursor } }),
    [project.id, cursor],
  )
  return html`<section aria-labelledby="activity-title">
    <h1 id="activity-title">Activity</h1>
    <p>What happened in this project, newest first: jobs, schedules, alerts, keys, team and billing.</p>
    <${ErrorNotice} error=${error} />
    ${loading && !data ? html`<${Loading} what="Loading activity" />` : null}
    ${data && data.data.length === 0 ? html`<p class="empty">Nothing has happened yet.</p>` : null}
    ${
      data && data.data.length > 0
        ? html`<${Table} className="activity" busy=${loading} columns=${['When', 'What', 'Summary', 'Target']}>
            ${data.data.map(
              (row) =>
                html`<tr data-kind=${row.kind}>
                  <td>${formatTime(row.created_at)}</td>
                  <td>${row.kind.replaceAll('_', ' ')}</td>
                  <td>${row.summary}</td>
                  <td><${Target} project=${project} row=${row} /></td>
                </tr>`,
            )}
          </${Table}>`
        : null
    }
    <nav class="pager" aria-label="Activity pages">
      <button type="button" disabled=${cursors.length === 0} onClick=${() => setCursors(cursors.slice(0, -1))}>Newer</button>
      <button type="button" disabled=${!data?.has_more} onClick=${() => setCursors([...cursors, data.next_cursor])}>Older</button>
    </nav>
  </section>`
}
