import { call } from '../api.js'
import { formatDuration, formatTime, jobStates } from '../format.js'
import { ErrorNotice, html, Link, Loading, Table, useLoad } from '../ui.js'

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

/** The worst (highest) percentile among buckets that had finished attempts. */
const worst = (buckets, key) => {
  const values = buckets.map((b) => b[key]).filter((v) => v !== null)
  return values.length === 0 ? null : Math.max(...values)
}

export function OverviewPage({ project }) {
  const { data, error, loading } = useLoad(async () => {
    const q = { project: project.id }
    const [summary, throughput, queues] = await Promise.all([
      call('GET', '/jobsvc/v1/metrics/summary', q),
      call('GET', '/jobsvc/v1/metrics/throughput', q),
      call('GET', '/jobsvc/v1/metrics/queues', q),
    ])
    return { summary, throughput, queues }
  }, [project.id])
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
      <div>
        <dt>p50</dt>
        <dd>${formatDuration(worst(buckets, 'p50_ms'))}</dd>
      </div>
      <div>
        <dt>p95</dt>
        <dd>${formatDuration(worst(buckets, 'p95_ms'))}</dd>
      </div>
      <div>
        <dt>p99</dt>
        <dd>${formatDuration(worst(buckets, 'p99_ms'))}</dd>
      </div>
    </dl>
    <${ThroughputChart} buckets=${buckets} />
    <p class="legend small">
      <span class="key-created">created</span> <span class="key-succeeded">succeeded</span> <span class="key-failed">failed</span>
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
