import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatTime, hasRoleAtLeast } from '../format.js'
import { DeleteCell, ErrorNotice, html, Link, ListStatus, RowsTable, useProjectCollection, useSubmit } from '../ui.js'
import { Field } from './account.js'

/** The service names a schedule after its job type, as domain/recurring-job.ts recurringIdFor does. */
const scheduleIdOf = (jobType) =>
  `rjob_${
    jobType
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-+|-+$/g, '') || 'job'
  }`

function ScheduleForm({ project, onSaved }) {
  const [draft, setDraft] = useState({ job_type: '', cron_expression: '', queue: 'default', timezone: 'UTC' })
  const save = useSubmit(async () => {
    await call('PUT', `/jobsvc/v1/recurring/${encodeURIComponent(scheduleIdOf(draft.job_type))}`, { project: project.id, body: draft })
    setDraft({ ...draft, job_type: '', cron_expression: '' })
    onSaved()
  })
  const set = (key) => (value) => setDraft({ ...draft, [key]: value })
  return html`<form onSubmit=${save.submit} aria-labelledby="new-schedule-title" class="panel">
    <h2 id="new-schedule-title">Add or change a schedule</h2>
    <p class="muted small">One schedule per job type: saving a type that has one changes it. Cron takes 5 fields, or 6 with leading seconds.</p>
    <${Field} label="Job type" name="job_type" placeholder="report.build" required value=${draft.job_type} onValue=${set('job_type')} />
    <${Field} label="Cron" name="cron_expression" placeholder="0 6 * * *" required value=${draft.cron_expression} onValue=${set('cron_expression')} />
    <${Field} label="Queue" name="queue" required value=${draft.queue} onValue=${set('queue')} />
    <${Field} label="Time zone" name="timezone" required value=${draft.timezone} onValue=${set('timezone')} />
    <${ErrorNotice} error=${save.error} />
    <button type="submit" disabled=${save.busy}>Save the schedule</button>
  </form>`
}

export function RecurringPage({ project }) {
  const { data, error, loading, reload, remove } = useProjectCollection(project, '/jobsvc/v1/recurring')
  const mayChange = hasRoleAtLeast(project.role, 'member')
  return html`<section aria-labelledby="recurring-title">
    <h1 id="recurring-title">Recurring schedules</h1>
    <${ListStatus} error=${error ?? remove.error} loading=${loading} rows=${data?.data} what="Loading schedules" empty="No recurring schedules." />
    <${RowsTable}
      className="schedules"
      busy=${loading}
      columns=${['Job type', 'Cron', 'Queue', 'Next run', 'Last run', '']}
      rows=${data?.data}
      row=${(s) =>
        html`<tr data-schedule=${s.id}>
          <td>${s.job_type}</td>
          <td><code>${s.cron_expression}</code> <span class="muted small">${s.timezone}</span></td>
          <td>${s.queue}</td>
          <td>${formatTime(s.next_run_at)}</td>
          <td>
            ${formatTime(s.last_run_at)} ${s.last_job_id ? html` <${Link} to=${`/projects/${project.id}/jobs/${s.last_job_id}`}>job</${Link}>` : null}
          </td>
          <${DeleteCell} allowed=${mayChange} label=${`Delete the schedule of ${s.job_type}`} action=${remove} id=${s.id} />
        </tr>`}
    />
    ${mayChange ? html`<${ScheduleForm} project=${project} onSaved=${reload} />` : html`<p class="muted">Changing schedules needs the role member or above.</p>`}
  </section>`
}
