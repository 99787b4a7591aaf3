import t from 'tap'
import { eventually, startHarness, type HttpResponse } from '../support/harness.ts'

t.test('the activity feed', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
  const created: string[] = []
  for (let i = 0; i < 25; i++) created.push((await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'feed', queue: 'f', payload: { i } })).body.id)

  await t.test('newest first, with the spec fields; limit clamps', async (t) => {
    const res = await h.request('GET', '/jobsvc/v1/activity')
    t.equal(res.status, 200)
    t.equal(res.body.data.length, 20, 'default 20')
    t.equal(res.body.has_more, true)
    t.type(res.body.next_cursor, 'string')
    const first = res.body.data[0]
    t.match(first, { id: /^[0-9A-Z]{26}$/, kind: 'job_created', target_type: 'job', target_id: created.at(-1), summary: /feed/, created_at: /Z$/ })
    t.same(JSON.parse(first.metadata), { job_type: 'feed', queue: 'f' }, 'metadata is JSON text')
    for (const [limit, expected] of [
      ['0', 1],
      ['-5', 1],
      ['500', 26],
      ['abc', 20],
      ['3.7', 3],
    ] as const) {
      const page = await h.request('GET', `/jobsvc/v1/activity?limit=${limit}`)
      t.equal(page.status, 200)
      t.equal(page.body.data.length, Math.min(expected, 25), `limit=${limit}`)
    }
    const bad = await h.request('GET', '/jobsvc/v1/activity?cursor=nonsense')
    t.equal(bad.status, 400)
    t.equal(bad.body.error.code, 'invalid_cursor')
  })

  await t.test('paging while rows are written: no skips, no repeats', async (t) => {
    const seen: string[] = []
    let cursor: string | null = null
    let page = 0
    do {
      const res: HttpResponse = await h.request('GET', `/jobsvc/v1/activity?limit=4${cursor ? `&cursor=${cursor}` : ''}`)
      seen.push(...res.body.data.map((a: { target_id: string }) => a.target_id))
      cursor = res.body.next_cursor
      // New rows land between pages.
      await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'between', queue: 'f', payload: { page: page++ } })
    } while (cursor !== null)
    t.equal(new Set(seen).size, seen.length, 'no repeats')
    t.same(seen.filter((id) => created.includes(id)).sort(), [...created].sort(), 'every row that existed is served')
  })

  await t.test('cancel and retry write their kinds', async (t) => {
    const later = new Date(Date.now() + 3_600_000).toISOString()
    const job = (await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'c', payload: {}, run_at: later })).body.id
    await h.request('POST', `/jobsvc/v1/jobs/${job}/cancel`)
    const kinds = await eventually(async () => {
      const res = await h.request('GET', '/jobsvc/v1/activity?limit=5')
      const mine = res.body.data.filter((a: { target_id: string }) => a.target_id === job).map((a: { kind: string }) => a.kind)
      return mine.length === 2 ? mine : null
    })
    t.same(kinds, ['job_cancelled', 'job_created'])
    const other = await h.newProject()
    const theirs = await h.request('GET', '/jobsvc/v1/activity', undefined, { authorization: `Bearer ${other.apiKey}` })
    t.same(theirs.body.data, [], "another project's feed is its own")
  })

  await t.test('extension: kinds and exclude_kinds filter the feed; a bad list is 400', async (t) => {
    const cancelled = await h.request('POST', `/jobsvc/v1/jobs/${created[0]}/cancel`)
    t.equal(cancelled.status, 200)
    const only = await eventually(async () => {
      const res = await h.request('GET', '/jobsvc/v1/activity?kinds=job_cancelled')
      return res.body.data.some((r: { target_id: string }) => r.target_id === created[0]) ? res : null
    })
    t.ok(
      only.body.data.every((r: { kind: string }) => r.kind === 'job_cancelled'),
      'only cancellations',
    )
    const without = await h.request('GET', '/jobsvc/v1/activity?exclude_kinds=job_created&limit=100')
    t.ok(without.body.data.length >= 1 && without.body.data.every((r: { kind: string }) => r.kind !== 'job_created'), 'no job creation')
    const bad = await h.request('GET', '/jobsvc/v1/activity?kinds=Job-Created')
    t.equal(bad.status, 400)
    t.equal(bad.body.error.code, 'invalid_request')
  })
})
