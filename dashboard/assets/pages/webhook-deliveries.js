import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatTime, toInstant, toLocalInput, webhookEventTypes } from '../format.js'
import { ErrorNotice, html, ListStatus, Pager, RowsTable, useCursorPages, useEvery, useLoad, useSubmit } from '../ui.js'

const deliveryStatuses = ['pending', 'delivered', 'failed']

/** How often a page showing pending deliveries reads them again (each read is a request of the hourly limit). */
const pendingPollMs = 5000
/** How often the newest page is read again when nothing is pending: new deliveries show up by themselves. */
const idlePollMs = 15000

const noFilters = { status: '', event_type: '', since: '', until: '' }

/** The filters in the address: the times as RFC 3339, so that a shared link means the same instants in any time zone. */
function filtersFromLocation() {
  const params = new URLSearchParams(location.search)
  const local = (key) => {
    const at = new Date(params.get(key) ?? '')
    return Number.isNaN(at.getTime()) ? '' : toLocalInput(at)
  }
  const status = params.get('status') ?? ''
  const eventType = params.get('event_type') ?? ''
  return {
    status: deliveryStatuses.includes(status) ? status : '',
    event_type: webhookEventTypes.includes(eventType) ? eventType : '',
    since: local('since'),
    until: local('until'),
  }
}

const toQuery = (filters) => ({
  status: filters.status,
  event_type: filters.event_type,
  since: toInstant(filters.since),
  until: toInstant(filters.until),
})

/** Where a delivery came from: a redelivery (of the delivery it repeats), a replay (its operation), or fan-out. */
function Origin({ delivery }) {
  if (!delivery.redelivery_of && !delivery.operation_id) return html`<span class="muted">live</span>`
  return html`<span class="origin">
    ${delivery.redelivery_of ? html`<span>Redelivery of <code>${delivery.redelivery_of}</code></span>` : null}
    ${delivery.operation_id ? html`<span>Replay <code>${delivery.operation_id}</code></span>` : null}
  </span>`
}

/** Why a delivery cannot be sent again now (the service answers 409 `invalid_state` to both), or null. */
function redeliverBlock(delivery, active) {
  if (!active) return 'Resume the webhook to redeliver'
  if (delivery.status === 'pending') return 'Still being tried'
  return null
}

/**
 * A subscription's deliveries, newest first, with filters (kept in the address) and Redeliver on
 * each one that has settled. `refreshKey` reads the list again (a replay's progress changed); a page
 * holding pending deliveries is read again every `pendingPollMs`.
 */
export function Deliveries({ project, webhookId, active, refreshKey }) {
  const path = `/jobsvc/v1/webhooks/${encodeURIComponent(webhookId)}/deliveries`
  const [filters, setFilters] = useState(filtersFromLocation)
  const [draft, setDraft] = useState(filters)
  const [redelivered, setRedelivered] = useState(null)
  const pages = useCursorPages()
  const cursor = pages.cursor
  const { data, error, loading, reload } = useLoad(
    () => call('GET', path, { project: project.id, query: { limit: 25, cursor, ...toQuery(filters) } }),
    [project.id, path, filters, cursor, refreshKey],
  )
  // Pending attempts are followed closely; otherwise the newest page still picks up new deliveries.
  const hasPending = data?.data.some((d) => d.status === 'pending') ?? false
  useEvery(hasPending ? pendingPollMs : idlePollMs, hasPending || cursor === null, reload)
  const redeliver = useSubmit(async (delivery) => {
    const fresh = await call('POST', `${path}/${encodeURIComponent(delivery.id)}/redeliver`, { project: project.id })
    setRedelivered(fresh)
    // The new delivery is the newest: back to the first page, which the list reads again.
    if (cursor === null) reload()
    else pages.reset()
  })
  const applyFilters = (next) => {
    const params = new URLSearchParams(Object.entries(toQuery(next)).filter(([, v]) => v !== ''))
    // Only the query changes: replaceState, without navigate's popstate, which scrolls to the top.
    history.replaceState(null, '', `${location.pathname}${params.size ? `?${params}` : ''}`)
    pages.reset()
    setDraft(next)
    setFilters(next)
  }
  const apply = (event) => {
    event.preventDefault()
    applyFilters(draft)
  }
  const set = (key) => (event) => setDraft({ ...draft, [key]: event.target.value })
  const isFiltered = Object.values(filters).some((v) => v !== '')
  const row = (d) => {
    const blocked = redeliverBlock(d, active)
    return html`<tr data-delivery=${d.id} data-status=${d.status} class=${d.id === redelivered?.id ? 'fresh' : undefined}>
      <td><code>${d.id}</code></td>
      <td>${d.event_type}<br /><code class="small" data-event-id>${d.event_id}</code></td>
      <td><span class=${`badge delivery-${d.status}`}>${d.status}</span></td>
      <td>${d.response_status ?? '—'}<br /><span class="muted small">attempt ${d.attempt}</span></td>
      <td>${formatTime(d.attempted_at)}</td>
      <td><${Origin} delivery=${d} /></td>
      <td>
        <button
          type="button"
          onClick=${() => redeliver.submit(d)}
          disabled=${redeliver.busy || blocked !== null}
          title=${blocked ?? 'Send this event again, as a new delivery'}
          aria-label=${`Redeliver ${d.id}`}
        >
          Redeliver
        </button>
      </td>
    </tr>`
  }
  return html`<h2>Deliveries</h2>
    <form class="filters" onSubmit=${apply} aria-label="Filter deliveries">
      <label class="field"
        ><span>Status</span>
        <select name="status" value=${draft.status} onChange=${set('status')}>
          <option value="">Any status</option>
          ${deliveryStatuses.map((s) => html`<option value=${s}>${s}</option>`)}
        </select>
      </label>
      <label class="field"
        ><span>Event type</span>
        <select name="event_type" value=${draft.event_type} onChange=${set('event_type')}>
          <option value="">Any type</option>
          ${webhookEventTypes.map((type) => html`<option value=${type}>${type}</option>`)}
        </select>
      </label>
      <label class="field"
        ><span>Created from</span><input type="datetime-local" step="1" name="since" value=${draft.since} onInput=${set('since')}
      /></label>
      <label class="field"
        ><span>Created before</span><input type="datetime-local" step="1" name="until" value=${draft.until} onInput=${set('until')}
      /></label>
      <button type="submit">Apply</button>
      ${isFiltered ? html`<button type="button" class="link" onClick=${() => applyFilters(noFilters)}>Clear</button>` : null}
    </form>
    ${
      redelivered
        ? html`<p role="status" class="redelivered">
            ${`Redelivery ${redelivered.id} of ${redelivered.redelivery_of} queued: it sends event ${redelivered.event_id} again.`}
            ${isFiltered ? ' The filters may hide it.' : ''}
          </p>`
        : null
    }
    <${ErrorNotice} error=${redeliver.error} />
    <${ListStatus}
      error=${error}
      loading=${loading}
      rows=${data?.data}
      what="Loading deliveries"
      empty=${isFiltered ? 'No delivery matches these filters.' : 'Nothing delivered yet.'}
    />
    <${RowsTable}
      className="deliveries"
      busy=${loading}
      columns=${['Delivery', 'Event', 'Status', 'Answer', 'When', 'Origin', '']}
      rows=${data?.data}
      row=${row}
    />
    <${Pager} pages=${pages} page=${data} label="Delivery pages" />`
}
