import t from 'tap'
import { eventually, startHarness, withClockShifted, type HttpResponse } from '../support/harness.ts'
import { parseCsv } from '../support/rfc4180.ts'

// Issue 13, item 9: a CSV export cell a spreadsheet would run as a formula is neutralised
// (OWASP CSV injection: a leading `'`), while the JSONL export keeps every value exactly.
t.test('the rule: text starting with = + - @ tab or CR gets a leading quote; nothing else changes', async (t) => {
  const { neutralizeFormula } = await import('../../services/roles/api/export-stream.ts')
  for (const risky of ['=1+1', '+1', '-1', '@SUM(A1)', '\t=1', '\r=1']) t.equal(neutralizeFormula(risky), `'${risky}`, JSON.stringify(risky))
  for (const safe of ['a=1', '{"a":1}', '', ' =1', '2026-01-01T00:00:00.000Z']) t.equal(neutralizeFormula(safe), safe, JSON.stringify(safe))
  t.equal(neutralizeFormula(-5), -5, 'numbers are not text')
  t.equal(neutralizeFormula(null), null)
})

t.test('a jobs export with formula-looking values', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
  const jobType = '=HYPERLINK("http://evil.example","click")'
  const created = await h.request('POST', '/jobsvc/v1/jobs', { job_type: jobType, queue: '+cmd', payload: { a: 1 } })
  t.equal(created.status, 201)
  const poll = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: '@worker', queues: ['+cmd'], wait_seconds: 5 })
  t.equal(poll.body.jobs.length, 1)
  await h.request('POST', '/jobsvc/v1/workers/ack', {
    job_id: created.body.id,
    worker_id: '@worker',
    status: 'failed',
    error: { type: '-Err', message: '@cmd|/c calc', stack_trace: '' },
  })
  await eventually(
    async () => (await h.runtime.sql`SELECT error->>'message' AS message FROM jobs WHERE id = ${created.body.id}`)[0]?.message === '@cmd|/c calc',
  )
  const from = new Date(Date.now() - 3_600_000).toISOString()
  const until = new Date(Date.now() + 3_600_000).toISOString()
  const csv: HttpResponse<string> = await h.request('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}&format=csv`)
  t.equal(csv.status, 200)
  const [header, row] = parseCsv(String(csv.body))
  const cell = (name: string) => row![header!.indexOf(name)]
  t.equal(cell('JobType'), `'${jobType}`)
  t.equal(cell('Queue'), "'+cmd")
  t.equal(cell('ErrorType'), "'-Err")
  t.equal(cell('ErrorMessage'), "'@cmd|/c calc")
  t.equal(cell('Payload'), '{"a":1}', 'JSON columns untouched')

  // The export cooldown is 60 s per project: the second export runs a minute later on the service clock.
  const jsonl: HttpResponse<string> = await withClockShifted(h.runtime, 61_000, () =>
    h.request('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}`),
  )
  // One line of JSONL is one JSON document, which the test client has parsed already.
  const line = typeof jsonl.body === 'string' ? JSON.parse(jsonl.body.trim()) : jsonl.body
  t.equal(line.job_type, jobType, 'JSONL keeps the value exactly')
  t.equal(line.error_message, '@cmd|/c calc')
})
