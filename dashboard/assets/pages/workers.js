import { call } from '../api.js'
import { formatTime } from '../format.js'
import { html, Link, ListStatus, RowsTable, useEvery, useLoad } from '../ui.js'

/**
 * The project's workers seen in the last hour (GET /jobsvc/v1/workers): read again every
 * `refreshMs` while the page is open, so a worker that starts, stops or takes a job shows up
 * without a reload. Each read is one request of the project's hourly limit.
 */
const refreshMs = 5000

const statusClass = { active: 'state-succeeded', gone: 'state-failed' }

const WorkerStatus = ({ status }) => html`<span class=${`badge ${statusClass[status] ?? ''}`} data-status=${status}>${status}</span>`

function RunningJobs({ project, running }) {
  if (running.length === 0) return html`<span class="muted">idle</span>`
  return html`<ul class="plain">
    ${running.map(
      (job) =>
        html`<li>
          <${Link} to=${`/projects/${project.id}/jobs/${encodeURIComponent(job.job_id)}`}><code>${job.job_id}</code></${Link}>
          <span class="muted small"> ${job.job_type}, heartbeat ${job.last_heartbeat_at ? formatTime(job.last_heartbeat_at) : 'none yet'}</span>
        </li>`,
    )}
  </ul>`
}

export function WorkersPage({ project }) {
  const { data, error, loading, reload } = useLoad(() => call('GET', '/jobsvc/v1/workers', { project: project.id }), [project.id])
  useEvery(refreshMs, true, reload)
  const rows = data?.data
  return html`<section aria-labelledby="workers-title">
    <h1 id="workers-title">Workers</h1>
    <p class="muted">
      Every worker seen in the last hour, most recent first; one silent for 90 s is shown gone. Refreshed every ${refreshMs / 1000} s.
    </p>
    <${ListStatus}
      error=${error}
      loading=${loading}
      rows=${rows}
      what="Loading the workers"
      empty="No worker has polled this project in the last hour. Start one with an SDK (see the API key page)."
    />
    <${RowsTable}
      className="workers"
      columns=${['Worker', 'Status', 'Host', 'Queues', 'Running', 'Last seen', 'Last hour']}
      rows=${rows}
      row=${(w) =>
        html`<tr data-worker=${w.worker_id}>
          <td><code>${w.worker_id}</code>${w.sdk_version ? html`<div class="muted small">${w.sdk_version}</div>` : null}</td>
          <td><${WorkerStatus} status=${w.status} /></td>
          <td>${w.hostname ?? html`<span class="muted">—</span>`}</td>
          <td>${w.queues.join(', ')}${w.job_types.length > 0 ? html`<div class="muted small">${w.job_types.join(', ')}</div>` : null}</td>
          <td data-running=${w.running.length}><${RunningJobs} project=${project} running=${w.running} /></td>
          <td>${formatTime(w.last_seen_at)}</td>
          <td data-finished>${w.finished_last_hour.succeeded} succeeded, ${w.finished_last_hour.failed} failed</td>
        </tr>`}
    />
  </section>`
}
