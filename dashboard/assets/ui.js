import { h } from 'preact'
import { useCallback, useEffect, useRef, useState } from 'preact/hooks'
import htm from 'htm'
import { call } from './api.js'

export const html = htm.bind(h)

/** Client-side navigation: every page lives under /dashboard and index.html serves them all. */
export function navigate(path, { replace = false } = {}) {
  const url = path.startsWith('/dashboard') ? path : `/dashboard${path}`
  if (replace) history.replaceState(null, '', url)
  else history.pushState(null, '', url)
  dispatchEvent(new PopStateEvent('popstate'))
}

export function Link({ to, children, ...rest }) {
  const href = `/dashboard${to}`
  const onClick = (event) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return
    event.preventDefault()
    navigate(to)
  }
  return html`<a href=${href} onClick=${onClick} ...${rest}>${children}</a>`
}

/** An API refusal as the service phrased it, with the request id support will ask for. */
export function ErrorNotice({ error }) {
  if (!error) return null
  return html`<div class="error" role="alert">
    <strong>${error.message}</strong>
    ${error.code ? html` <span class="muted">(${error.code})</span>` : null}
    ${error.requestId ? html`<div class="muted small">Request id: <code>${error.requestId}</code></div>` : null}
  </div>`
}

export const Loading = ({ what = 'Loading' }) => html`<p class="loading" aria-live="polite">${what}…</p>`

/** Runs `load` whenever `deps` change; `reload` runs it again. */
export function useLoad(load, deps) {
  const [state, setState] = useState({ data: null, error: null, loading: true })
  const run = useCallback(() => {
    let current = true
    setState((s) => ({ ...s, loading: true }))
    load().then(
      (data) => current && setState({ data, error: null, loading: false }),
      (error) => current && setState({ data: null, error, loading: false }),
    )
    return () => (current = false)
  }, deps)
  useEffect(run, [run])
  return { ...state, reload: run }
}

/**
 * Runs `tick` every `ms` while `active`. Each tick is a request counted against the project's
 * hourly limit, so a page polls only while something it shows is under way.
 */
export function useEvery(ms, active, tick) {
  const latest = useRef(tick)
  latest.current = tick
  useEffect(() => {
    if (!active) return
    const timer = setInterval(() => latest.current(), ms)
    return () => clearInterval(timer)
  }, [ms, active])
}

/** A form's submit or a button's action: disabled while the call runs, keeping the refusal to show. */
export function useSubmit(action) {
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState(null)
  const submit = async (argument) => {
    argument?.preventDefault?.()
    setBusy(true)
    setError(null)
    try {
      await action(argument)
    } catch (err) {
      setError(err)
    } finally {
      setBusy(false)
    }
  }
  return { busy, error, submit, setError }
}

/**
 * One whole number changed in place (a job's priority, a queue's default ttl): the field starts
 * at `current` (empty for null), follows it when the service's value changes, and `save` gets the
 * number (null for an empty field where `required` is off). The button waits for a change.
 */
export function NumberForm({ current, save, min, max, label, title, placeholder, required = false, submitLabel = 'Save' }) {
  const shown = current === null || current === undefined ? '' : String(current)
  const [value, setValue] = useState(shown)
  useEffect(() => setValue(shown), [shown])
  const submit = useSubmit(async (event) => {
    event?.preventDefault?.()
    await save(value === '' ? null : Number(value))
  })
  return html`<form class="inline" onSubmit=${submit.submit}>
      <input
        type="number"
        min=${min}
        max=${max}
        step="1"
        required=${required}
        placeholder=${placeholder}
        aria-label=${label}
        title=${title}
        value=${value}
        onInput=${(e) => setValue(e.currentTarget.value)}
      />
      <button type="submit" class="small" disabled=${submit.busy || value === shown}>${submitLabel}</button>
    </form>
    ${submit.error ? html`<${ErrorNotice} error=${submit.error} />` : null}`
}

/** A table that scrolls sideways on narrow screens rather than squeezing its columns. */
export function Table({ columns, className, busy = false, children }) {
  return html`<div class="table-wrap">
    <table class=${className} aria-busy=${busy}>
      <thead>
        <tr>
          ${columns.map((column) => html`<th scope="col">${column}</th>`)}
        </tr>
      </thead>
      <tbody>
        ${children}
      </tbody>
    </table>
  </div>`
}

/** Cursor paging, newest first: the cursors of the pages before this one, so "Newer" can go back. */
export function useCursorPages() {
  const [cursors, setCursors] = useState([])
  return {
    cursor: cursors[cursors.length - 1] ?? null,
    hasNewer: cursors.length > 0,
    newer: () => setCursors(cursors.slice(0, -1)),
    older: (cursor) => setCursors([...cursors, cursor]),
    reset: () => setCursors([]),
  }
}

/** Newer / Older buttons over `useCursorPages`, for the list answer `page`. */
export const Pager = ({ pages, page, label = 'Pages' }) =>
  html`<nav class="pager" aria-label=${label}>
    <button type="button" disabled=${!pages.hasNewer} onClick=${pages.newer}>Newer</button>
    <button type="button" disabled=${!page?.has_more} onClick=${() => pages.older(page.next_cursor)}>Older</button>
  </nav>`

/** What a list shows before or instead of its rows: the refusal, the first load, or that it is empty. */
export function ListStatus({ error, loading, rows, what, empty }) {
  return html`<${ErrorNotice} error=${error} /> ${loading && !rows ? html`<${Loading} what=${what} />` : null}
    ${rows && rows.length === 0 ? html`<p class="empty">${empty}</p>` : null}`
}

/** Label and value pairs, as a definition list (`className` "details" or "stats"). */
export function Facts({ className = 'details', items }) {
  return html`<dl class=${className}>
    ${items.map(
      ([label, value]) =>
        html`<div>
          <dt>${label}</dt>
          <dd>${value}</dd>
        </div>`,
    )}
  </dl>`
}

/** A project's collection at `path` (schedules, alerts): its list, and deleting one by id, then reloading. */
export function useProjectCollection(project, path) {
  const list = useLoad(() => call('GET', path, { project: project.id }), [project.id, path])
  const remove = useSubmit(async (id) => {
    await call('DELETE', `${path}/${encodeURIComponent(id)}`, { project: project.id })
    list.reload()
  })
  return { ...list, remove }
}

/** `Table` over `rows`, each drawn by `row`; nothing while there are none (ListStatus says why). */
export const RowsTable = ({ rows, row, ...table }) => (rows && rows.length > 0 ? html`<${Table} ...${table}>${rows.map(row)}</${Table}>` : null)

/** A row's last cell: a button that deletes (or removes) the row, named for it; empty for whoever may not. */
export const DeleteCell = ({ allowed, label, busy, onDelete, text = 'Delete' }) =>
  html`<td>
    ${allowed ? html`<button type="button" class="danger" onClick=${onDelete} disabled=${busy} aria-label=${label}>${text}</button>` : null}
  </td>`
