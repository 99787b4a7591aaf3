import t from 'tap'
import { jobProgressDecider, lastReportOf, progressOf, type JobProgressCommand, type JobProgressEvent } from '../../domain/job-progress.ts'
import { deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const at = (s: number) => new Date(Date.parse('2025-03-01T12:00:00.000Z') + s * 1000).toISOString()

const report = (progress: number, attempt = 1, jobProgress: number | null = null, now = 0): JobProgressCommand => ({
  type: 'report_progress',
  data: { worker_id: 'w1', attempt, job_progress: jobProgress, progress },
  meta: { now: at(now) },
})

const reported = (progress: number, attempt = 1, now = 0): JobProgressEvent => ({
  type: 'job_progressed',
  data: { worker_id: 'w1', attempt, progress, reported_at: at(now) },
})

t.test('a new value of the attempt is reported, with its attempt', async (t) => {
  const spec = deciderSpec(t, jobProgressDecider)
  const last = spec
    .given([])
    .when(report(0.25, 1, null, 3))
    .then([reported(0.25, 1, 3)])
  t.strictSame(last, { attempt: 1, progress: 0.25 }, 'the state is the last report')
  spec
    .given([reported(0.25)])
    .when(report(0.5))
    .then([reported(0.5)])
})

t.test('the same value again reports nothing', async (t) => {
  const spec = deciderSpec(t, jobProgressDecider)
  spec
    .given([reported(0.25)])
    .when(report(0.25))
    .then([])
  spec
    .given([])
    .when(report(0.4, 1, 0.4))
    .then([], 'a job whose own state shows the value (a log written before reports had their subject)')
})

t.test("a report of an earlier attempt is not this attempt's", async (t) => {
  deciderSpec(t, jobProgressDecider)
    .given([reported(0.25, 1)])
    .when(report(0.25, 2))
    .then([reported(0.25, 2)])
})

t.test('what the job shows: its attempt’s last report while it has started, else its own progress', async (t) => {
  const started = { attempt: 2, started_at: at(0), progress: null }
  t.equal(progressOf(started, { attempt: 2, progress: 0.5 }), 0.5)
  t.equal(progressOf(started, { attempt: 1, progress: 0.5 }), null, 'the attempt before')
  t.equal(progressOf({ ...started, started_at: null }, { attempt: 2, progress: 0.5 }), null, 'retried: nothing until the next claim')
  t.equal(progressOf({ ...started, progress: 0.3 }, null), 0.3, 'a log written before: the job’s own')
})

t.test('a message’s state is its last report', async (t) => {
  t.strictSame(lastReportOf([reported(0.1), reported(0.2, 3)]), { attempt: 3, progress: 0.2 })
  t.equal(lastReportOf([]), null)
})

t.test('evolve on a missing state builds it from a report', async (t) => {
  evolveOnMissingState(t, jobProgressDecider, reported(0.1), [])
})
