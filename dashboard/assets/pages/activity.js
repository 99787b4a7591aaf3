import { call } from '../api.js'
import { formatTime, hasRoleAtLeast } from '../format.js'
import { html, Link, ListStatus, Pager, Table, useCursorPages, useLoad } from '../ui.js'

/** A job row links to its page; other targets are shown as their id. */
function Target({ project, row }) {
  if (!row.target_id) return '—'
  if (row.target_type === 'job') return html`<${Link} to=${`/projects/${project.id}/jobs/${row.target_id}`}><code>${row.target_id}</code></${Link}>`
  return html`<span class="muted small">${row.target_type}</span> <code>${row.target_id}</code>`
}

export function ActivityPage({ project }) {
  const pages = useCursorPages()
  const cursor = pages.cursor
  const { data, error, loading } = useLoad(
    () => call('GET', '/jobsvc/v1/activity', { project: project.id, query: { limit: 50, cursor } }),
    [project.id, cursor],
  )
  return html`<section aria-labelledby="activity-title">
    <h1 id="activity-title">Activity</h1>
    ${
      hasRoleAtLeast(project.role, 'admin')
        ? html`<p>What happened in this project, newest first: jobs, schedules, alerts, webhooks, keys, team and billing.</p>`
        : html`<p>
            What happened to this project's jobs, schedules and alerts, newest first. Webhooks, keys, the team and billing are in the trail shown to
            admins and the owner.
          </p>`
    }
    <${ListStatus} error=${error} loading=${loading} rows=${data?.data} what="Loading activity" empty="Nothing has happened yet." />
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
    <${Pager} pages=${pages} page=${data} label="Activity pages" />
  </section>`
}
