import { call } from '../api.js'
import { formatDuration, formatTime, jobStates } from '../format.js'
import { ErrorNotice, html, Link, Loading, Table, useEvery, useLoad } from '../ui.js'

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

/** Bars for created / succeeded / failed per bucket; heights are set through the DOM, not style attributes (CSP). */
function ThroughputChart({ buckets }) {
  const peak = Math.max(1, ...buckets.map((b) => Math.max(b.created, b.succeeded, b.failed)))
  const width = 100 / Math.max(1, buckets.length)
  return html`<svg
    class="chart"
    viewBox="0 0 100 40"
    preserveAspectRatio="none"
    role="img"
    aria-label="Jobs created, succeeded and failed per minute"
  >
    ${buckets.map(
      (b, i) =>
        html`<g>
          <title>${formatTime(b.start)}: ${b.created} created, ${b.succeeded} succeeded, ${b.failed} failed</title>
          <rect class="bar-created" x=${i * width} width=${width / 3} y=${40 - (b.created / peak) * 40} height=${(b.created / peak) * 40} />
          <rect
            class="bar-succeeded"
            x=${i * width + width / 3}
            width=${width / 3}
            y=${40 - (b.succeeded / peak) * 40}
            height=${(b.succeeded / peak) * 40}
          />
          <rect
            class="bar-failed"
            x=${i * width + (2 * width) / 3}
            width=${width / 3}
            y=${40 - (b.failed / peak) * 40}
            height=${(b.failed / peak) * 40}
          />
        </g>`,
    )}
  </svg>`
}

const percentiles = ['p50_ms', 'p95_ms', 'p99_ms']

/**
 * Attempt durations per bucket as three lines (p50, p95, p99); a bucket with no finished attempt
 * leaves a gap rather than a drop to zero.
 */
function LatencyChart({ buckets }) {
  const peak = Math.max(1, ...buckets.flatMap((b) => percentiles.map((key) => b[key] ?? 0)))
  // 2 units of margin each side, so the first and last buckets' marks are not cut by the frame.
  const step = 96 / Math.max(1, buckets.length - 1)
  const runsOf = (key) => {
    const runs = [[]]
    buckets.forEach((b, i) => {
      if (b[key] === null) runs.push([])
      else runs.at(-1).push(`${(2 + i * step).toFixed(2)},${(40 - (b[key] / peak) * 38).toFixed(2)}`)
    })
    return runs.filter((run) => run.length > 0)
  }
  return html`<svg
    class="chart"
    viewBox="0 0 100 40"
    preserveAspectRatio="none"
    role="img"
    aria-label="Attempt durations per minute: p50, p95 and p99"
  >
    <title>Attempt durations per minute, highest ${formatDuration(peak)}</title>
    ${percentiles.map((key) =>
      runsOf(key).map((run) =>
        run.length === 1
          ? html`<circle class=${`line-${key}`} cx=${run[0].split(',')[0]} cy=${run[0].split(',')[1]} r="0.8" />`
          : html`<polyline class=${`line-${key}`} points=${run.join(' ')} vector-effect="non-scaling-stroke" />`,
      ),
    )}
  </svg>`
}

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

/** How often the overview is read again while open (four requests of the project's hourly limit each time). */
const overviewRefreshMs = 15000

export function OverviewPage({ project }) {
  const { data, error, loading, reload } = useLoad(async () => {
    const q = { project: project.id }
    const [summary, throughput, queues] = await Promise.all([
      call('GET', '/jobsvc/v1/metrics/summary', q),
      call('GET', '/jobsvc/v1/metrics/throughput', { ...q, query: { percentiles: 'window' } }),
      call('GET', '/jobsvc/v1/metrics/queues', q),
    ])
    return { summary, throughput, queues }
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
    <${ThroughputChart} buckets=${buckets} />
    <p class="legend small">
      <span class="key-created">created</span> <span class="key-succeeded">succeeded</span> <span class="key-failed">failed</span>
    </p>
    <${LatencyChart} buckets=${buckets} />
    <p class="legend small">
      <span class="key-p50_ms">p50</span> <span class="key-p95_ms">p95</span> <span class="key-p99_ms">p99</span> of attempt durations
    </p>
    <h2>Queues</h2>
    ${
      queues.data.length === 0
        ? html`<p class="empty">No queue has jobs waiting.</p>`
        : html`<${Table} columns=${['Queue', 'Pending', 'Scheduled', 'Processing', 'Oldest waiting']}>
                ${queues.data.map(
                  (q) => html`<tr>
                  <td><${Link} to=${`/projects/${project.id}/jobs?queue=${encodeURIComponent(q.queue)}`}>${q.queue}</${Link}></td>
                  <td>${q.pending}</td>
                  <td>${q.scheduled}</td>
                  <td>${q.processing}</td>
                  <td>${q.oldest_pending_at ? html`${formatDuration(q.oldest_pending_age_ms)} <span class="muted small">(since ${formatTime(q.oldest_pending_at)})</span>` : '—'}</td>
                </tr>`,
                )}
          </${Table}>`
    }
  </section>`
}
