import t, { type Test } from 'tap'
import { startHarness, type HttpResponse } from '../support/harness.ts'

// Issue 13, items 9 and 10: query values Postgres cannot store are refused with 400 on every
// route that filters by them (U+0000 made Postgres fail the whole query: a 500), and a recurring
// schedule's payload, which every fired job carries, has the job payload's limits.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'], tunables: { max_payload_bytes: 4096 } })

function isRefused(t: Test, res: HttpResponse, code: string, field?: string): void {
  t.equal(res.status, 400, `${code}: ${JSON.stringify(res.body)}`)
  t.equal(res.body?.error?.code, code)
  t.equal(res.body?.error?.request_id, res.headers.get('x-request-id'))
  if (field !== undefined) t.match(res.body.error.message, field)
}

const cursorHolding = (createdAt: string, id: string) => Buffer.from(JSON.stringify([createdAt, id])).toString('base64url')

t.test('U+0000 and other unstorable query values: 400, never 500', async (t) => {
  isRefused(t, await h.request('GET', '/jobsvc/v1/metrics/summary?queue=%00'), 'invalid_request', 'queue')
  isRefused(t, await h.request('GET', '/jobsvc/v1/metrics/summary?queue=a%00b&group_by=queue'), 'invalid_request', 'queue')
  isRefused(t, await h.request('GET', '/jobsvc/v1/metrics/throughput?queue=%00'), 'invalid_request', 'queue')
  isRefused(t, await h.request('GET', '/jobsvc/v1/jobs?queue=%00'), 'invalid_request', 'queue')
  isRefused(t, await h.request('GET', '/jobsvc/v1/jobs?job_type=%00'), 'invalid_request', 'job_type')
  isRefused(t, await h.request('GET', `/jobsvc/v1/activity?cursor=${cursorHolding('2026-01-01T00:00:00Z', 'a\u0000')}`), 'invalid_cursor')
  isRefused(t, await h.request('GET', `/jobsvc/v1/jobs?cursor=${'c'.repeat(1001)}`), 'invalid_request', 'cursor')
  const fine = await h.request('GET', '/jobsvc/v1/metrics/summary?queue=default')
  t.equal(fine.status, 200, 'a storable queue still answers')
})

function nested(levels: number): Record<string, unknown> {
  let value: Record<string, unknown> = {}
  for (let i = 1; i < levels; i++) value = { a: value }
  return value
}

t.test('a recurring schedule payload has the job payload limits: depth, size, finite numbers', async (t) => {
  const put = (payload: unknown) =>
    h.request('PUT', '/jobsvc/v1/recurring/rjob_report', { job_type: 'report', cron_expression: '0 * * * *', payload })
  isRefused(t, await put(nested(65)), 'invalid_request', 'payload')
  isRefused(t, await put({ blob: 'x'.repeat(5000) }), 'invalid_request', 'payload')
  const infinite = await h.request(
    'PUT',
    '/jobsvc/v1/recurring/rjob_report',
    '{"job_type":"report","cron_expression":"0 * * * *","payload":{"n":1e999}}',
  )
  isRefused(t, infinite, 'invalid_request', 'payload')
  const deepest = await put(nested(64))
  t.equal(deepest.status, 201, 'a payload nested 64 levels within the size limit is accepted, as for a job')
  const job = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'report', payload: { blob: 'x'.repeat(5000) } })
  isRefused(t, job, 'invalid_request', 'payload')
})
