import { Fragment } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import { followFeed } from '../api.js'
import { formatTime, hasRoleAtLeast } from '../format.js'
import { ErrorNotice, html, Link, navigate, Table } from '../ui.js'

/** The newest events the page keeps; older ones drop off the bottom, so a busy project's tail stays bounded. */
const keep = 500

/**
 * The feed's event types by aggregate (domain/event-feed.ts), for the type picker. The service
 * checks `types` itself; test/dashboard/events.test.ts checks that this copy lists the same types.
 */
const catalogue = {
  job: [
    'job_created',
    'job_child_attached',
    'job_promoted',
    'job_activated',
    'job_parent_settled',
    'job_claimed',
    'job_limit_waiting',
    'job_succeeded',
    'job_attempt_failed',
    'job_dead_lettered',
    'job_cancelled',
    'job_retried',
    'job_cancel_requested',
    'job_released',
    'job_priority_changed',
    'job_payload_replaced',
  ],
  progress: ['job_progressed'],
  project: [
    'project_created',
    'project_renamed',
    'project_deleted',
    'jobs_exported',
    'audit_log_exported',
    'history_expired',
    'api_key_issued',
    'api_key_rotated',
    'api_key_revoked',
    'member_invited',
    'team_invite_accepted',
    'member_joined',
    'member_role_changed',
    'member_removed',
    'ownership_transferred',
    'plan_changed',
    'promo_code_applied',
    'overage_enabled',
    'overage_disabled',
    'spend_cap_updated',
    'billing_state_changed',
    'billing_state_confirmed',
    'allowance_warning_80',
    'allowance_warning_100',
    'billing_period_reset',
    'overage_charged',
    'rate_limit_overridden',
    'retry_policy_updated',
    'queue_paused',
    'queue_resumed',
    'queue_settings_updated',
    'queue_limits_updated',
  ],
  recurring: ['recurring_upserted', 'recurring_deleted', 'recurring_rescheduled', 'recurring_fired'],
  alert: ['alert_created', 'alert_updated', 'alert_deleted', 'alert_triggered', 'alert_resolved'],
  webhook: ['webhook_created', 'webhook_updated', 'webhook_secret_rotated', 'webhook_deleted'],
  delivery: ['delivery_scheduled', 'delivery_attempted'],
  audit: ['checkpoint_issued'],
}

/** What a session below admin reads of the feed (the service leaves the rest out). */
const aggregatesBelowAdmin = ['job', 'progress', 'recurring', 'alert']

const starts = { now: 'Now', '5m': 'Last 5 minutes', '1h': 'Last hour', '24h': 'Last 24 hours', oldest: 'Oldest kept' }
const startMs = { now: 0, '5m': 300_000, '1h': 3_600_000, '24h': 86_400_000 }
const defaultStart = '5m'

/** Where a tail opened with `start` begins: `from_time` (RFC 3339), or undefined for the oldest event kept. */
const originOf = (start) => (start in startMs ? new Date(Date.now() - startMs[start]).toISOString() : undefined)

function filtersFromLocation() {
  const params = new URLSearchParams(location.search)
  const start = params.get('start') ?? defaultStart
  return {
    types: params.get('types') ?? '',
    queue: params.get('queue') ?? '',
    job_type: params.get('job_type') ?? '',
    job_id: params.get('job_id') ?? '',
    start: start in starts ? start : defaultStart,
  }
}

/** Waits `ms`, or less when `signal` aborts. */
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal.addEventListener('abort', done)
  })

/**
 * The live tail: follows the feed from `tail.origin` with `tail.filters` while not paused,
 * reconnecting after a lost connection or a stream the service ended. The cursor outlives a
 * pause, so Resume reads on from where the tail stopped and nothing is missed; `restart` (other
 * filters) starts a new tail. A refusal pauses the tail and is kept to show.
 */
function useFeedTail(project, firstTail) {
  const [tail, setTail] = useState(firstTail)
  const [events, setEvents] = useState([])
  const [paused, setPaused] = useState(false)
  const [status, setStatus] = useState('connecting')
  const [error, setError] = useState(null)
  const [expired, setExpired] = useState(false)
  const cursor = useRef(null)
  // The open stream's controller: Pause and a restart abort it at once rather than at the effect's
  // cleanup after the next render, so that no chunk read meanwhile moves the cursor or adds rows.
  const stream = useRef(null)
  const stop = () => stream.current?.abort()
  useEffect(() => {
    if (paused) {
      setStatus('paused')
      return
    }
    const controller = new AbortController()
    stream.current = controller
    const { signal } = controller
    // A chunk read after a pause or a restart is dropped with its cursor, so Resume reads it again.
    const show = (batch) => {
      if (signal.aborted) return
      setEvents((shown) => {
        const seen = new Set(shown.map((e) => e.id))
        const fresh = batch.filter((e) => !seen.has(e.id)).reverse()
        return fresh.length === 0 ? shown : [...fresh, ...shown].slice(0, keep)
      })
    }
    const moveTo = (at) => {
      if (!signal.aborted) cursor.current = at
    }
    const run = async () => {
      let origin = tail.origin
      let failures = 0
      while (!signal.aborted) {
        setStatus(failures === 0 ? 'connecting' : 'reconnecting')
        try {
          const { types, queue, job_type, job_id } = tail.filters
          await followFeed(project.id, {
            query: { types, queue, job_type, job_id, from_time: cursor.current === null ? origin : undefined },
            after: cursor.current,
            signal,
            onOpen: () => {
              failures = 0
              setError(null)
              setStatus('live')
            },
            onEvents: show,
            onCursor: moveTo,
          })
        } catch (err) {
          if (signal.aborted) return
          if (err.code === 'cursor_expired') {
            // Retention removed events after the cursor: read on from the oldest the log keeps.
            cursor.current = null
            origin = undefined
            setExpired(true)
            continue
          }
          if (err.status > 0) {
            setError(err)
            setPaused(true)
            return
          }
        }
        // The connection was lost, or the service ended the stream (shutting down, reader too slow).
        failures += 1
        if (signal.aborted) return
        setStatus('reconnecting')
        await sleep(Math.min(30_000, 1000 * 2 ** (failures - 1)), signal)
      }
    }
    run()
    return () => controller.abort()
  }, [project.id, tail, paused])
  return {
    events,
    status,
    error,
    expired,
    paused,
    pause: () => {
      stop()
      setPaused(true)
    },
    resume: () => {
      setError(null)
      setPaused(false)
    },
    restart: (next) => {
      stop()
      cursor.current = null
      setTail(next)
      setEvents([])
      setError(null)
      setExpired(false)
      setPaused(false)
    },
    clear: () => setEvents([]),
  }
}

const statusText = {
  connecting: 'Connecting…',
  live: 'Live: new events appear at the top.',
  reconnecting: 'Reconnecting…',
  paused: 'Paused. Resume reads on from where the tail stopped, so nothing is missed.',
}

function AggregateCell({ project, event }) {
  const isJob = event.aggregate === 'job' || event.aggregate === 'progress'
  const id = html`<code>${event.aggregate_id}</code>`
  return html`<span class="muted small">${event.aggregate}</span> ${
      isJob ? html`<${Link} to=${`/projects/${project.id}/jobs/${encodeURIComponent(event.aggregate_id)}`}>${id}</${Link}>` : id
    }`
}

function EventRows({ project, events }) {
  const [open, setOpen] = useState(() => new Set())
  const toggle = (id) =>
    setOpen((ids) => {
      const next = new Set(ids)
      if (next.has(id)) next.delete(id)
      else next.add(id)
      return next
    })
  return html`<${Table} className="events" columns=${['When', 'Type', 'Aggregate', 'Event', '']}>
    ${events.map((e) => {
      const isOpen = open.has(e.id)
      return html`<${Fragment} key=${e.id}>
        <tr data-type=${e.type} data-aggregate=${e.aggregate} data-aggregate-id=${e.aggregate_id} data-event=${e.id}>
          <td><time datetime=${e.occurred_at}>${formatTime(e.occurred_at)}</time></td>
          <td class="event-type">${e.type}</td>
          <td><${AggregateCell} project=${project} event=${e} /></td>
          <td><code>${e.id}</code></td>
          <td>
            <button type="button" class="link" aria-expanded=${isOpen} aria-label=${`Details of ${e.type} ${e.id}`} onClick=${() => toggle(e.id)}>
              ${isOpen ? 'Hide' : 'Details'}
            </button>
          </td>
        </tr>
        ${
          isOpen
            ? html`<tr class="event-detail" data-detail=${e.id}>
                <td colspan="5">
                  <div class="event-json">
                    <div>
                      <h2>Data</h2>
                      <pre data-json="data">${JSON.stringify(e.data, null, 2)}</pre>
                    </div>
                    <div>
                      <h2>State after it</h2>
                      <pre data-json="state">${JSON.stringify(e.state, null, 2)}</pre>
                    </div>
                  </div>
                </td>
              </tr>`
            : null
        }
      </${Fragment}>`
    })}
  </${Table}>`
}

export function EventsPage({ project }) {
  const [draft, setDraft] = useState(filtersFromLocation)
  const feed = useFeedTail(project, () => ({ filters: draft, origin: originOf(draft.start) }))
  const readsEverything = hasRoleAtLeast(project.role, 'admin')
  const aggregates = Object.keys(catalogue).filter((a) => readsEverything || aggregatesBelowAdmin.includes(a))
  const apply = (event) => {
    event.preventDefault()
    const filters = { ...draft, types: draft.types.replace(/\s+/g, '') }
    const params = new URLSearchParams(Object.entries(filters).filter(([key, v]) => v !== '' && !(key === 'start' && v === defaultStart)))
    navigate(`/projects/${project.id}/events${params.size ? `?${params}` : ''}`, { replace: true })
    setDraft(filters)
    feed.restart({ filters, origin: originOf(filters.start) })
  }
  const set = (key) => (event) => setDraft({ ...draft, [key]: event.target.value })
  const addType = (event) => {
    const type = event.target.value
    event.target.value = ''
    const types = draft.types.split(',').filter((t) => t.trim() !== '')
    if (type !== '' && !types.includes(type)) setDraft({ ...draft, types: [...types, type].join(',') })
  }
  return html`<section aria-labelledby="events-title">
    <h1 id="events-title">Events</h1>
    ${
      readsEverything
        ? html`<p>
            The project's event log as it is written: jobs, progress reports, schedules, alerts, webhooks, deliveries, keys, team and billing.
          </p>`
        : html`<p>
            The event log of this project's jobs, progress reports, schedules and alerts, as it is written. Webhooks, keys, the team and billing are
            shown to admins and the owner.
          </p>`
    }
    <form class="filters" onSubmit=${apply} aria-label="Filter events">
      <label class="field wide"
        ><span>Event types</span>
        <input name="types" value=${draft.types} onInput=${set('types')} placeholder="any, or e.g. job_created,job_succeeded" />
      </label>
      <label class="field"
        ><span>Add a type</span>
        <select name="add_type" onChange=${addType}>
          <option value="">Choose…</option>
          ${aggregates.map(
            (aggregate) =>
              html`<optgroup label=${aggregate}>${catalogue[aggregate].map((type) => html`<option value=${type}>${type}</option>`)}</optgroup>`,
          )}
        </select>
      </label>
      <label class="field"><span>Queue</span><input name="queue" value=${draft.queue} onInput=${set('queue')} placeholder="any" /></label>
      <label class="field"><span>Job type</span><input name="job_type" value=${draft.job_type} onInput=${set('job_type')} placeholder="any" /></label>
      <label class="field"><span>Job id</span><input name="job_id" value=${draft.job_id} onInput=${set('job_id')} placeholder="any" /></label>
      <label class="field"
        ><span>Start</span>
        <select name="start" value=${draft.start} onChange=${set('start')}>
          ${Object.entries(starts).map(([value, label]) => html`<option value=${value}>${label}</option>`)}
        </select>
      </label>
      <button type="submit">Apply</button>
    </form>
    <div class="actions tail">
      ${
        feed.paused
          ? html`<button type="button" onClick=${feed.resume}>Resume</button>`
          : html`<button type="button" onClick=${feed.pause}>Pause</button>`
      }
      <button type="button" class="link" onClick=${feed.clear} disabled=${feed.events.length === 0}>Clear</button>
      <span role="status" data-status=${feed.status}>${statusText[feed.status]}</span>
    </div>
    <${ErrorNotice} error=${feed.error} />
    ${
      feed.expired
        ? html`<p class="notice">Retention removed events before the tail read them; it read on from the oldest event the log keeps.</p>`
        : null
    }
    ${
      feed.events.length === 0
        ? html`<p class="empty">No events yet: they appear here as they are written.</p>`
        : html`<p class="muted small">The newest ${feed.events.length} events${feed.events.length === keep ? ' (the page keeps this many)' : ''}.</p>
            <${EventRows} project=${project} events=${feed.events} />`
    }
  </section>`
}
