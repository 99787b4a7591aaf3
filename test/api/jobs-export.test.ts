import t from 'tap'
import { eventually, startHarness, type HttpResponse } from '../support/harness.ts'
import { parseCsv } from '../support/rfc4180.ts'

t.test('jobs export', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
  const ids: string[] = []
  for (let i = 0; i < 7; i++) {
    const res = await h.request('POST', '/jobsvc/v1/jobs', {
      job_type: 'exp',
      queue: 'x',
      payload: { i, text: i === 3 ? 'comma, "quote"\r\nnewline' : 'plain', n: 1.5 },
      tags: i === 2 ? { team: 'a,b' } : undefined,
    })
    ids.push(res.body.id)
  }
  await eventually(async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs`)[0]!.n === 7)
  const from = new Date(Date.now() - 3_600_000).toISOString()
  const until = new Date(Date.now() + 3_600_000).toISOString()
  const realNow = h.runtime.now
  let shift = 0
  h.runtime.now = () => new Date(Date.now() + shift)
  t.teardown(() => void (h.runtime.now = realNow))

  const jsonl: HttpResponse<string> = await h.request('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}`)
  t.equal(jsonl.status, 200)
  t.match(jsonl.headers.get('content-type'), /^application\/x-ndjson/)
  t.equal(jsonl.headers.get('content-length'), null, 'chunked')
  t.match(jsonl.headers.get('content-disposition'), new RegExp(`^attachment; filename="svc-jobs-${h.projectId}-\\d{4}-\\d{2}-\\d{2}\\.jsonl"$`))
  const lines = String(jsonl.body)
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
  t.same(
    lines.map((l) => l.id),
    ids,
    'created_at then id order',
  )
  t.same(Object.keys(lines[0]), [
    'id',
    'created_at',
    'job_type',
    'queue',
    'state',
    'attempt_number',
    'max_attempts',
    'timeout_seconds',
    'run_at',
    'started_at',
    'completed_at',
    'next_retry_at',
    'duration_ms',
    'worker_id',
    'progress',
    'parent_job_id',
    'idempotency_key',
    'tags',
    'error_type',
    'error_message',
    'error_stack_trace',
    'payload',
  ])
  t.equal(lines[2].tags, '{"team":"a,b"}', 'tags as JSON text')
  t.same(lines[3].payload, { i: 3, text: 'comma, "quote"\r\nnewline', n: 1.5 }, 'payload as raw JSON')

  const again = await h.request('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}`)
  t.equal(again.status, 429)
  t.equal(again.body.error.code, 'rate_limit_exceeded')
  t.ok(Number(again.headers.get('retry-after')) >= 1)

  shift = 61_000
  const csv: HttpResponse<string> = await h.request('GET', `/jobsvc/v1/jobs/export?from=${from}&until=${until}&format=csv`)
  t.equal(csv.status, 200)
  t.match(csv.headers.get('content-type'), /^text\/csv/)
  const table = parseCsv(String(csv.body))
  t.equal(
    table[0]!.join(','),
    'Id,CreatedAt,JobType,Queue,State,AttemptNumber,MaxAttempts,StartedAt,CompletedAt,DurationMs,WorkerId,ParentJobId,IdempotencyKey,ErrorType,ErrorMessage,Tags,Payload',
    'the header row names the spec’s columns, in its order',
  )
  t.equal(table.length, 8)
  t.same(
    table.slice(1).map((r) => r[0]),
    lines.map((l) => l.id),
    'the CSV holds exactly the rows of the JSONL export',
  )
  t.same(JSON.parse(table[4]![16]!), lines[3].payload, 'an awkward payload survives RFC 4180 quoting')
  t.equal(table[3]![15], '{"team":"a,b"}')

  const kinds = await eventually(async () => {
    const rows = await h.runtime.sql`SELECT kind FROM activity WHERE kind = 'jobs_exported'`
    return rows.length === 2 ? rows : null
  })
  t.equal(kinds.length, 2, 'jobs_exported activity for each export')

  shift = 200_000
  const cases: Array<[string, string]> = [
    [`until=${until}`, 'invalid_from'],
    [`from=yesterday&until=${until}`, 'invalid_from'],
    [`from=${from}`, 'invalid_until'],
    [`from=${from}&until=nope`, 'invalid_until'],
    [`from=${until}&until=${from}`, 'invalid_range'],
    [`from=${from}&until=${from}`, 'invalid_range'],
    [`from=2026-01-01T00:00:00Z&until=2026-04-02T00:00:00Z`, 'range_too_large'],
    [`from=${from}&until=${until}&format=xml`, 'invalid_format'],
  ]
  for (const [query, code] of cases) {
    const res = await h.request('GET', `/jobsvc/v1/jobs/export?${query}`)
    t.equal(res.status, 400, query)
    t.equal(res.body.error.code, code, query)
  }
})
