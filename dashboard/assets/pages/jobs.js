import { useEffect, useState } from 'preact/hooks'
import { call, followJob } from '../api.js'
import { formatDuration, formatTime, hasRoleAtLeast, jobStates } from '../format.js'
import { ErrorNotice, html, Link, ListStatus, Loading, navigate, Pager, Table, useCursorPages, useEvery, useLoad, useSubmit } from '../ui.js'

/** How often the first page of the list is read again (each read is a request of the project's hourly limit). */
const listRefreshMs = 5000

const windows = { '': 'Any time', '1h': 'Last hour', '24h': 'Last 24 hours', '7d': 'Last 7 days', '30d': 'Last 30 days' }
const windowMs = { '1h': 3_600_000, '24h': 86_400_000, '7d': 7 * 86_400_000, '30d': 30 * 86_400_000 }

const StateBadge = ({ state }) => html`<span class=${`badge state-${state}`} data-state=${state}>${state.replace('_', ' ')}</span>`

function filtersFromLocation() {
  const params = new URLSearchParams(location.search)
  return {
    state: params.get('state') ?? '',
    queue: params.get('queue') ?? '',
    job_type: params.get('job_type') ?? '',
    window: params.get('window') ?? '',
  }
}

export function JobsPage({ project }) {
  const [filters, setFilters] = useState(filtersFromLocation)
  const [draft, setDraft] = useState(filters)
  const pages = useCursorPages()
  const cursor = pages.cursor
  const { data, error, loading, reload } = useLoad(() => {
    const query = { state: filters.state, queue: filters.queue, job_type: filters.job_type, limit: 25, cursor }
    if (filters.window) query.created_after = new Date(Date.now() - windowMs[filters.window]).toISOString()
    return call('GET', '/jobsvc/v1/jobs', { project: project.id, query })
  }, [project.id, filters, cursor])
  // The newest page follows new jobs and state changes by itself; an older page stays put while read.
  useEvery(listRefreshMs, cursor === null, reload)
  const apply = (event) => {
    event.preventDefault()
    const params = new URLSearchParams(Object.entries(draft).filter(([, v]) => v !== ''))
    navigate(`/projects/${project.id}/jobs${params.size ? `?${params}` : ''}`, { replace: true })
    pages.reset()
    setFilters(draft)
  }
  const set = (key) => (event) => setDraft({ ...draft, [key]: event.target.value })
  return html`<section aria-labelledby="jobs-title">
    <h1 id="jobs-title">Jobs</h1>
    <form class="filters" onSubmit=${apply} aria-label="Filter jobs">
      <label class="field"
        ><span>State</span>
        <select name="state" value=${draft.state} onChange=${set('state')}>
          <option value="">Any state</option>
          ${jobStates.map((s) => html`<option value=${s}>${s.replace('_', ' ')}</option>`)}
        </select>
      </label>
      <label class="field"><span>Queue</span><input name="queue" value=${draft.queue} onInput=${set('queue')} placeholder="any" /></label>
      <label class="field"><span>Type</span><input name="job_type" value=${draft.job_type} onInput=${set('job_type')} placeholder="any" /></label>
      <label class="field"
        ><span>Created</span>
        <select name="window" value=${draft.window} onChange=${set('window')}>
          ${Object.entries(windows).map(([value, label]) => html`<option value=${value}>${label}</option>`)}
        </select>
      </label>
      <button type="submit">Apply</button>
    </form>
    <${ListStatus} error=${error} loading=${loading} rows=${data?.data} what="Loading jobs" empty="No jobs match these filters." />
    ${
      data && data.data.length > 0
        ? html`<${Table} className="jobs" busy=${loading} columns=${['Job', 'State', 'Type', 'Queue', 'Attempt', 'Created']}>
                ${data.data.map(
                  (job) => html`<tr data-job=${job.id}>
                  <td><${Link} to=${`/projects/${project.id}/jobs/${job.id}`}><code>${job.id}</code></${Link}></td>
                  <td><${StateBadge} state=${job.state} /></td>
                  <td>${job.job_type}</td>
                  <td>${job.queue}</td>
                  <td>${job.attempt}/${job.max_attempts}</td>
                  <td>${formatTime(job.created_at)}</td>
                </tr>`,
                )}
          </${Table}>`
        : null
    }
    <${Pager} pages=${pages} page=${data} />
  </section>`
}

function Timeline({ events }) {
  if (events.length === 0) return html`<p class="empty">No events yet.</p>`
  return html`<ol class="timeline">
    ${events.map(
      (event) =>
        html`<li data-event=${event.type}>
          <span class="event-type">${event.type.replace(/^job_/, '').replaceAll('_', ' ')}</span>
          <time datetime=${event.time}>${formatTime(event.time)}</time>
          ${
            event.data?.error
              ? html`<p class="attempt-error">
                  attempt ${event.data.attempt}: <strong>${event.data.error.type}</strong>: ${event.data.error.message}
                </p>`
              : null
          }
          ${
            Object.keys(event.data).length > 0
              ? html`<details>
                  <summary>Details</summary>
                  <pre>${JSON.stringify(event.data, null, 2)}</pre>
                </details>`
              : null
          }
        </li>`,
    )}
  </ol>`
}

const isFinal = (state) => ['succeeded', 'cancelled', 'dead_letter', 'failed'].includes(state)

export function JobPage({ project, jobId }) {
  const { data, error, loading, reload } = useLoad(async () => {
    const [job, history] = await Promise.all([
      call('GET', `/jobsvc/v1/jobs/${encodeURIComponent(jobId)}`, { project: project.id }),
      call('GET', `/jobsvc/v1/jobs/${encodeURIComponent(jobId)}/history`, { project: project.id, query: { limit: 100 } }),
    ])
    return { job, history }
  }, [project.id, jobId])
  const [live, setLive] = useState(null)
  // Bumped after a retry: the previous stream ended with the job's final state, a new one follows the new run.
  const [run, setRun] = useState(0)
  useEffect(() => {
    if (!data || (isFinal(data.job.state) && run === 0)) return
    const controller = new AbortController()
    followJob(project.id, jobId, setLive, controller.signal)
      .catch(() => {})
      .finally(() => !controller.signal.aborted && reload())
    return () => controller.abort()
  }, [data?.job.id, run])
  const act = useSubmit(async (action) => {
    await call('POST', `/jobsvc/v1/jobs/${encodeURIComponent(jobId)}/${action}`, { project: project.id })
    setLive(null)
    setRun((n) => n + 1)
    reload()
  })
  if (error) return html`<${ErrorNotice} error=${error} />`
  if (!data) return html`<${Loading} what="Loading the job" />`
  const { job, history } = data
  const state = live?.state ?? job.state
  const progress = live ? live.progress : job.progress
  const mayAct = hasRoleAtLeast(project.role, 'member')
  return html`<section aria-labelledby="job-title">
    <p><${Link} to=${`/projects/${project.id}/jobs`}>← Jobs</${Link}></p>
    <h1 id="job-title"><code>${job.id}</code></h1>
    <div class="job-head">
      <span aria-live="polite" id="job-state"><${StateBadge} state=${state} /></span>
      ${progress !== null && progress !== undefined ? html`<progress max="1" value=${progress} aria-label="Progress">${Math.round(progress * 100)}%</progress>` : null}
      ${
        mayAct && ['failed', 'dead_letter'].includes(state)
          ? html`<button type="button" onClick=${() => act.submit('retry')} disabled=${act.busy}>Retry</button>`
          : null
      }
      ${mayAct && ['pending', 'scheduled'].includes(state) ? html`<button type="button" class="danger" onClick=${() => act.submit('cancel')} disabled=${act.busy}>Cancel</button>` : null}
    </div>
    <${ErrorNotice} error=${act.error} />
    <dl class="details">
      <div><dt>Type</dt><dd>${job.job_type}</dd></div>
      <div><dt>Queue</dt><dd>${job.queue}</dd></div>
      <div><dt>Attempt</dt><dd>${live?.attempt ?? job.attempt} of ${live?.max_attempts ?? job.max_attempts}</dd></div>
      <div><dt>Created</dt><dd>${formatTime(job.created_at)}</dd></div>
      <div><dt>Started</dt><dd>${formatTime(job.started_at)}</dd></div>
      <div><dt>Completed</dt><dd>${formatTime(job.completed_at)}</dd></div>
      <div><dt>Duration</dt><dd>${formatDuration(job.duration_ms)}</dd></div>
      <div><dt>Timeout</dt><dd data-field="timeout">${job.timeout_seconds} s</dd></div>
      <div><dt>Run at</dt><dd>${job.run_at ? formatTime(job.run_at) : 'immediately'}</dd></div>
      <div><dt>Worker</dt><dd data-field="worker">${job.worker_id ?? '—'}</dd></div>
      <div>
        <dt>Parent</dt>
        <dd data-field="parent">
          ${job.parent_job_id ? html`<${Link} to=${`/projects/${project.id}/jobs/${encodeURIComponent(job.parent_job_id)}`}><code>${job.parent_job_id}</code></${Link}>` : '—'}
        </dd>
      </div>
      <div><dt>Trace</dt><dd data-field="trace">${job.traceparent ? html`<code>${job.traceparent.split('-')[1]}</code>` : '—'}</dd></div>
      <div>
        <dt>Tags</dt>
        <dd data-field="tags">
          ${job.tags && Object.keys(job.tags).length > 0 ? Object.entries(job.tags).map(([k, v]) => html`<span class="tag"><code>${k}=${v}</code></span> `) : '—'}
        </dd>
      </div>
    </dl>
    ${
      job.error
        ? html`<h2>Error</h2>
            <div class="job-error">
              <p><strong>${job.error.type}</strong>: ${job.error.message}</p>
              ${job.error.stack_trace ? html`<pre class="stack">${job.error.stack_trace}</pre>` : null}
            </div>`
        : null
    }
    ${
      job.result !== null && job.result !== undefined
        ? html`<h2>Result</h2>
            <pre class="result">${JSON.stringify(job.result, null, 2)}</pre>`
        : null
    }
    <h2>Payload</h2>
    <pre class="payload">${JSON.stringify(job.payload, null, 2)}</pre>
    <h2>History ${loading ? html`<span class="muted small">(refreshing)</span>` : null}</h2>
    <${Timeline} events=${history.data} />
  </section>`
}
