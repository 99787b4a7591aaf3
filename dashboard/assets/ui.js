import { h } from 'preact'
import { useCallback, useEffect, useState } from 'preact/hooks'
import htm from 'htm'

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
