import fc from 'fast-check'
import t from 'tap'
import { fold } from '../../domain/decider.ts'
import { foldJobAsOf, isThrough, type JobMessage } from '../../domain/job-as-of.ts'
import { jobDecider, upgradeJob, type Job, type JobAggregate, type JobCommand, type JobError, type JobEvent } from '../../domain/job.ts'
import { createJobData } from '../support/job-commands.ts'

// A job as of a moment (issue 27, item 1): its messages folded through the moment by the
// aggregate's own evolve give, at each message, the state that message stores, and the facts
// (payload, last error, result) a read of the job at that moment resolves.

const at = (s: number) => new Date(Date.parse('2026-03-01T12:00:00.000Z') + s * 1000).toISOString()
const boom: JobError = { type: 'Boom', message: 'it broke', stack_trace: 'at x' }
const stored = (type: JobEvent['type'], time: string, data: object) =>
  ({ type, data, id: `evt_${type}_${time}`, time }) as JobEvent & { time: string }

const created = stored('job_created', at(0), {
  ...createJobData({ job_id: 'job_1', project_id: 'prj_1', payload: { to: 'ada@example.com' }, max_attempts: 1 }),
  state: 'pending',
  waiting_for_parent: false,
  traceparent: null,
  created_at: at(0),
})
const claimed = (attempt: number, s: number) => stored('job_claimed', at(s), { worker_id: 'w1', attempt, started_at: at(s) })
const deadLettered = stored('job_dead_lettered', at(3), {
  worker_id: 'w1',
  attempt: 1,
  error: boom,
  duration_ms: 1000,
  completed_at: at(3),
  reaped: false,
})
const retried = stored('job_retried', at(5), { attempt: 1, max_attempts: 2, previous_state: 'dead_letter', retried_at: at(5) })
const succeeded = stored('job_succeeded', at(9), { worker_id: 'w1', attempt: 2, duration_ms: 500, completed_at: at(9), result: { sent: true } })

const messages: JobMessage[] = [
  { seq: 1, events: [created] },
  { seq: 4, events: [claimed(1, 2)] },
  { seq: 6, events: [deadLettered] },
  { seq: 7, events: [retried] },
  { seq: 11, events: [claimed(2, 7)] },
  { seq: 12, events: [succeeded] },
]

t.test('each moment folds the events through it: state, payload, error and result as of then', async (t) => {
  t.equal(foldJobAsOf(messages, { time: at(-1) }), null, 'before its job_created: no job')
  t.equal(foldJobAsOf(messages, { position: { seq: 0, index: 'all' } }), null, 'a position before it: no job')

  const first = foldJobAsOf(messages, { time: at(0) })!
  t.match(first, { seq: 1, payload: { to: 'ada@example.com' }, error: null, result: null, job: { state: 'pending', attempt: 0 } })

  const dead = foldJobAsOf(messages, { position: { seq: 6, index: 'all' } })!
  t.match(
    dead,
    { seq: 6, error: boom, result: null, job: { state: 'dead_letter', error_seq: 6, attempt: 1 } },
    'the error the message recorded, by its sequence',
  )
  t.strictSame(foldJobAsOf(messages, { time: at(4) }), dead, 'an instant between two events is the earlier one')

  const again = foldJobAsOf(messages, { time: at(7) })!
  t.match(again, { seq: 11, error: null, job: { state: 'processing', attempt: 2, max_attempts: 2, error_seq: null } }, 'the retry cleared the error')

  const done = foldJobAsOf(messages, { time: at(60) })!
  t.match(done, { seq: 12, result: { sent: true }, job: { state: 'succeeded', completed_at: at(9) } })
  t.strictSame(foldJobAsOf(messages, { position: { seq: 500, index: 'all' } }), done, 'a position past the last event: the job now')
})

t.test('a cursor inside a message of several events folds that message up to its event', async (t) => {
  const attached = stored('job_child_attached', at(3), { child_job_id: 'job_2', attached_at: at(3) })
  const failed = stored('job_attempt_failed', at(3), {
    worker_id: 'w1',
    attempt: 1,
    error: boom,
    duration_ms: 10,
    retry_at: at(20),
    failed_at: at(3),
    reaped: false,
  })
  const both: JobMessage[] = [...messages.slice(0, 2), { seq: 6, events: [attached, failed] }]
  const half = foldJobAsOf(both, { position: { seq: 6, index: 0 } })!
  t.match(half, { seq: 6, error: null, job: { state: 'processing', children: ['job_2'], error_seq: null } }, 'the attachment, not yet the failure')
  const whole = foldJobAsOf(both, { position: { seq: 6, index: 'all' } })!
  t.match(whole, { seq: 6, error: boom, job: { state: 'pending', error_seq: 6, run_at: at(20) } })
  t.ok(isThrough({ position: { seq: 6, index: 0 } }, 6, 0, 2, at(3)))
  t.notOk(isThrough({ position: { seq: 6, index: 0 } }, 6, 1, 2, at(3)))
  t.ok(isThrough({ position: { seq: 6, index: 'all' } }, 6, 1, 2, at(3)), "'all' is the message's last event")
})

/** Random decisions on one job, stored as the log stores them: the state after each message as a load reads it. */
type Op = 'claim' | 'succeed' | 'fail' | 'retry' | 'cancel' | 'promote' | 'reap'

function commandOf(op: Op, now: string, attempt: number): JobCommand {
  const meta = { now, random: 0.5 }
  switch (op) {
    case 'claim':
      return { type: 'claim_job', data: { worker_id: 'w1' }, meta }
    case 'succeed':
    case 'fail':
      return {
        type: 'ack_job',
        data: { worker_id: 'w1', status: op === 'succeed' ? 'succeeded' : 'failed', duration_ms: 5, error: boom, result: { n: attempt } },
        meta,
      }
    case 'retry':
      return { type: 'retry_job', data: {}, meta }
    case 'cancel':
      return { type: 'cancel_job', data: {}, meta }
    case 'promote':
      return { type: 'promote_job', data: {}, meta }
    case 'reap':
      return { type: 'reap_job', data: { attempt, error: boom }, meta }
  }
}

t.test('folded through each message, any history gives the state that message stores', async (t) => {
  const ops = fc.array(
    fc.record({ op: fc.constantFrom<Op>('claim', 'succeed', 'fail', 'retry', 'cancel', 'promote', 'reap'), gap: fc.integer({ min: 1, max: 5 }) }),
    { maxLength: 30 },
  )
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 3 }), fc.option(fc.integer({ min: 1, max: 100 })), ops, (maxAttempts, runAtIn, steps) => {
      let seconds = 0
      let seq = 1
      const runAt = runAtIn === null ? null : at(runAtIn)
      const create: JobCommand = {
        type: 'create_job',
        data: createJobData({ job_id: 'job_1', project_id: 'prj_1', max_attempts: maxAttempts, run_at: runAt }),
        meta: { now: at(0) },
      }
      const log: Array<{ message: JobMessage; state: Job }> = []
      let state: JobAggregate = null
      const append = (command: JobCommand) => {
        let decided: JobEvent[]
        try {
          decided = jobDecider.decide(command, state)
        } catch {
          return
        }
        if (decided.length === 0) return
        const events = decided.map((e) => ({ ...e, id: `evt_${seq}`, time: command.meta.now }))
        // As handleCommand folds and the store reads back (streams/stored-forms.ts).
        state = upgradeJob(fold(jobDecider, state, decided)!, seq, events)
        log.push({ message: { seq, events }, state })
        seq += 1 + (seq % 3)
      }
      append(create)
      for (const { op, gap } of steps) {
        seconds += gap
        append(commandOf(op, at(seconds), (state as JobAggregate)?.attempt ?? 0))
      }
      if (log.length === 0) return false
      const all = log.map((l) => l.message)
      for (const { message, state: expected } of log) {
        const byPosition = foldJobAsOf(all, { position: { seq: message.seq, index: 'all' } })
        if (JSON.stringify(byPosition?.job) !== JSON.stringify(expected)) return false
      }
      return true
    }),
    { numRuns: 300 },
  )
  t.pass('300 random histories')
})
