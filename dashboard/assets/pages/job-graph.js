import { html, Link } from '../ui.js'

/**
 * A job's place in its workflow (issue 30), in three layers: its parents, the job, its children,
 * each a box in its state's colour that links to that job. `dependencies` is the answer of
 * `GET /jobs/{id}/dependencies`; a continuation has no parents there, so its one parent comes as
 * `continuationParent` (its own detail). Shows nothing for a job with neither parents nor children.
 */
export function JobGraph({ project, job, state, dependencies, continuationParent }) {
  const parents =
    dependencies.parents.length > 0
      ? dependencies.parents
      : continuationParent
        ? [
            {
              job_id: continuationParent.id,
              state: continuationParent.state,
              waiting: state === 'scheduled' && continuationParent.state !== 'succeeded',
            },
          ]
        : []
  const { children, children_total: childrenTotal } = dependencies
  if (parents.length === 0 && childrenTotal === 0) return null
  const hidden = childrenTotal - children.length
  return html`<section class="job-graph" aria-labelledby="job-graph-title">
    <h2 id="job-graph-title">Workflow</h2>
    ${
      parents.length > 0
        ? html`<${GraphLayer} role="parents" label=${`Parents (${parents.length})`} note=${parentNote(dependencies)}>
            ${parents.map((p) => html`<${GraphNode} project=${project} node=${p} kind="parent" />`)}
          </${GraphLayer}>`
        : null
    }
    <${GraphLayer} role="job" label="This job">
      <${GraphNode} project=${project} node=${{ job_id: job.id, state }} kind="job" />
    </${GraphLayer}>
    ${
      childrenTotal > 0
        ? html`<${GraphLayer} role="children" label=${`Children (${childrenTotal})`}>
            ${children.map((c) => html`<${GraphNode} project=${project} node=${c} kind="child" />`)}
            ${hidden > 0 ? html`<li class="graph-more muted small" data-field="children-hidden">and ${hidden} more</li>` : null}
          </${GraphLayer}>`
        : null
    }
  </section>`
}

/** Why the job waits on its parents, or what it does when one fails: only for a job with `depends_on`. */
function parentNote(dependencies) {
  if (dependencies.on_parent_failure === null) return null
  const waiting = dependencies.waiting_for > 0 ? `waiting for ${dependencies.waiting_for} of ${dependencies.parents.length}` : 'every parent settled'
  return `${waiting}; on a parent's failure: ${dependencies.on_parent_failure}`
}

const GraphLayer = ({ role, label, note = null, children }) =>
  html`<div class="graph-layer" data-layer=${role}>
    <p class="graph-label muted small">${label}${note ? html` · <span data-field="parent-rule">${note}</span>` : null}</p>
    <ul>
      ${children}
    </ul>
  </div>`

/** One job of the graph; a parent still waited for is drawn dashed. A job gone from the log (retention) has no state. */
function GraphNode({ project, node, kind }) {
  const shownState = node.state ?? 'gone'
  const title = `${kind === 'job' ? 'This job' : kind === 'parent' ? 'Parent' : 'Child'} ${node.job_id}: ${shownState.replace('_', ' ')}${node.waiting ? ', still waited for' : ''}`
  const body = html`<code>${node.job_id}</code><span class="graph-state">${shownState.replace('_', ' ')}</span>`
  return html`<li
    class=${`graph-node state-${shownState}${node.waiting ? ' waiting' : ''}${kind === 'job' ? ' current' : ''}`}
    data-kind=${kind}
    data-job-id=${node.job_id}
    data-state=${shownState}
  >
    ${
      kind === 'job'
        ? html`<span title=${title} aria-current="page">${body}</span>`
        : html`<${Link} to=${`/projects/${project.id}/jobs/${encodeURIComponent(node.job_id)}`} title=${title} aria-label=${title}>${body}</${Link}>`
    }
  </li>`
}
