import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { namedOnlyWebhookEventTypes, toInstant, toLocalInput, webhookEventTypes } from '../format.js'
import { ErrorNotice, html, useSubmit } from '../ui.js'
import { Field } from './account.js'
import { OperationProgress } from './operations.js'

const modes = [
  ['missing', 'Missing', 'the events this webhook never received, those from before it existed included'],
  ['failed', 'Failed', 'the events whose latest delivery to it failed'],
  ['all', 'All', 'every event of the range'],
]

/** What the replay form asks for, as the route takes it; no `until` means up to the moment it is asked. */
function toReplayBody(form) {
  const body = { since: toInstant(form.since), mode: form.mode }
  if (form.until !== '') body.until = toInstant(form.until)
  if (form.event_types.length > 0) body.event_types = form.event_types
  return body
}

const events = (n) => `${n} event${n === 1 ? '' : 's'}`

/**
 * Replays a subscription's events from the log: Count asks the service for a dry run, and only
 * that answer offers Start, with the body it counted (any change to the form asks for a new
 * count). The started operation's progress is followed below, with Stop.
 */
export function Replay({ project, webhook, onProgress }) {
  const path = `/jobsvc/v1/webhooks/${encodeURIComponent(webhook.id)}/replay`
  const types = webhook.events === '*' ? webhookEventTypes.filter((type) => !namedOnlyWebhookEventTypes.includes(type)) : webhook.events
  const [form, setForm] = useState(() => ({ since: toLocalInput(new Date(Date.now() - 3_600_000)), until: '', event_types: [], mode: 'missing' }))
  const [counted, setCounted] = useState(null)
  const [started, setStarted] = useState(null)
  const change = (next) => {
    setForm({ ...form, ...next })
    setCounted(null)
  }
  const count = useSubmit(async () => {
    const body = toReplayBody(form)
    const { matched } = await call('POST', path, { project: project.id, body: { ...body, dry_run: true } })
    setCounted({ matched, body })
  })
  const start = useSubmit(async () => {
    const answer = await call('POST', path, { project: project.id, body: counted.body })
    setStarted({ ...answer, counted: counted.matched })
    setCounted(null)
  })
  const toggleType = (type) => (e) =>
    change({ event_types: e.target.checked ? [...form.event_types, type] : form.event_types.filter((t) => t !== type) })
  return html`<form class="panel replay" onSubmit=${count.submit} aria-labelledby="replay-title">
    <h2 id="replay-title">Replay events</h2>
    <p class="muted small">
      Sends this webhook's events of a time range again, read from the event log, paced per endpoint and through the same queue as live deliveries.
      Receivers should de-duplicate by event id.
    </p>
    ${webhook.is_active ? null : html`<p class="notice">The webhook is paused: resume it to replay its events.</p>`}
    <div class="filters">
      <${Field}
        label="Events from"
        type="datetime-local"
        step="1"
        name="since"
        required
        value=${form.since}
        onValue=${(since) => change({ since })}
      />
      <${Field}
        label="Events until (empty: now)"
        type="datetime-local"
        step="1"
        name="until"
        value=${form.until}
        onValue=${(until) => change({ until })}
      />
    </div>
    <fieldset>
      <legend>Types to replay (none ticked: all of this webhook's)</legend>
      ${types.map(
        (type) =>
          html`<label class="check"
            ><input type="checkbox" name="event_types" value=${type} checked=${form.event_types.includes(type)} onChange=${toggleType(type)} />
            ${type}</label
          >`,
      )}
    </fieldset>
    <fieldset>
      <legend>Which events</legend>
      ${modes.map(
        ([mode, label, text]) =>
          html`<label class="check"
            ><input type="radio" name="mode" value=${mode} checked=${form.mode === mode} onChange=${() => change({ mode })} />
            <strong>${label}</strong>: ${text}</label
          >`,
      )}
    </fieldset>
    <div class="actions">
      <button type="submit" disabled=${count.busy || !webhook.is_active}>Count</button>
      <span class="muted small">Counting sends nothing.</span>
    </div>
    <${ErrorNotice} error=${count.error ?? start.error} />
    ${
      counted
        ? html`<div class="confirm-replay">
            <p role="status">
              <strong data-matched=${counted.matched}>${events(counted.matched)}</strong> would be sent to <code>${webhook.url}</code>.
            </p>
            <div class="actions">
              ${
                counted.matched > 0
                  ? html`<button type="button" onClick=${start.submit} disabled=${start.busy}>Start the replay</button>`
                  : html`<span>Nothing to send.</span>`
              }
              <button type="button" class="link" onClick=${() => setCounted(null)}>Cancel</button>
            </div>
          </div>`
        : null
    }
    ${
      started
        ? html`${
              started.matched === started.counted
                ? null
                : html`<p class="notice">The log moved on since the count: the replay sends ${events(started.matched)}.</p>`
            } <${OperationProgress} key=${started.operation_id} project=${project} operationId=${started.operation_id} onChange=${onProgress} />`
        : null
    }
  </form>`
}
