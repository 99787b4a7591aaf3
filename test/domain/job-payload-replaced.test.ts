import t from 'tap'
import { fold } from '../../domain/decider.ts'
import { foldJobAsOf } from '../../domain/job-as-of.ts'
import { InvalidState, JobNotFound } from '../../domain/errors.ts'
import { jobDecider, payloadInEvents, upgradeJob, type Job, type JobCommand, type JobEvent } from '../../domain/job.ts'
import { metricsOfJobEvent } from '../../domain/job-metrics.ts'
import { deciderSpec } from '../support/decider-spec.ts'
import { createJobData } from '../support/job-commands.ts'

// Issue 29, item 5 (b): a dedup create with `on_duplicate: "replace_payload"` gives a waiting job
// its payload; the job's state names the message that holds the latest one.

const t0 = Date.parse('2026-03-01T12:00:00.000Z')
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString()

const create = (runAt: string | null = null): JobCommand => ({
  type: 'create_job',
  data: createJobData({ job_id: 'job_1', project_id: 'prj_1', payload: { v: 1 }, run_at: runAt }),
  meta: { now: at(0) },
})
const created = (runAt: string | null = null) => jobDecider.decide(create(runAt), null)[0]!
const replace = (v: number, seconds = 5): JobCommand => ({ type: 'replace_payload', data: { payload: { v } }, meta: { now: at(seconds) } })
const replaced = (v: number, state: 'pending' | 'scheduled' = 'pending', seconds = 5): JobEvent => ({
  type: 'job_payload_replaced',
  data: { payload: { v }, state, replaced_at: at(seconds) },
})
const claimed: JobEvent = { type: 'job_claimed', data: { worker_id: 'w1', attempt: 1, started_at: at(10) } }
const succeeded: JobEvent = { type: 'job_succeeded', data: { worker_id: 'w1', attempt: 1, duration_ms: 5, completed_at: at(11) } }

t.test('a pending or scheduled job takes a new payload and keeps its state', async (t) => {
  const state = deciderSpec(t, jobDecider)
    .given([created()])
    .when(replace(2))
    .then([replaced(2)])
  t.equal(state?.state, 'pending')
  t.equal(state?.payload_seq, 0, 'the state names this very message until it is stored')
  t.equal(state?.updated_at, at(5))
  const later = deciderSpec(t, jobDecider)
    .given([created(at(3600))])
    .when(replace(3))
    .then([replaced(3, 'scheduled')])
  t.equal(later?.state, 'scheduled')
})

t.test("a debounce moves a scheduled job's due time with its payload, and its wait deadline with it", async (t) => {
  const moved: JobCommand = { type: 'replace_payload', data: { payload: { v: 2 }, run_at: at(90) }, meta: { now: at(5) } }
  const state = deciderSpec(t, jobDecider)
    .given([created(at(30))])
    .when(moved)
    .then([{ type: 'job_payload_replaced', data: { payload: { v: 2 }, state: 'scheduled', replaced_at: at(5), run_at: at(90) } }])
  t.equal(state?.run_at, at(90))
  t.equal(state?.state, 'scheduled')
  deciderSpec(t, jobDecider).given([created()]).when(moved).thenThrows(InvalidState, 'invalid_state', "a due job's time does not move")

  const withTtl: JobCommand = {
    type: 'create_job',
    data: { ...createJobData({ job_id: 'job_1', project_id: 'prj_1', run_at: at(30) }), ttl_seconds: 60 },
    meta: { now: at(0) },
  }
  const ttlJob = fold(jobDecider, null, jobDecider.decide(withTtl, null)) as Job
  t.equal(ttlJob.expires_at, at(90))
  const movedTtl = fold(jobDecider, ttlJob, jobDecider.decide(moved, ttlJob)) as Job
  t.equal(movedTtl.expires_at, at(150), 'the wait to be claimed starts at the new due time')
})

t.test('a running, ended or missing job refuses a new payload', async (t) => {
  deciderSpec(t, jobDecider).given([created(), claimed]).when(replace(2)).thenThrows(InvalidState, 'invalid_state')
  deciderSpec(t, jobDecider).given([created(), claimed, succeeded]).when(replace(2)).thenThrows(InvalidState, 'invalid_state')
  deciderSpec(t, jobDecider).given([]).when(replace(2)).thenThrows(JobNotFound, 'job_not_found')
})

t.test('a job never replaced keeps the shape of every older state', async (t) => {
  const job = fold(jobDecider, null, [created(), claimed]) as Job
  t.notOk('payload_seq' in job)
})

t.test('a stored state names the message by its sequence; later messages carry it on', async (t) => {
  const state = fold(jobDecider, null, [created(), replaced(2)]) as Job
  const stored = upgradeJob(state, 42, [replaced(2)])
  t.equal(stored.payload_seq, 42)
  const next = upgradeJob(jobDecider.evolve(stored, claimed) as Job, 43, [claimed])
  t.equal(next.payload_seq, 42, 'a claim keeps the reference')
  t.equal(upgradeJob(state, null, [replaced(2)]).payload_seq, 0, 'a message seen without its sequence keeps "this message"')
})

t.test('the payload of a message: its replacement over its job_created, the latest one last', async (t) => {
  t.same(payloadInEvents([created()]), { v: 1 })
  t.same(payloadInEvents([replaced(2), replaced(3)]), { v: 3 })
  t.equal(payloadInEvents([claimed]), null)
})

t.test('as of a moment: the payload it had then', async (t) => {
  const messages = [
    { seq: 1, events: [{ ...created(), time: at(0) }] },
    { seq: 2, events: [{ ...replaced(2), time: at(5) }] },
    { seq: 3, events: [{ ...replaced(3, 'pending', 8), time: at(8) }] },
  ]
  t.same(foldJobAsOf(messages, { time: at(1) })?.payload, { v: 1 })
  t.same(foldJobAsOf(messages, { time: at(6) })?.payload, { v: 2 })
  t.same(foldJobAsOf(messages, { time: at(9) })?.payload, { v: 3 })
})

t.test('a replacement moves no metric', async (t) => {
  t.same(metricsOfJobEvent(replaced(2)), { states: {}, counts: {}, duration_ms: null })
})
