import { call } from '../api.js'
import { formatTime, hasRoleAtLeast } from '../format.js'
import { useState } from 'preact/hooks'
import { html, Link, ListStatus, Pager, Table, useCursorPages, useLoad } from '../ui.js'

/** What the feed can be narrowed to: the kinds of each group (GET /jobsvc/v1/activity?kinds=…). */
const kindGroups = {
  '': { label: 'Every kind', kinds: null },
  jobs: { label: 'Jobs', kinds: ['job_created', 'job_cancelled', 'job_retried', 'jobs_exported'] },
  schedules: { label: 'Schedules and alerts', kinds: ['recurring_upserted', 'recurring_deleted', 'alert_created', 'alert_updated', 'alert_deleted'] },
  webhooks: { label: 'Webhooks', kinds: ['webhook_created', 'webhook_updated', 'webhook_secret_rotated', 'webhook_deleted'] },
  access: {
    label: 'Keys and team',
    kinds: [
      'api_key_rotated',
      'api_key_revoked',
      'member_invited',
      'team_invite_accepted',
      'member_joined',
      'member_role_changed',
      'member_removed',
      'ownership_transferred',
    ],
  },
  billing: {
    label: 'Plan and billing',
    kinds: [
      'admin_plan_changed',
      'admin_rate_limit_override',
      'promo_code_applied',
      'overage_enabled',
      'overage_disabled',
      'spend_cap_updated',
      'overage_charged',
      'billing_period_reset',
    ],
  },
}

/** A job or queue row links to its page; other targets are shown as their id. */
function Target({ project, row }) {
  if (!row.target_id) return '—'
  if (row.target_type === 'job') return html`<${Link} to=${`/projects/${project.id}/jobs/${row.target_id}`}><code>${row.target_id}</code></${Link}>`
  if (row.target_type === 'queue')
    return html`<span class="muted small">queue</span> <${Link} to=${`/projects/${project.id}/queues/${encodeURIComponent(row.target_id)}`}><code>${row.target_id}</code></${Link}>`
  return html`<span class="muted small">${row.target_type}</span> <code>${row.target_id}</code>`
}

export function ActivityPage({ project }) {
  const pages = useCursorPages()
  const cursor = pages.cursor
  const [group, setGroup] = useState('')
  // Job creations drown everything else in a busy project: left out unless asked for.
  const [withCreations, setWithCreations] = useState(false)
  const { data, error, loading } = useLoad(() => {
    const kinds = kindGroups[group].kinds
    const query = { limit: 50, cursor }
    if (kinds !== null) query.kinds = (withCreations ? kinds : kinds.filter((k) => k !== 'job_created')).join(',')
    else if (!withCreations) query.exclude_kinds = 'job_created'
    return call('GET', '/jobsvc/v1/activity', { project: project.id, query })
  }, [project.id, cursor, group, withCreations])
  const change = (apply) => (event) => {
    pages.reset()
    apply(event)
  }
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
    <form class="filters" aria-label="Filter activity" onSubmit=${(e) => e.preventDefault()}>
      <label class="field"
        ><span>Kind</span>
        <select name="group" value=${group} onChange=${change((e) => setGroup(e.target.value))}>
          ${Object.entries(kindGroups).map(([value, g]) => html`<option value=${value}>${g.label}</option>`)}
        </select>
      </label>
      <label class="check"
        ><input type="checkbox" name="with_creations" checked=${withCreations} onChange=${change((e) => setWithCreations(e.target.checked))} /> Show
        job creations</label
      >
    </form>
    <${ListStatus} error=${error} loading=${loading} rows=${data?.data} what="Loading activity" empty="Nothing of these kinds has happened yet." />
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
