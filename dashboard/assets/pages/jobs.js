import { useEffect, useState } from 'preact/hooks'
import { call, followJob } from '../api.js'
import {
  concurrencyCancelNote,
  eventLabel,
  eventNote,
  formatDuration,
  formatTime,
  hasRoleAtLeast,
  jobStates,
  neverCreatedParentNote,
} from '../format.js'
import { BulkActions } from './bulk-actions.js'
import { JobGraph } from './job-graph.js'
import {
  ErrorNotice,
  html,
  Link,
  ListStatus,
  Loading,
  navigate,
  NumberForm,
  Pager,
  Table,
  useCursorPages,
  useEvery,
  useLoad,
  useSubmit,
} from '../ui.js'

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
  const createdAfter = () => (filters.window ? new Date(Date.now() - windowMs[filters.window]).toISOString() : null)
  const { data, error, loading, reload } = useLoad(() => {
    const query = { state: filters.state, queue: filters.queue, job_type: filters.job_type, limit: 25, cursor }
    if (filters.window) query.created_after = createdAfter()
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
    ${hasRoleAtLeast(project.role, 'admin') ? html`<${BulkActions} key=${JSON.stringify(filters)} project=${project} filters=${filters} createdAfter=${createdAfter()} onProgress=${reload} />` : null}
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

function EventNote({ event, job }) {
  const note = eventNote(event, job)
  return note === null ? null : html`<p class="event-note">${note}</p>`
}

function Timeline({ events, at, job }) {
  if (events.length === 0) return html`<p class="empty">No events yet.</p>`
  return html`<ol class="timeline">
    ${events.map(
      (event, i) =>
        html`<li data-event=${event.type} class=${i === at ? 'as-of-selected' : undefined} aria-current=${i === at ? 'step' : undefined}>
          <span class="event-type">${eventLabel(event.type)}</span>
          <time datetime=${event.time}>${formatTime(event.time)}</time>
          <${EventNote} event=${event} job=${job} />
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

/**
 * A slider over the job's history: one stop per event the page holds, then "now". The page shows
 * the job as of the selected event, read with `as_of=<its cursor>` (each history event carries the
 * cursor the route takes). Moving the thumb names the event under it; the job is read when it
 * stops (the change event: on release, or at each key press), so a drag costs one request.
 */
function AsOfSlider({ events, at, asOf, onPick }) {
  const [pointing, setPointing] = useState(null)
  const now = events.length
  const value = pointing ?? at ?? now
  const nameOf = (i) => (i === now ? 'now' : `${eventLabel(events[i].type)}, ${formatTime(events[i].time)}`)
  const pick = (event) => {
    const i = Number(event.target.value)
    setPointing(null)
    onPick(i === now ? null : i)
  }
  return html`<div class="as-of">
    <label class="field"
      ><span>As of</span>
      <input
        type="range"
        name="as_of"
        min="0"
        max=${now}
        step="1"
        value=${value}
        aria-valuetext=${nameOf(value)}
        onInput=${(event) => setPointing(Number(event.target.value))}
        onChange=${pick}
    /></label>
    <p class="as-of-point" aria-live="polite" data-as-of=${at === null ? 'now' : events[at].cursor}>
      ${
        at === null
          ? html`<span>Now${pointing !== null && pointing !== now ? html`: release to show the job as of ${nameOf(pointing)}` : null}</span>`
          : html`<span
                >As of <strong>${eventLabel(events[at].type)}</strong>, <time datetime=${events[at].time}>${formatTime(events[at].time)}</time></span
              >
              ${
                asOf?.as_of
                  ? html` <span class="muted small" data-field="as-of-sequence"
                      >log sequence ${asOf.as_of.sequence} of ${asOf.as_of.latest_sequence}</span
                    >`
                  : null
              }
              <button type="button" onClick=${() => onPick(null)}>Back to now</button>`
      }
    </p>
  </div>`
}

/** The job's claim-order offset (issue 28): shown always, changed by a member while the job waits. */
function PriorityField({ project, job, state, mayChange, onChanged }) {
  const save = async (priority) => {
    await call('PATCH', `/jobsvc/v1/jobs/${encodeURIComponent(job.id)}`, { project: project.id, body: { priority } })
    onChanged()
  }
  const shown = job.priority === undefined ? '0 (default)' : `${job.priority > 0 ? '+' : ''}${job.priority} s`
  return html`<dd data-field="priority" data-priority=${job.priority ?? 0}>
    ${
      mayChange && ['pending', 'scheduled'].includes(state)
        ? html`<${NumberForm}
            current=${job.priority ?? 0}
            save=${save}
            min="-600"
            max="600"
            required
            label="Priority in seconds"
            title="Claimed as if due this many seconds earlier (−600 to 600)"
            submitLabel="Set priority"
          />`
        : shown
    }
  </dd>`
}

export function JobPage({ project, jobId }) {
  const { data, error, loading, reload } = useLoad(async () => {
    const [job, history, dependencies] = await Promise.all([
      call('GET', `/jobsvc/v1/jobs/${encodeURIComponent(jobId)}`, { project: project.id }),
      call('GET', `/jobsvc/v1/jobs/${encodeURIComponent(jobId)}/history`, { project: project.id, query: { limit: 100 } }),
      call('GET', `/jobsvc/v1/jobs/${encodeURIComponent(jobId)}/dependencies`, { project: project.id }),
    ])
    // A continuation's one parent is not among its dependencies' parents (those are `depends_on`'s): its state comes from its own detail.
    // A parent retention removed is drawn without a state rather than failing the page.
    const continuationParent =
      job.parent_job_id && dependencies.parents.length === 0
        ? await call('GET', `/jobsvc/v1/jobs/${encodeURIComponent(job.parent_job_id)}`, { project: project.id }).catch((err) => {
            if (err.status === 404) return { id: job.parent_job_id, state: null }
            throw err
          })
        : null
    return { job, history, dependencies, continuationParent }
  }, [project.id, jobId])
  const [live, setLive] = useState(null)
  // Bumped after a retry: the previous stream ended with the job's final state, a new one follows the new run.
  const [run, setRun] = useState(0)
  // The history event the slider selected (its index), or null: the job now.
  const [at, setAt] = useState(null)
  const atCursor = at === null ? null : (data?.history.data[at]?.cursor ?? null)
  const past = useLoad(
    () =>
      atCursor === null
        ? Promise.resolve(null)
        : call('GET', `/jobsvc/v1/jobs/${encodeURIComponent(jobId)}`, { project: project.id, query: { as_of: atCursor } }),
    [project.id, jobId, atCursor],
  )
  useEffect(() => {
    if (!data || (isFinal(data.job.state) && run === 0)) return
    const controller = new AbortController()
    followJob(project.id, jobId, setLive, controller.signal)
      .catch(() => {})
      .finally(() => !controller.signal.aborted && reload())
    return () => controller.abort()
  }, [data?.job.id, run])
  const act = useSubmit(async (action) => {
    // Stopping a running job opts into include_running (issue 28); the spec's own cancel and retry have no body.
    const [route, body] = action === 'cancel-running' ? ['cancel', { include_running: true }] : [action, undefined]
    await call('POST', `/jobsvc/v1/jobs/${encodeURIComponent(jobId)}/${route}`, { project: project.id, body })
    setLive(null)
    setAt(null)
    setRun((n) => n + 1)
    reload()
  })
  if (error) return html`<${ErrorNotice} error=${error} />`
  if (!data) return html`<${Loading} what="Loading the job" />`
  const { history } = data
  // As of a moment the page shows that answer (the last one read while the next loads), never the live stream.
  const then = at === null ? null : past.data
  const job = then ?? data.job
  const state = then ? then.state : (live?.state ?? job.state)
  const progress = then ? then.progress : live ? live.progress : job.progress
  const mayAct = hasRoleAtLeast(project.role, 'member') && at === null
  return html`<section aria-labelledby="job-title">
    <p><${Link} to=${`/projects/${project.id}/jobs`}>← Jobs</${Link}></p>
    <h1 id="job-title"><code>${job.id}</code></h1>
    <div class="job-head">
      <span aria-live="polite" id="job-state"><${StateBadge} state=${state} /></span>
      ${
        state === 'cancelled' && job.cancel_reason === 'expired'
          ? html`<span class="muted" data-field="cancel-reason"
              >expired: not claimed within ${formatDuration(job.ttl_seconds * 1000)} of becoming due</span
            >`
          : null
      }
      ${state === 'cancelled' && job.cancel_reason === 'concurrency_limit' ? html`<span class="muted" data-field="cancel-reason">${concurrencyCancelNote}</span>` : null}
      ${state === 'cancelled' && job.cancel_reason === 'parent_never_created' ? html`<span class="muted" data-field="cancel-reason">${neverCreatedParentNote}</span>` : null}
      ${progress !== null && progress !== undefined ? html`<progress max="1" value=${progress} aria-label="Progress">${Math.round(progress * 100)}%</progress>` : null}
      ${
        mayAct && ['failed', 'dead_letter'].includes(state)
          ? html`<button type="button" onClick=${() => act.submit('retry')} disabled=${act.busy}>Retry</button>`
          : null
      }
      ${mayAct && ['pending', 'scheduled'].includes(state) ? html`<button type="button" class="danger" onClick=${() => act.submit('cancel')} disabled=${act.busy}>Cancel</button>` : null}
      ${
        state === 'processing' && job.cancel_requested_at
          ? html`<span class="muted" data-field="cancel-requested" title=${`asked at ${formatTime(job.cancel_requested_at)}`}
              >Cancel requested: waiting for the worker to stop</span
            >`
          : mayAct && state === 'processing'
            ? html`<button
                type="button"
                class="danger"
                title="The worker is told at its next heartbeat or signal poll; the job ends cancelled when it stops, or after the grace period"
                onClick=${() => act.submit('cancel-running')}
                disabled=${act.busy}
              >
                Cancel the running job
              </button>`
            : null
      }
    </div>
    <${ErrorNotice} error=${act.error} />
    ${history.data.length > 0 ? html`<${AsOfSlider} events=${history.data} at=${at} asOf=${then} onPick=${setAt} />` : null}
    ${at !== null ? html`<${ErrorNotice} error=${past.error} />` : null}
    <dl class="details" data-as-of=${at === null ? 'now' : 'past'} aria-busy=${at !== null && past.loading}>
      <div><dt>Type</dt><dd>${job.job_type}</dd></div>
      <div>
        <dt>Queue</dt>
        <dd><${Link} to=${`/projects/${project.id}/queues/${encodeURIComponent(job.queue)}`}>${job.queue}</${Link}></dd>
      </div>
      ${
        job.concurrency_key !== undefined
          ? html`<div>
              <dt>Concurrency key</dt>
              <dd data-field="concurrency-key"><code>${job.concurrency_key}</code></dd>
            </div>`
          : null
      }
      <div>
        <dt>Attempt</dt>
        <dd data-field="attempt">${then ? then.attempt : (live?.attempt ?? job.attempt)} of ${then ? then.max_attempts : (live?.max_attempts ?? job.max_attempts)}</dd>
      </div>
      <div><dt>Created</dt><dd>${formatTime(job.created_at)}</dd></div>
      <div><dt>Started</dt><dd>${formatTime(job.started_at)}</dd></div>
      <div><dt>Completed</dt><dd>${formatTime(job.completed_at)}</dd></div>
      <div><dt>Duration</dt><dd>${formatDuration(job.duration_ms)}</dd></div>
      <div><dt>Timeout</dt><dd data-field="timeout">${job.timeout_seconds} s</dd></div>
      ${
        job.ttl_seconds !== undefined
          ? html`<div>
              <dt>Expires</dt>
              <dd data-field="expires">
                ${job.expires_at ? formatTime(job.expires_at) : 'not while it runs or waits for its parent'}
                <span class="muted small">(ttl ${formatDuration(job.ttl_seconds * 1000)})</span>
              </dd>
            </div>`
          : null
      }
      <div><dt>Priority</dt><${PriorityField} project=${project} job=${job} state=${state} mayChange=${mayAct} onChanged=${reload} /></div>
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
    <${JobGraph}
      project=${project}
      job=${data.job}
      state=${live?.state ?? data.job.state}
      dependencies=${data.dependencies}
      continuationParent=${data.continuationParent}
    />
    <h2>Payload</h2>
    <pre class="payload">${JSON.stringify(job.payload, null, 2)}</pre>
    <h2>History ${loading ? html`<span class="muted small">(refreshing)</span>` : null}</h2>
    <${Timeline} events=${history.data} at=${at} job=${data.job} />
  </section>`
}
