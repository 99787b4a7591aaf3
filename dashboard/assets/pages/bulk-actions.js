import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { ErrorNotice, html, useSubmit } from '../ui.js'
import { OperationProgress } from './operations.js'

/** What each bulk action applies to: the states where the single-job button is offered. */
const actions = {
  retry: { label: 'Retry all matching', verb: 'retry', states: ['failed', 'dead_letter'] },
  cancel: { label: 'Cancel all matching', verb: 'cancel', states: ['pending', 'scheduled'] },
}

const jobs = (n) => `${n} job${n === 1 ? '' : 's'}`

/** The jobs list's filter as a bulk filter: a state the action does not apply to leaves nothing to do (null). */
function toBulkFilter(filters, createdAfter, action) {
  if (filters.state !== '' && !actions[action].states.includes(filters.state)) return null
  const filter = {}
  if (filters.state !== '') filter.states = [filters.state]
  if (filters.queue !== '') filter.queues = [filters.queue]
  if (filters.job_type !== '') filter.job_types = [filters.job_type]
  if (createdAfter !== null) filter.created_from = createdAfter
  return filter
}

/**
 * "Retry all matching" and "Cancel all matching" for the jobs list's filter (admins): a dry run
 * first shows how many jobs the action would change, and only that answer offers to start it,
 * with the filter it counted; the started operation's progress is followed below, with Stop.
 */
export function BulkActions({ project, filters, createdAfter, onProgress }) {
  const [counted, setCounted] = useState(null)
  const [started, setStarted] = useState(null)
  const count = useSubmit(async (action) => {
    setStarted(null)
    const filter = toBulkFilter(filters, createdAfter, action)
    if (filter === null) return setCounted({ action, filter, matched: 0 })
    const { matched } = await call('POST', '/jobsvc/v1/jobs/bulk', { project: project.id, body: { action, filter, dry_run: true } })
    setCounted({ action, filter, matched })
  })
  const start = useSubmit(async () => {
    const answer = await call('POST', '/jobsvc/v1/jobs/bulk', { project: project.id, body: { action: counted.action, filter: counted.filter } })
    setStarted(answer)
    setCounted(null)
  })
  return html`<div class="bulk-actions" aria-label="Bulk actions">
    <div class="actions">
      ${Object.entries(actions).map(
        ([action, { label }]) =>
          html`<button
            type="button"
            class=${action === 'cancel' ? 'danger' : undefined}
            data-bulk=${action}
            onClick=${() => count.submit(action)}
            disabled=${count.busy || start.busy}
          >
            ${label}
          </button>`,
      )}
      <span class="muted small">Counts first: nothing changes until you confirm.</span>
    </div>
    <${ErrorNotice} error=${count.error ?? start.error} />
    ${
      counted
        ? html`<div class="confirm-bulk" data-action=${counted.action}>
            <p role="status">
              <strong data-matched=${counted.matched}>${jobs(counted.matched)}</strong> match
              ${counted.filter === null ? ` (this state cannot be ${counted.action === 'retry' ? 'retried' : 'cancelled'})` : ''}.
            </p>
            <div class="actions">
              ${
                counted.matched > 0
                  ? html`<button type="button" data-confirm=${counted.action} onClick=${start.submit} disabled=${start.busy}>
                      ${counted.action === 'retry' ? 'Retry' : 'Cancel'} ${jobs(counted.matched)}
                    </button>`
                  : html`<span>Nothing to do.</span>`
              }
              <button type="button" class="link" onClick=${() => setCounted(null)}>Dismiss</button>
            </div>
          </div>`
        : null
    }
    ${started ? html`<${OperationProgress} key=${started.operation_id} project=${project} operationId=${started.operation_id} onChange=${onProgress} />` : null}
  </div>`
}
