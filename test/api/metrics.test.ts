import t from 'tap'
import fc from 'fast-check'
import { histogramPercentile, histogramValue } from '../../domain/job-metrics.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'

/** Nearest-rank percentile of plain numbers: the direct computation the rollups must agree with. */
function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.max(1, Math.ceil(p * sorted.length)) - 1]!
}

t.test('metrics routes agree with direct counts over the jobs', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
  // Durations are the service clock's: moving it between claim and ack gives each attempt a
  // known length, from milliseconds to minutes.
  let offset = 0
  const realNow = h.runtime.now
  h.runtime.now = () => new Date(Date.now() + offset)
  t.teardown(() => void (h.runtime.now = realNow))
  const t0 = Date.now()

  const create = async (body: Record<string, unknown>) => {
    const res = await h.request('POST', '/jobsvc/v1/jobs', { payload: {}, ...body })
    t.equal(res.status, 201)
    return res.body.id as string
  }
  const claim = async (queue: string, jobType: string) => {
    const res = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_m', queues: [queue], job_types: [jobType], wait_seconds: 5 })
    t.equal(res.body.jobs?.length, 1, `claimed a ${jobType}`)
    return res.body.jobs[0].id as string
  }
  const finish = async (jobId: string, durationMs: number, status: 'succeeded' | 'failed') => {
    offset += durationMs
    const res = await h.request('POST', '/jobsvc/v1/workers/ack', {
      job_id: jobId,
      worker_id: 'wrk_m',
      status,
      ...(status === 'failed' ? { error: { type: 'Boom', message: 'no' } } : {}),
    })
    t.equal(res.status, 200)
  }

  for (let i = 0; i < 20; i++) await create({ job_type: 'email', queue: 'alpha' })
  const later = await create({ job_type: 'email', queue: 'alpha', run_at: new Date(t0 + 86_400_000).toISOString() })
  for (let i = 0; i < 10; i++) await create({ job_type: 'resize', queue: 'beta', max_attempts: 3 })
  for (let i = 0; i < 3; i++) await create({ job_type: 'report', queue: 'beta', max_attempts: 1 })

  const emailDurations = [3, 8, 20, 45, 90, 150, 400, 700, 1_500, 2_500, 6_000, 30_000]
  for (const d of emailDurations) await finish(await claim('alpha', 'email'), d, 'succeeded')
  for (let i = 0; i < 4; i++) await finish(await claim('beta', 'resize'), 250, 'failed')
  for (let i = 0; i < 3; i++) await finish(await claim('beta', 'resize'), 600, 'succeeded')
  const dead: string[] = []
  for (let i = 0; i < 3; i++) {
    const id = await claim('beta', 'report')
    await finish(id, 1_000, 'failed')
    dead.push(id)
  }
  t.equal((await h.request('POST', `/jobsvc/v1/jobs/${dead[0]}/retry`)).status, 200)
  const pendingAlpha = (
    await h.runtime.sql<{ id: string }[]>`SELECT id FROM jobs WHERE queue = 'alpha' AND state = 'pending' ORDER BY id LIMIT 2`
  ).map((r) => r.id)
  for (const id of [...pendingAlpha, later]) t.equal((await h.request('POST', `/jobsvc/v1/jobs/${id}/cancel`)).status, 200)

  const byKey = (rows: Array<{ queue: string; state: string; n: number }>) => rows.map((r) => `${r.queue}/${r.state}=${r.n}`).sort()
  const direct = async () =>
    h.runtime.sql<{ queue: string; state: string; n: number }[]>`
      SELECT queue, state, count(*)::int AS n FROM jobs WHERE project_id = ${h.projectId} GROUP BY queue, state ORDER BY queue, state`

  t.test('summary: counts by state, overall and by queue', async (t) => {
    // Both sides are read models of the projector: compare once both have caught up.
    const summary = await eventually(
      async () => {
        const expected = await direct()
        const res = await h.request('GET', '/jobsvc/v1/metrics/summary?group_by=queue')
        const got = res.body.queues.flatMap((q: { queue: string; counts: Record<string, number> }) =>
          Object.entries(q.counts)
            .filter(([, n]) => n > 0)
            .map(([state, n]) => ({ queue: q.queue, state, n })),
        )
        return JSON.stringify(byKey(got)) === JSON.stringify(byKey(expected)) ? res.body : null
      },
      15_000,
      'the rollups to match the jobs table',
    )
    t.equal(summary.total, 34)
    // alpha: 12 succeeded, 3 cancelled (one of them scheduled), 6 pending; beta: resize 3
    // succeeded and 7 pending (4 of them waiting out a backoff), report 2 dead and 1 retried.
    t.same(summary.counts, { pending: 6 + 8, scheduled: 0, processing: 0, succeeded: 15, failed: 0, cancelled: 3, dead_letter: 2 })
    t.same(
      (await h.request('GET', '/jobsvc/v1/metrics/summary?queue=beta')).body,
      { queue: 'beta', counts: { pending: 8, scheduled: 0, processing: 0, succeeded: 3, failed: 0, cancelled: 0, dead_letter: 2 }, total: 10 + 3 },
      'one queue',
    )
    t.same((await h.request('GET', '/jobsvc/v1/metrics/summary?queue=nowhere')).body.total, 0)
  })

  t.test('queues: depth and the oldest due job, as the jobs table has them', async (t) => {
    const res = await h.request('GET', '/jobsvc/v1/metrics/queues')
    t.equal(res.status, 200)
    const [oldest] = await h.runtime.sql<{ at: Date }[]>`
      SELECT min(available_at) AS at FROM jobs WHERE queue = 'alpha' AND state = 'pending' AND available_at <= ${h.runtime.now()}`
    const alpha = res.body.data.find((q: { queue: string }) => q.queue === 'alpha')
    t.match(alpha, { queue: 'alpha', pending: 6, scheduled: 0, processing: 0, oldest_pending_at: oldest!.at.toISOString() })
    t.ok(alpha.oldest_pending_age_ms >= 0)
    const beta = res.body.data.find((q: { queue: string }) => q.queue === 'beta')
    t.match(beta, { pending: 8 })
    t.same(
      res.body.data.map((q: { queue: string }) => q.queue),
      ['beta', 'alpha'],
      'deepest first',
    )
    const one = await h.request('GET', '/jobsvc/v1/metrics/queues?limit=1')
    t.equal(one.body.data.length, 1)
    t.equal(one.body.has_more, true)
  })

  t.test('throughput: counts per bucket and duration percentiles', async (t) => {
    const from = new Date(t0 - 3_600_000).toISOString()
    const until = new Date(Date.now() + offset + 60_000).toISOString()
    const hourly = await h.request('GET', `/jobsvc/v1/metrics/throughput?from=${from}&until=${until}&interval=hour`)
    t.equal(hourly.status, 200)
    t.equal(hourly.body.interval, 'hour')
    const sum = (buckets: Array<Record<string, number>>, field: string) => buckets.reduce((n, b) => n + b[field]!, 0)
    t.equal(sum(hourly.body.buckets, 'created'), 34, 'created: every job')
    t.equal(sum(hourly.body.buckets, 'succeeded'), 15)
    t.equal(sum(hourly.body.buckets, 'failed'), 4 + 3, 'failed attempts, retried or not')
    t.equal(sum(hourly.body.buckets, 'dead_lettered'), 3)
    t.equal(sum(hourly.body.buckets, 'cancelled'), 3)
    t.equal(sum(hourly.body.buckets, 'retried'), 1)
    const starts = hourly.body.buckets.map((b: { start: string }) => Date.parse(b.start))
    t.ok(
      starts.every((s: number, i: number) => i === 0 || s - starts[i - 1] === 3_600_000),
      'contiguous buckets, empty ones included',
    )

    const minutely = await h.request('GET', `/jobsvc/v1/metrics/throughput?from=${from}&until=${until}&interval=minute`)
    t.equal(sum(minutely.body.buckets, 'created'), 34, 'minute buckets add up to the same')
    t.equal(sum(minutely.body.buckets, 'succeeded'), 15)

    // Queue alpha only ever succeeded, so its histogram holds exactly the jobs' durations.
    const alpha = await h.request('GET', `/jobsvc/v1/metrics/throughput?from=${from}&until=${until}&interval=day&queue=alpha`)
    const rows = await h.runtime.sql<{ d: number }[]>`SELECT duration_ms AS d FROM jobs WHERE queue = 'alpha' AND state = 'succeeded'`
    const durations = rows.map((r) => r.d)
    t.equal(durations.length, emailDurations.length)
    const withData = alpha.body.buckets.filter((b: { succeeded: number }) => b.succeeded > 0)
    t.equal(withData.length, 1, 'one day bucket')
    /** Each of `answer`'s p50, p95 and p99 is within 5% of the exact percentile of `durations`. */
    const closeToExact = (answer: Record<string, number>, what: string) => {
      for (const [field, p] of [
        ['p50_ms', 0.5],
        ['p95_ms', 0.95],
        ['p99_ms', 0.99],
      ] as const) {
        const exact = percentile(durations, p)
        t.ok(Math.abs(answer[field]! - exact) <= exact * 0.05 + 1, `${what} ${field} ${answer[field]} within 5% of ${exact}`)
      }
    }
    closeToExact(withData[0], 'the day bucket')
    const empty = alpha.body.buckets.find((b: { succeeded: number; failed: number }) => b.succeeded === 0 && b.failed === 0)
    if (empty) t.equal(empty.p50_ms, null, 'no durations, no percentile')

    // Extension: the window's own percentiles, from the minute buckets' histograms merged.
    const merged = await h.request('GET', `/jobsvc/v1/metrics/throughput?from=${from}&until=${until}&interval=minute&queue=alpha&percentiles=window`)
    t.equal(merged.status, 200)
    closeToExact(merged.body.window_percentiles, 'the window, whichever minutes they fell in:')
    t.notOk('window_percentiles' in minutely.body, 'only when asked for')
  })

  t.test('job types: volume, success rate and average duration', async (t) => {
    const res = await h.request(
      'GET',
      `/jobsvc/v1/metrics/job-types?from=${new Date(t0 - 3_600_000).toISOString()}&until=${new Date(Date.now() + offset + 60_000).toISOString()}`,
    )
    t.equal(res.status, 200)
    const counts = await h.runtime.sql<{ job_type: string; n: number; ok: number; avg: number | null }[]>`
      SELECT job_type, count(*)::int AS n, count(*) FILTER (WHERE state = 'succeeded')::int AS ok,
        avg(duration_ms) FILTER (WHERE state = 'succeeded')::float8 AS avg
      FROM jobs GROUP BY job_type ORDER BY count(*) DESC, job_type`
    t.same(
      res.body.data.map((r: { job_type: string; created: number }) => [r.job_type, r.created]),
      counts.map((c) => [c.job_type, c.n]),
      'by volume, as counted directly',
    )
    const email = res.body.data.find((r: { job_type: string }) => r.job_type === 'email')
    t.equal(email.succeeded, counts.find((c) => c.job_type === 'email')!.ok)
    t.equal(email.success_rate, 1)
    t.ok(Math.abs(email.avg_duration_ms - counts.find((c) => c.job_type === 'email')!.avg!) < 0.1, 'average duration of its attempts')
    t.match(
      res.body.data.find((r: { job_type: string }) => r.job_type === 'resize'),
      { succeeded: 3, failed: 4, success_rate: 0.4286 },
    )
    t.match(
      res.body.data.find((r: { job_type: string }) => r.job_type === 'report'),
      { succeeded: 0, failed: 3, dead_lettered: 3, success_rate: 0 },
    )
    t.equal((await h.request('GET', '/jobsvc/v1/metrics/job-types?limit=1')).body.data.length, 1)
  })

  t.test("the database's percentile rule (kept in generated columns) is the domain's", async (t) => {
    const samples = fc.sample(fc.array(fc.integer({ min: 0, max: 5 }), { maxLength: 120 }), 200)
    samples.push([], [0, 0, 0], [1], [0, 0, 7])
    const rows = await h.runtime.sql<{ i: number; p50: number | null; p95: number | null; p99: number | null }[]>`
      SELECT i, histogram_rank_index(h, 0.5) AS p50, histogram_rank_index(h, 0.95) AS p95, histogram_rank_index(h, 0.99) AS p99
      FROM json_array_elements(${JSON.stringify(samples)}::text::json) WITH ORDINALITY AS s(j, i),
        LATERAL (SELECT coalesce(array_agg(x::int), '{}') AS h FROM json_array_elements_text(s.j) AS x) a`
    t.equal(rows.length, samples.length)
    for (const r of rows) {
      const sample = samples[r.i - 1]!
      const ms = (index: number | null) => (index === null ? null : histogramValue(index))
      t.same(
        [ms(r.p50), ms(r.p95), ms(r.p99)],
        [0.5, 0.95, 0.99].map((p) => histogramPercentile(sample, p)),
        JSON.stringify(sample),
      )
    }
  })

  t.test('bad windows and parameters get the envelope', async (t) => {
    const cases: Array<[string, number, string]> = [
      ['/jobsvc/v1/metrics/throughput?from=yesterday', 400, 'invalid_from'],
      ['/jobsvc/v1/metrics/throughput?until=2026-13-45T00:00:00Z', 400, 'invalid_until'],
      ['/jobsvc/v1/metrics/throughput?from=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z', 400, 'invalid_range'],
      ['/jobsvc/v1/metrics/throughput?from=2026-01-01T00:00:00Z&until=2026-01-03T00:00:00Z&interval=minute', 400, 'range_too_large'],
      ['/jobsvc/v1/metrics/throughput?interval=week', 400, 'invalid_request'],
      ['/jobsvc/v1/metrics/job-types?from=2026-01-01T00:00:00Z&until=2026-06-01T00:00:00Z', 400, 'range_too_large'],
      ['/jobsvc/v1/metrics/job-types?from=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z', 400, 'invalid_range'],
      ['/jobsvc/v1/metrics/summary?group_by=state', 400, 'invalid_request'],
    ]
    for (const [path, status, code] of cases) {
      const res = await h.request('GET', path)
      t.equal(res.status, status, path)
      t.equal(res.body.error?.code, code, path)
    }
    for (const route of ['summary', 'throughput', 'queues', 'job-types']) {
      const res = await httpRequest(h.url, null, 'GET', `/jobsvc/v1/metrics/${route}`)
      t.equal(res.status, 401, `${route} needs the API key`)
      t.equal(res.body.error.code, 'unauthorized')
    }
  })
})
