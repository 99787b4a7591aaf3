import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatDuration, formatTime, hasRoleAtLeast, keyDimensionLabel } from '../format.js'
import { ErrorNotice, Facts, html, Link, Loading, RowsTable, useEvery, useLoad, useSubmit } from '../ui.js'
import { Field } from './account.js'

/** How often the limits state is read again while the page is open (one request of the project's hourly limit each time). */
const stateRefreshMs = 5000

/** What a job finds when its key or queue is full, by `strategy`: the form's choices and how the limits read. */
const strategies = {
  queue: 'it waits (queue)',
  cancel_newest: 'it is cancelled (cancel_newest)',
  cancel_in_progress: "the key's oldest running job is asked to stop (cancel_in_progress)",
}

/** The key dimensions a limit may count by; `tag` stands for `tag:<name>`, the name typed beside it. */
const dimensions = { concurrency_key: 'its concurrency key', job_type: 'its job type', tag: 'one of its tags' }

const limitsPath = (queue) => `/jobsvc/v1/queues/${encodeURIComponent(queue)}/limits`

const hasLimits = (limits) => limits.concurrency !== null || limits.rate !== null

/** The key dimension the state's keys are counted by: the per-key limit's, else the rate's (projections/flow-gates.ts). */
const keyDimensionOf = (limits) => limits.concurrency?.per_key?.by ?? limits.rate?.by ?? null

/** Tokens are fractional while the bucket refills; shown rounded down, since a start needs a whole one. */
const formatTokens = (tokens) => (tokens === null ? '—' : String(Math.floor(tokens * 10) / 10))

function Since({ at }) {
  if (!at) return '—'
  return html`${formatDuration(Date.now() - Date.parse(at))} <span class="muted small">(since ${formatTime(at)})</span>`
}

function LimitsFacts({ limits }) {
  const { concurrency, rate } = limits
  const limit = (name, value) => html`<span data-limit=${name}>${value}</span>`
  return html`<${Facts}
    items=${[
      ['Running jobs at most', limit('queue', concurrency?.limit ?? 'no limit')],
      [
        'Per key',
        limit('per-key', concurrency?.per_key ? `${concurrency.per_key.limit} running per ${keyDimensionLabel(concurrency.per_key.by)}` : 'no limit'),
      ],
      ['When full', limit('strategy', concurrency ? (strategies[concurrency.strategy] ?? concurrency.strategy) : '—')],
      ['Rate of starts', limit('rate', rate ? `${rate.limit} per ${rate.period_seconds} s` : 'no limit')],
      ['Burst', limit('burst', rate ? rate.burst : '—')],
      ['Rate counted for', limit('rate-by', rate ? (rate.by === null ? 'the whole queue' : `each ${keyDimensionLabel(rate.by)}`) : '—')],
      ['Changed', formatTime(limits.updated_at)],
    ]}
  />`
}

/** `by` as the form holds it: a dimension of `dimensions` and, for a tag, its name. */
function toDimensionDraft(by) {
  if (by === null || by === undefined) return { by: '', tag: '' }
  return by.startsWith('tag:') ? { by: 'tag', tag: by.slice(4) } : { by, tag: '' }
}

const toDimension = (by, tag) => (by === 'tag' ? `tag:${tag.trim()}` : by)

const text = (n) => (n === null || n === undefined ? '' : String(n))

function toDraft({ concurrency, rate }) {
  const perKey = toDimensionDraft(concurrency?.per_key?.by ?? 'concurrency_key')
  const rateBy = toDimensionDraft(rate?.by)
  return {
    limit: text(concurrency?.limit),
    per_key_limit: text(concurrency?.per_key?.limit),
    per_key_by: perKey.by,
    per_key_tag: perKey.tag,
    strategy: concurrency?.strategy ?? 'queue',
    rate_limit: text(rate?.limit),
    rate_period: text(rate?.period_seconds ?? 60),
    rate_burst: text(rate?.burst),
    rate_by: rateBy.by,
    rate_tag: rateBy.tag,
  }
}

const numberOrNull = (value) => (value === '' ? null : Number(value))

/** The whole limits object the PUT takes: a part left empty is null. */
function toBody(draft) {
  const limit = numberOrNull(draft.limit)
  const perKey = numberOrNull(draft.per_key_limit)
  const rate = numberOrNull(draft.rate_limit)
  return {
    concurrency:
      limit === null && perKey === null
        ? null
        : {
            limit,
            per_key: perKey === null ? null : { limit: perKey, by: toDimension(draft.per_key_by, draft.per_key_tag) },
            strategy: draft.strategy,
          },
    rate:
      rate === null
        ? null
        : {
            limit: rate,
            period_seconds: Number(draft.rate_period),
            burst: numberOrNull(draft.rate_burst),
            by: draft.rate_by === '' ? null : toDimension(draft.rate_by, draft.rate_tag),
          },
  }
}

function DimensionFields({ label, name, value, tag, onValue, onTag, none }) {
  return html`<label class="field"
      ><span>${label}</span>
      <select name=${name} value=${value} onChange=${(e) => onValue(e.target.value)}>
        ${none ? html`<option value="">${none}</option>` : null}
        ${Object.entries(dimensions).map(([by, words]) => html`<option value=${by}>${words}</option>`)}
      </select>
    </label>
    ${value === 'tag' ? html`<${Field} label=${`${label}: tag name`} name=${`${name}_tag`} required maxlength="100" value=${tag} onValue=${onTag} />` : null}`
}

/**
 * An admin's form over the queue's limits, starting from the service's (the page remounts it when
 * they change): it PUTs the whole object, and "Remove limits" DELETEs them.
 */
function LimitsForm({ project, queue, limits, onSaved }) {
  const [draft, setDraft] = useState(() => toDraft(limits))
  const set = (key) => (value) => setDraft({ ...draft, [key]: value })
  const save = useSubmit(async () => {
    const body = toBody(draft)
    if (body.concurrency === null && body.rate === null)
      throw new Error('Set a concurrency limit or a rate of starts; to have neither, remove the limits.')
    await call('PUT', limitsPath(queue), { project: project.id, body })
    onSaved()
  })
  const remove = useSubmit(async () => {
    await call('DELETE', limitsPath(queue), { project: project.id })
    onSaved()
  })
  // Every number of the limits is a whole one from 1; the service refuses past `max` too.
  const number = (name, label, max, required = false) =>
    html`<${Field}
      label=${label}
      type="number"
      name=${name}
      min="1"
      max=${max}
      step="1"
      required=${required}
      value=${draft[name]}
      onValue=${set(name)}
    />`
  const dimension = (prefix, label, none) =>
    html`<${DimensionFields}
      label=${label}
      name=${`${prefix}_by`}
      value=${draft[`${prefix}_by`]}
      tag=${draft[`${prefix}_tag`]}
      onValue=${set(`${prefix}_by`)}
      onTag=${set(`${prefix}_tag`)}
      none=${none}
    />`
  return html`<form onSubmit=${save.submit} aria-labelledby="limits-form-title" class="panel">
    <h3 id="limits-form-title">Change the limits</h3>
    <fieldset>
      <legend>Running jobs</legend>
      ${number('limit', 'At most, in the queue (empty: no limit)', 10000)} ${number('per_key_limit', 'At most, per key (empty: no limit)', 1000)}
      ${draft.per_key_limit !== '' ? dimension('per_key', "A job's key is") : null}
      <label class="field"
        ><span>When a job finds its key or queue full</span>
        <select name="strategy" value=${draft.strategy} onChange=${(e) => set('strategy')(e.target.value)}>
          ${Object.entries(strategies).map(([value, label]) => html`<option value=${value}>${label}</option>`)}
        </select>
      </label>
    </fieldset>
    <fieldset>
      <legend>Rate of starts</legend>
      ${number('rate_limit', 'Starts per period (empty: no limit)', 100000)}
      ${
        draft.rate_limit !== ''
          ? html`${number('rate_period', 'Period (seconds)', 86400, true)}
            ${number('rate_burst', 'Burst: starts at once at most (empty: the starts per period)', 100000)}
            ${dimension('rate', 'Counted for', 'the whole queue')}`
          : null
      }
    </fieldset>
    <${ErrorNotice} error=${save.error ?? remove.error} />
    <div class="actions">
      <button type="submit" disabled=${save.busy}>Save limits</button>
      ${hasLimits(limits) ? html`<button type="button" class="danger" onClick=${remove.submit} disabled=${remove.busy}>Remove limits</button>` : null}
    </div>
  </form>`
}

function StateFacts({ state }) {
  const named = (name, value) => html`<span data-limits-state=${name}>${value}</span>`
  return html`<${Facts}
    className="stats"
    items=${[
      ['Running under the limits', named('running', state.running)],
      ['Waiting (due now)', named('waiting', state.waiting)],
      ['Oldest waiting', html`<${Since} at=${state.oldest_waiting_since} />`],
      ["Tokens (the queue's rate)", named('tokens', formatTokens(state.tokens))],
      ['Held until', named('held-until', formatTime(state.held_until))],
      ['Keys at their limit', named('keys-at-limit', state.keys_at_limit)],
    ]}
  />`
}

function KeysTable({ state }) {
  const by = keyDimensionOf(state.limits)
  if (by === null) return null
  return html`<h3>Keys <span class="muted small">(by ${keyDimensionLabel(by)}, most waiting first, at most 50)</span></h3>
    ${state.keys.length === 0 ? html`<p class="empty">No key has a job running or waiting.</p>` : null}
    <${RowsTable}
      className="limit-keys"
      columns=${['Key', 'Running', 'Waiting', 'Oldest waiting', 'Tokens', 'Held until']}
      rows=${state.keys}
      row=${(k) =>
        html`<tr data-key=${k.key} data-running=${k.running} data-waiting=${k.waiting}>
          <td><code>${k.key}</code></td>
          <td>${k.running}</td>
          <td>${k.waiting}</td>
          <td><${Since} at=${k.oldest_waiting_since} /></td>
          <td>${formatTokens(k.tokens)}</td>
          <td>${formatTime(k.held_until)}</td>
        </tr>`}
    />`
}

/**
 * A queue's flow limits (issue 29; README "Flow limits"): what they are, changed by an admin, and
 * what they hold back now, read again every few seconds. One request serves both: the state
 * answers the limits with it.
 */
export function QueuePage({ project, queue }) {
  const { data, error, loading, reload } = useLoad(() => call('GET', `${limitsPath(queue)}/state`, { project: project.id }), [project.id, queue])
  useEvery(stateRefreshMs, true, reload)
  const mayChange = hasRoleAtLeast(project.role, 'admin')
  const limits = data?.limits
  return html`<section aria-labelledby="queue-title">
    <p><${Link} to=${`/projects/${project.id}`}>← Overview</${Link}></p>
    <h1 id="queue-title">Queue <code>${queue}</code></h1>
    <p><${Link} to=${`/projects/${project.id}/jobs?queue=${encodeURIComponent(queue)}`}>Its jobs</${Link}></p>
    <${ErrorNotice} error=${error} />
    ${
      !data
        ? loading
          ? html`<${Loading} what="Loading the queue's limits" />`
          : null
        : html`<h2 id="limits-title">Limits ${loading ? html`<span class="muted small">(refreshing)</span>` : null}</h2>
            <div data-limits=${hasLimits(limits) ? 'set' : 'none'}>
              ${
                hasLimits(limits)
                  ? html`<${LimitsFacts} limits=${limits} />`
                  : html`<p class="empty">No limits: the queue's jobs start as soon as a worker polls for them.</p>`
              }
            </div>
            ${
              mayChange
                ? html`<${LimitsForm} key=${limits.updated_at ?? 'none'} project=${project} queue=${queue} limits=${limits} onSaved=${reload} />`
                : html`<p class="muted">Changing the limits needs the role admin.</p>`
            }
            <h2>What the limits hold back now</h2>
            <${StateFacts} state=${data} />
            <${KeysTable} state=${data} />`
    }
  </section>`
}
