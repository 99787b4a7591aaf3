import t from 'tap'
import { eventually, httpRequest, type HttpResponse, type SpawnedService } from '../support/harness.ts'
import { createProjectWithCli, spawnedInstall } from '../support/spawned-install.ts'

const requestsPerHour = 30
const monthlyJobs = 10

t.test('request counts, the allowance and idempotency keys survive a restart of every process', async (t) => {
  const install = await spawnedInstall(t, import.meta.filename, {
    config: { plans: { business: { requests_per_hour: requestsPerHour, monthly_jobs: monthlyJobs } } },
  })
  const start = install.start
  const stop = async (tt: Pick<typeof t, 'equal'>, svc: SpawnedService) => tt.equal(await install.stop(svc), 0, 'the process shut down cleanly')
  const sql = install.openSql()

  const first = await start()
  const { projectId, apiKey } = await createProjectWithCli(install.env, 'restart')

  // Every /jobsvc/v1 request counts towards the hourly limit; `sent` is what the project has used.
  let sent = 0
  const call = async (svc: SpawnedService, method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<HttpResponse> => {
    sent++
    return httpRequest(svc.url, apiKey, method, path, body, headers)
  }
  const remainingOf = (res: HttpResponse) => Number(res.headers.get('x-ratelimit-remaining'))
  const keyed = { job_type: 'restart', payload: { keyed: true } }
  const K = { 'idempotency-key': 'restart-key-1' }

  const original = await call(first, 'POST', '/jobsvc/v1/jobs', keyed, K)
  t.equal(original.status, 201)
  const used: string[] = [original.headers.get('x-quota-used')!]
  const remaining: number[] = [remainingOf(original)]
  for (let i = 0; i < 3; i++) {
    const res = await call(first, 'POST', '/jobsvc/v1/jobs', { job_type: 'restart', payload: { i } })
    t.equal(res.status, 201)
    used.push(res.headers.get('x-quota-used')!)
    remaining.push(remainingOf(res))
  }
  t.strictSame(used, ['0', '1', '2', '3'])
  t.strictSame(remaining, [29, 28, 27, 26])
  const reset = original.headers.get('x-ratelimit-reset')
  t.equal(original.headers.get('x-ratelimit-limit'), String(requestsPerHour), 'the JOBSVC_CONFIG limit applies')

  await t.test('after a restart of the only process', async (t) => {
    await stop(t, first)
    const second = await start()

    const list = await call(second, 'GET', '/jobsvc/v1/jobs')
    t.equal(list.status, 200)
    t.equal(remainingOf(list), 25, 'the hourly count continues: one less than before the restart, not back at the limit')
    t.equal(list.headers.get('x-ratelimit-reset'), reset, 'the window still starts at the first request')

    const replay = await call(second, 'POST', '/jobsvc/v1/jobs', keyed, K)
    t.equal(replay.status, 201)
    t.equal(replay.headers.get('idempotent-replay'), 'true')
    t.strictSame(replay.body, original.body, 'the original answer')
    t.equal(replay.headers.get('location'), original.headers.get('location'))
    t.equal(replay.headers.get('x-event-seq'), original.headers.get('x-event-seq'))
    t.equal(replay.headers.get('x-quota-used'), '4', 'the allowance count continues')
    t.equal(remainingOf(replay), 24)

    const fresh = await call(second, 'POST', '/jobsvc/v1/jobs', { job_type: 'restart', payload: { after: 'restart' } })
    t.equal(fresh.status, 201)
    t.equal(fresh.headers.get('x-quota-used'), '4', 'the replay took no unit')
    t.equal(remainingOf(fresh), 23)

    // The projection is written in log order, so once the newest job is a row, any job the
    // replay might have made would be one too.
    await eventually(async () => (await sql`SELECT 1 FROM jobs WHERE id = ${fresh.body.id}`).length === 1, 15_000, 'the newest job row')
    const rows = await sql<{ id: string }[]>`SELECT id FROM jobs WHERE project_id = ${projectId}`
    t.equal(rows.length, 5, 'four jobs before the restart and one after: the replay made none')
    t.ok(
      rows.some((r) => r.id === original.body.id),
      'the keyed job is the original one',
    )

    await t.test('with a second process running only the api role', async (t) => {
      const apiOnly = await start(['--role', 'api'])
      // The other process writes its counts every 250 ms; wait for them so the expectation is exact.
      await eventually(
        async () => {
          const [row] = await sql<{ n: number }[]>`SELECT coalesce(sum(n), 0)::int AS n FROM request_counts WHERE project_id = ${projectId}`
          return row?.n === sent
        },
        15_000,
        'every request so far to be counted in Postgres',
      )
      const seen = await call(apiOnly, 'GET', `/jobsvc/v1/jobs/${original.body.id}`)
      t.equal(seen.status, 200)
      t.equal(remainingOf(seen), requestsPerHour - sent, 'the new process starts from the shared count')
      t.equal(seen.headers.get('x-ratelimit-reset'), reset)

      const again = await call(apiOnly, 'POST', '/jobsvc/v1/jobs', keyed, K)
      t.equal(again.status, 201)
      t.equal(again.headers.get('idempotent-replay'), 'true', 'the key is known to the new process')
      t.strictSame(again.body, original.body)
      t.equal(again.headers.get('x-quota-used'), '5')

      const quota: string[] = []
      let refused: HttpResponse | null = null
      for (let i = 0; refused === null && i < monthlyJobs; i++) {
        const res = await call(i % 2 === 0 ? apiOnly : second, 'POST', '/jobsvc/v1/jobs', { job_type: 'restart', payload: { fill: i } })
        if (res.status === 201) quota.push(res.headers.get('x-quota-used')!)
        else refused = res
      }
      t.strictSame(quota, ['5', '6', '7', '8', '9'], 'both processes count on from the same total')
      t.equal(refused?.status, 429)
      t.equal(refused?.body.error.code, 'monthly_allowance_exceeded')
      t.equal(refused?.headers.get('x-quota-used'), String(monthlyJobs))

      await Promise.all([stop(t, apiOnly), stop(t, second)])
    })
  })

  await t.test('after a restart of both processes: the allowance is still used up, the hour still counts', async (t) => {
    const third = await start()
    const refused = await call(third, 'POST', '/jobsvc/v1/jobs', { job_type: 'restart', payload: { after: 'second restart' } })
    t.equal(refused.status, 429)
    t.equal(refused.body.error.code, 'monthly_allowance_exceeded')
    t.equal(refused.headers.get('x-quota-used'), String(monthlyJobs))
    t.equal(remainingOf(refused), requestsPerHour - sent, 'the hourly count includes every earlier process')
    const left = remainingOf(refused)
    t.ok(left > 0 && left < requestsPerHour, `some requests are left this hour (${left})`)
    for (let i = 0; i < left; i++) {
      const res = await call(third, 'GET', '/jobsvc/v1/jobs?limit=1')
      t.equal(res.status, 200, `request ${i + 1} of the ${left} left`)
    }
    const limited = await call(third, 'GET', '/jobsvc/v1/jobs?limit=1')
    t.equal(limited.status, 429)
    t.equal(limited.body.error.code, 'rate_limit_exceeded')
    t.equal(limited.headers.get('x-ratelimit-remaining'), '0')
    t.ok(Number(limited.headers.get('retry-after')) >= 1, 'Retry-After is given')
    t.equal(sent - 1, requestsPerHour, 'the limit was reached after exactly the hourly number of requests across four processes')
    const limitedCreate = await call(third, 'POST', '/jobsvc/v1/jobs', { job_type: 'restart', payload: {} })
    t.equal(limitedCreate.status, 429)
    t.equal(limitedCreate.body.error.code, 'rate_limit_exceeded', 'the request limit is checked before the allowance')
    t.equal(limitedCreate.headers.get('x-quota-used'), String(monthlyJobs), 'a job-creation answer, so the quota headers are there too')
  })
})
