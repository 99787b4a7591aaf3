import { useEffect, useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatTime } from '../format.js'
import { ErrorNotice, Facts, html, ListStatus, Loading, Pager, RowsTable, useCursorPages, useEvery, useLoad, useSubmit } from '../ui.js'

/** How often a running operation is read again: each read is a request of the project's hourly limit. */
const pollMs = 2000

const statusClass = { running: 'state-processing', succeeded: 'state-succeeded', cancelled: 'state-cancelled', failed: 'state-failed' }

const kindLabel = { webhook_replay: 'Webhook replay', job_bulk: 'Bulk job action' }

const OperationStatus = ({ status }) => html`<span class=${`badge ${statusClass[status] ?? ''}`} data-status=${status}>${status}</span>`

const operationPath = (id) => `/jobsvc/v1/operations/${encodeURIComponent(id)}`

const Count = ({ op, name }) => html`<span data-count=${name}>${op[name]}</span>`

/** A bulk job action's counts: `succeeded` are the jobs changed, `failed` those skipped (their state no longer allowed it). */
function bulkSummaryOf(op) {
  if (op.status === 'running')
    return `Running: ${op.processed} of ${op.matched} jobs reached; ${op.succeeded} changed and ${op.failed} skipped so far.`
  if (op.status === 'succeeded') return `Done: ${op.succeeded} jobs changed, ${op.failed} skipped.`
  if (op.status === 'cancelled')
    return `Stopped after ${op.processed} of ${op.matched}: ${op.succeeded} changed, ${op.failed} skipped; the rest untouched.`
  return `Failed: ${op.error?.message ?? 'the operation stopped'}${op.error ? ` (${op.error.code})` : ''}.`
}

function summaryOf(op) {
  if (op.kind === 'job_bulk') return bulkSummaryOf(op)
  if (op.status === 'running') return `Sending: ${op.processed} of ${op.matched} handed on; ${op.succeeded} delivered and ${op.failed} failed so far.`
  if (op.status === 'succeeded') return `Done: of ${op.matched}, ${op.succeeded} delivered and ${op.failed} failed.`
  if (op.status === 'cancelled') return `Stopped after ${op.processed} of ${op.matched}; the deliveries it had made still go out.`
  return `Failed: ${op.error?.message ?? 'the operation stopped'}${op.error ? ` (${op.error.code})` : ''}.`
}

/**
 * An operation as it stands, read again every `pollMs` while it runs. `onChange` receives each
 * reading. A refusal (it is gone, the role was taken away) stops the polling; a lost connection
 * or a server error does not.
 */
function useOperation(project, id, onChange) {
  const [op, setOp] = useState(null)
  const [error, setError] = useState(null)
  const [round, setRound] = useState(0)
  const isRunning = op === null || op.status === 'running'
  useEffect(() => {
    if (!isRunning) return
    let current = true
    const read = async () => {
      try {
        const next = await call('GET', operationPath(id), { project: project.id })
        if (!current) return
        setOp(next)
        setError(null)
        onChange?.(next)
      } catch (err) {
        if (!current) return
        setError(err)
        if (err.status > 0 && err.status < 500) return
      }
      setRound((r) => r + 1)
    }
    const timer = setTimeout(read, round === 0 ? 0 : pollMs)
    return () => {
      current = false
      clearTimeout(timer)
    }
  }, [project.id, id, round, isRunning])
  const stop = useSubmit(async () => {
    const next = await call('DELETE', operationPath(id), { project: project.id })
    setOp(next)
    onChange?.(next)
  })
  return { op, error, stop }
}

/** A started operation's progress, followed until it ends, with Stop while it runs. Key it by `operationId`. */
export function OperationProgress({ project, operationId, onChange }) {
  const { op, error, stop } = useOperation(project, operationId, onChange)
  return html`<div class="operation" data-operation=${operationId}>
    <h3>${kindLabel[op?.kind] ?? 'Operation'} <code>${operationId}</code> ${op ? html`<${OperationStatus} status=${op.status} />` : null}</h3>
    ${
      op
        ? html`<p role="status">${summaryOf(op)}</p>
            <progress max=${Math.max(op.matched, 1)} value=${op.status === 'succeeded' ? Math.max(op.matched, 1) : op.processed}>
              ${op.processed} of ${op.matched}
            </progress>
            <${Facts}
              className="stats"
              items=${[
                ['Matched', html`<${Count} op=${op} name="matched" />`],
                ['Processed', html`<${Count} op=${op} name="processed" />`],
                ['Succeeded', html`<${Count} op=${op} name="succeeded" />`],
                ['Failed', html`<${Count} op=${op} name="failed" />`],
                ['Started', formatTime(op.created_at)],
                ['Finished', formatTime(op.finished_at)],
              ]}
            />
            ${
              op.status === 'running'
                ? html`<div class="actions">
                    <button type="button" class="danger" onClick=${stop.submit} disabled=${stop.busy}>Stop</button>
                    <span class="muted small"
                      >${op.kind === 'job_bulk' ? 'Stopping changes no more jobs; those changed stay so.' : 'Stopping sends nothing more; deliveries already made still go out.'}</span
                    >
                  </div>`
                : null
            }`
        : html`<${Loading} what="Reading the operation" />`
    }
    <${ErrorNotice} error=${stop.error ?? error} />
  </div>`
}

/** The project's operations, newest first, read again while one of the page runs; Stop on a running one. */
export function OperationList({ project }) {
  const pages = useCursorPages()
  const cursor = pages.cursor
  const { data, error, loading, reload } = useLoad(
    () => call('GET', '/jobsvc/v1/operations', { project: project.id, query: { limit: 10, cursor } }),
    [project.id, cursor],
  )
  useEvery(pollMs, data?.data.some((op) => op.status === 'running') ?? false, reload)
  const stop = useSubmit(async (id) => {
    await call('DELETE', operationPath(id), { project: project.id })
    reload()
  })
  return html`<section aria-labelledby="operations-title">
    <h2 id="operations-title">Operations</h2>
    <p class="muted">
      The project's long-running actions, newest first: the replays started on a webhook's page and the bulk actions of the jobs list.
    </p>
    <${ListStatus} error=${error} loading=${loading} rows=${data?.data} what="Loading operations" empty="No operations yet." />
    <${RowsTable}
      className="operations"
      busy=${loading}
      columns=${['Operation', 'Kind', 'Status', 'Matched', 'Processed', 'Succeeded', 'Failed', 'Started', 'Finished', '']}
      rows=${data?.data}
      row=${(op) =>
        html`<tr data-operation=${op.id}>
          <td><code>${op.id}</code></td>
          <td>${kindLabel[op.kind] ?? op.kind}</td>
          <td><${OperationStatus} status=${op.status} /></td>
          <td><${Count} op=${op} name="matched" /></td>
          <td><${Count} op=${op} name="processed" /></td>
          <td><${Count} op=${op} name="succeeded" /></td>
          <td><${Count} op=${op} name="failed" /></td>
          <td>${formatTime(op.created_at)}</td>
          <td>${formatTime(op.finished_at)}</td>
          <td>
            ${
              op.status === 'running'
                ? html`<button type="button" class="danger" onClick=${() => stop.submit(op.id)} disabled=${stop.busy} aria-label=${`Stop ${op.id}`}>
                    Stop
                  </button>`
                : null
            }
          </td>
        </tr>`}
    />
    <${ErrorNotice} error=${stop.error} />
    <${Pager} pages=${pages} page=${data} label="Operation pages" />
  </section>`
}
