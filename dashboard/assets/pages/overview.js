import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatDuration, formatTime, hasRoleAtLeast, jobStates } from '../format.js'
import { TimeChart } from '../chart.js'
import { ErrorNotice, html, Link, Loading, navigate, NumberForm, Table, useEvery, useLoad, useSubmit } from '../ui.js'

const stateLabel = (state) => state.replace('_', ' ')

function StateCounts({ project, counts }) {
  return html`<ul class="counts">
    ${jobStates.map(
      (state) =>
        html`<li class=${`count state-${state}`}>
          <${Link} to=${`/projects/${project}/jobs?state=${state}`}>
            <span class="number" data-state=${state}>${counts[state] ?? 0}</span>
            <span class="label">${stateLabel(state)}</span>
          </${Link}>
        </li>`,
    )}
  </ul>`
}

const throughputSeries = [
  { key: 'created', label: 'created', color: '#6b8fc7' },
  { key: 'succeeded', label: 'succeeded', color: '#3a9a58' },
  { key: 'failed', label: 'failed', color: '#c94a4a' },
]

/** p50, p95 and p99 of the attempts finished in each bucket; a bucket with none leaves a gap. */
const latencySeries = [
  { key: 'p50_ms', label: 'p50', color: '#3a9a58' },
  { key: 'p95_ms', label: 'p95', color: '#d08b2c' },
  { key: 'p99_ms', label: 'p99', color: '#c94a4a' },
]

/** The overview's two charts of the last hour, by minute. */
const overviewCharts = [
  {
    name: 'throughput',
    title: 'Jobs per minute',
    label: 'Jobs created, succeeded and failed per minute',
    series: throughputSeries,
    bars: true,
    empty: 'Nothing was created or finished in the last hour.',
  },
  {
    name: 'latency',
    title: 'Attempt durations per minute',
    label: 'Attempt durations per minute: p50, p95 and p99',
    series: latencySeries,
    format: formatDuration,
    empty: 'No attempt finished in the last hour.',
  },
]

/**
 * What a project with no job yet shows instead of empty charts: where its key is, and a worker
 * and a job to copy. The key itself is shown once, when it is made (sign-up, rotation): here its
 * prefix says which one is current.
 */
function FirstSteps({ project }) {
  const origin = location.origin
  const worker = `// npm install ./jobsvc-sdk-0.1.0.tgz   (packed from the service's repository: npm pack -w @jobsvc/sdk)
import { JobsvcClient, Worker } from '@jobsvc/sdk'

const client = new JobsvcClient({ baseUrl: '${origin}', apiKey: process.env.JOBSVC_API_KEY })
const worker = new Worker({ client, queues: ['default'], handlers: { hello: async (job) => ({ greeted: job.payload.name }) } })
await worker.start()
process.once('SIGTERM', () => void worker.stop())`
  const job = `curl -s -X POST ${origin}/jobsvc/v1/jobs -H "Authorization: Bearer $JOBSVC_API_KEY" \\
  -H 'content-type: application/json' -d '{"job_type":"hello","payload":{"name":"Ada"}}'`
  return html`<section class="first-steps" aria-labelledby="first-steps-title">
    <h2 id="first-steps-title">No jobs yet: run your first one</h2>
    <ol>
      <li>
        Your API key is the one starting <code data-key-prefix>${project.api_key_prefix ?? ''}…</code>, shown once when it was made. Lost it?
        <${Link} to=${`/projects/${project.id}/api-key`}>Rotate it</${Link}> to see a new one (the old one keeps working for 24 hours).
      </li>
      <li>
        Start a worker with it (<code>JOBSVC_API_KEY=… node worker.mjs</code>):
        <pre class="snippet" data-snippet="worker">${worker}</pre>
      </li>
      <li>
        Create a job; it appears here, and the worker runs it:
        <pre class="snippet" data-snippet="job">${job}</pre>
      </li>
    </ol>
  </section>`
}

/** A queue's pause, and for an admin the button that pauses or resumes it (docs/api-notes.md, "Queue pauses"). */
function PauseCell({ project, queue, state, onChanged }) {
  const change = useSubmit(async () => {
    const action = state?.paused ? 'resume' : 'pause'
    await call('POST', `/jobsvc/v1/queues/${encodeURIComponent(queue)}/${action}`, { project: project.id, body: {} })
    onChanged()
  })
  const mayChange = hasRoleAtLeast(project.role, 'admin')
  const paused = state?.paused === true
  return html`<td data-queue-state=${paused ? 'paused' : 'running'}>
    ${
      paused
        ? html`<span class="badge state-cancelled" title=${state.reason ?? ''}>paused</span>
            <span class="muted small">${state.reason ? ` ${state.reason}` : ''}${state.until ? ` until ${formatTime(state.until)}` : ''}</span>`
        : html`<span class="muted small">running</span>`
    }
    ${
      mayChange
        ? html` <button
            type="button"
            class="small"
            disabled=${change.busy}
            aria-label=${`${paused ? 'Resume' : 'Pause'} the queue ${queue}`}
            onClick=${change.submit}
          >
            ${paused ? 'Resume' : 'Pause'}
          </button>`
        : null
    }
    ${change.error ? html`<${ErrorNotice} error=${change.error} />` : null}
  </td>`
}

/** A queue's default ttl (jobs created without their own expire after it), which an admin sets or removes. */
function TtlCell({ project, queue, state, onChanged }) {
  const current = state?.default_ttl_seconds ?? null
  const save = async (seconds) => {
    await call('PUT', `/jobsvc/v1/queues/${encodeURIComponent(queue)}/settings`, { project: project.id, body: { default_ttl_seconds: seconds } })
    onChanged()
  }
  return html`<td data-queue-ttl=${current ?? ''}>
    ${
      hasRoleAtLeast(project.role, 'admin')
        ? html`<${NumberForm}
            current=${current}
            save=${save}
            min="1"
            max="2592000"
            placeholder="none"
            label=${`Default ttl in seconds of the queue ${queue}`}
            title="Jobs created in the queue without their own ttl_seconds are cancelled (expired) when not claimed this long after becoming due; empty: none"
          />`
        : current === null
          ? '—'
          : formatDuration(current * 1000)
    }
  </td>`
}

/** The depth rows, and a row for each paused queue or queue with a default ttl that has none (nothing pending, scheduled or running). */
function queueRows(depths, states) {
  const rows = depths.data.map((q) => ({ ...q, state: states.get(q.queue) }))
  for (const [queue, state] of states) {
    if ((state.paused || state.default_ttl_seconds != null) && !rows.some((r) => r.queue === queue))
      rows.push({ queue, pending: 0, scheduled: 0, processing: 0, oldest_pending_at: null, state })
  }
  return rows
}

const queuePath = (project, queue) => `/projects/${project.id}/queues/${encodeURIComponent(queue)}`

/** Opens a queue's page by name: limits are often set before the queue has a job, and so a row. */
function OpenQueue({ project }) {
  const [queue, setQueue] = useState('')
  const open = (event) => {
    event.preventDefault()
    navigate(queuePath(project, queue.trim()))
  }
  return html`<form class="inline" onSubmit=${open} aria-label="Open a queue's limits">
    <input
      name="queue"
      required
      maxlength="100"
      placeholder="queue name"
      aria-label="Queue name"
      value=${queue}
      onInput=${(e) => setQueue(e.currentTarget.value)}
    />
    <button type="submit" class="small">Open its limits</button>
  </form>`
}

/** How often the overview is read again while open (five requests of the project's hourly limit each time). */
const overviewRefreshMs = 15000

export function OverviewPage({ project }) {
  const { data, error, loading, reload } = useLoad(async () => {
    const q = { project: project.id }
    const [summary, throughput, depths, states] = await Promise.all([
      call('GET', '/jobsvc/v1/metrics/summary', q),
      call('GET', '/jobsvc/v1/metrics/throughput', { ...q, query: { percentiles: 'window' } }),
      call('GET', '/jobsvc/v1/metrics/queues', q),
      call('GET', '/jobsvc/v1/queues', q),
    ])
    return { summary, throughput, queues: queueRows(depths, new Map(states.data.map((s) => [s.queue, s]))) }
  }, [project.id])
  useEvery(overviewRefreshMs, true, reload)
  if (error) return html`<${ErrorNotice} error=${error} />`
  if (loading && !data) return html`<${Loading} />`
  const { summary, throughput, queues } = data
  const buckets = throughput.buckets
  const totals = buckets.reduce(
    (sum, b) => ({ created: sum.created + b.created, succeeded: sum.succeeded + b.succeeded, failed: sum.failed + b.failed }),
    {
      created: 0,
      succeeded: 0,
      failed: 0,
    },
  )
  return html`<section aria-labelledby="overview-title">
    <h1 id="overview-title">Overview</h1>
    ${summary.total === 0 ? html`<${FirstSteps} project=${project} />` : null}
    <h2>Jobs by state <span class="muted small">(${summary.total} in all)</span></h2>
    <${StateCounts} project=${project.id} counts=${summary.counts} />
    <h2>Last hour</h2>
    <dl class="stats">
      <div>
        <dt>Created</dt>
        <dd>${totals.created}</dd>
      </div>
      <div>
        <dt>Succeeded</dt>
        <dd>${totals.succeeded}</dd>
      </div>
      <div>
        <dt>Failed attempts</dt>
        <dd>${totals.failed}</dd>
      </div>
      ${['p50_ms', 'p95_ms', 'p99_ms'].map(
        (key) =>
          html`<div>
            <dt>${key.slice(0, 3)} of the hour's attempts</dt>
            <dd data-percentile=${key} data-ms=${throughput.window_percentiles?.[key] ?? ''}>
              ${formatDuration(throughput.window_percentiles?.[key] ?? null)}
            </dd>
          </div>`,
      )}
    </dl>
    ${overviewCharts.map(
      (chart) =>
        html`<h3>${chart.title}</h3>
          <${TimeChart} ...${chart} buckets=${buckets} />`,
    )}
    <h2>Queues</h2>
    ${
      queues.length === 0
        ? html`<p class="empty">No queue has jobs waiting.</p>`
        : html`<${Table} columns=${['Queue', 'Pending', 'Scheduled', 'Processing', 'Oldest waiting', 'State', 'Expire waiting jobs after', 'Flow limits']}>
                ${queues.map(
                  (q) => html`<tr data-queue=${q.queue}>
                  <td><${Link} to=${`/projects/${project.id}/jobs?queue=${encodeURIComponent(q.queue)}`}>${q.queue}</${Link}></td>
                  <td>${q.pending}</td>
                  <td>${q.scheduled}</td>
                  <td>${q.processing}</td>
                  <td>${q.oldest_pending_at ? html`${formatDuration(q.oldest_pending_age_ms)} <span class="muted small">(since ${formatTime(q.oldest_pending_at)})</span>` : '—'}</td>
                  <${PauseCell} project=${project} queue=${q.queue} state=${q.state} onChanged=${reload} />
                  <${TtlCell} project=${project} queue=${q.queue} state=${q.state} onChanged=${reload} />
                  <td><${Link} to=${queuePath(project, q.queue)} aria-label=${`Limits of the queue ${q.queue}`}>Limits and state</${Link}></td>
                </tr>`,
                )}
          </${Table}>`
    }
    <${OpenQueue} project=${project} />
  </section>`
}
