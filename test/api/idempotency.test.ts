import t from 'tap'
import { eventsStreamName } from '../../streams/names.ts'
import { startHarness } from '../support/harness.ts'

const job = (n: number) => ({ job_type: 'idem', payload: { n } })

t.test('Idempotency-Key on job creation', async (t) => {
  const h = await startHarness(t, import.meta.filename)

  await t.test('a malformed key is 400 invalid_idempotency_key, before anything runs', async (t) => {
    for (const bad of ['has space', 'x'.repeat(201), 'semi;colon', 'ünï']) {
      const res = await h.request('POST', '/jobsvc/v1/jobs', job(0), { 'idempotency-key': bad })
      t.equal(res.status, 400, bad)
      t.equal(res.body.error.code, 'invalid_idempotency_key')
    }
    const ok = await h.request('POST', '/jobsvc/v1/jobs', job(0), { 'idempotency-key': 'A-z_0'.repeat(40) })
    t.equal(ok.status, 201, '200 characters of the alphabet are fine')
  })

  await t.test('the same key and body replay the original 201 byte for byte', async (t) => {
    const first = await h.request('POST', '/jobsvc/v1/jobs', job(1), { 'idempotency-key': 'create-1' })
    t.equal(first.status, 201)
    t.equal(first.headers.get('idempotent-replay'), null)
    // Same JSON with other spacing and key order is the same request.
    const again = await h.request('POST', '/jobsvc/v1/jobs', '{ "payload": {"n":1},  "job_type": "idem" }', { 'idempotency-key': 'create-1' })
    t.equal(again.status, 201)
    t.equal(again.headers.get('idempotent-replay'), 'true')
    t.same(again.body, first.body)
    t.equal(again.headers.get('location'), first.headers.get('location'))
    t.equal(again.headers.get('x-event-seq'), first.headers.get('x-event-seq'))
  })

  await t.test('the same key with another body is 409 idempotency_key_reuse', async (t) => {
    await h.request('POST', '/jobsvc/v1/jobs', job(2), { 'idempotency-key': 'create-2' })
    const other = await h.request('POST', '/jobsvc/v1/jobs', job(3), { 'idempotency-key': 'create-2' })
    t.equal(other.status, 409)
    t.equal(other.body.error.code, 'idempotency_key_reuse')
    const otherRoute = await h.request('POST', `/jobsvc/v1/jobs/job_01aaaaaaaaaaaaaaaaaaaaaaaa/cancel`, undefined, { 'idempotency-key': 'create-2' })
    t.equal(otherRoute.body.error.code, 'idempotency_key_reuse', 'the key belongs to its first request, route included')
  })

  await t.test('keys are per project', async (t) => {
    const other = await h.newProject()
    const mine = await h.request('POST', '/jobsvc/v1/jobs', job(4), { 'idempotency-key': 'shared' })
    const theirs = await h.request('POST', '/jobsvc/v1/jobs', job(4), { 'idempotency-key': 'shared', authorization: `Bearer ${other.apiKey}` })
    t.equal(theirs.status, 201)
    t.equal(theirs.headers.get('idempotent-replay'), null)
    t.not(theirs.body.id, mine.body.id)
  })

  await t.test('a non-2xx answer is not stored: the repeat runs again', async (t) => {
    const body = { ...job(5), parent_job_id: 'job_01aaaaaaaaaaaaaaaaaaaaaaaa' }
    const first = await h.request('POST', '/jobsvc/v1/jobs', body, { 'idempotency-key': 'fails' })
    t.equal(first.status, 422)
    const again = await h.request('POST', '/jobsvc/v1/jobs', body, { 'idempotency-key': 'fails' })
    t.equal(again.status, 422)
    t.equal(again.headers.get('idempotent-replay'), null)
    t.not(again.body.error.request_id, first.body.error.request_id)
    const fixed = await h.request('POST', '/jobsvc/v1/jobs', job(5), { 'idempotency-key': 'fails' })
    t.equal(fixed.status, 201, 'and a different body may use the freed key')
  })

  await t.test('the deprecated body field follows the same rules and says it is deprecated', async (t) => {
    const body = { ...job(6), idempotency_key: 'body key with spaces: any text up to 200' }
    const first = await h.request('POST', '/jobsvc/v1/jobs', body)
    t.equal(first.status, 201)
    t.match(first.headers.get('deprecation'), /^@\d+$/)
    const again = await h.request('POST', '/jobsvc/v1/jobs', body)
    t.equal(again.status, 201)
    t.equal(again.headers.get('idempotent-replay'), 'true')
    t.same(again.body, first.body)
    const changed = await h.request('POST', '/jobsvc/v1/jobs', { ...body, payload: { n: 7 } })
    t.equal(changed.body.error.code, 'idempotency_key_reuse')
  })

  await t.test('100 concurrent identical requests: one job, one event', async (t) => {
    const answers = await Promise.all(
      Array.from({ length: 100 }, () =>
        h.request('POST', '/jobsvc/v1/jobs', { job_type: 'storm', payload: { x: 1 } }, { 'idempotency-key': 'storm' }),
      ),
    )
    t.same([...new Set(answers.map((a) => a.status))], [201], 'every one answered 201')
    const ids = new Set(answers.map((a) => a.body.id))
    t.equal(ids.size, 1, 'all name the same job')
    t.equal(answers.filter((a) => a.headers.get('idempotent-replay') === 'true').length, 99, '99 are replays')
    const [jobId] = [...ids]
    const info = await h.runtime.nats.jsm.streams.info(eventsStreamName(h.config.namespace), {
      subjects_filter: `${h.config.namespace}.evt.${h.projectId}.job.${jobId}`,
    })
    t.same(info.state.subjects, { [`${h.config.namespace}.evt.${h.projectId}.job.${jobId}`]: 1 }, 'one message on the job subject')
  })

  await t.test('cancel with a key replays its answer and appends once', async (t) => {
    const created = await h.request('POST', '/jobsvc/v1/jobs', { ...job(8), run_at: new Date(Date.now() + 3_600_000).toISOString() })
    const path = `/jobsvc/v1/jobs/${created.body.id}/cancel`
    const first = await h.request('POST', path, undefined, { 'idempotency-key': 'cancel-1' })
    t.equal(first.status, 200)
    const again = await h.request('POST', path, undefined, { 'idempotency-key': 'cancel-1' })
    t.equal(again.status, 200, 'not 409 invalid_state: the original answer')
    t.equal(again.headers.get('idempotent-replay'), 'true')
    t.same(again.body, first.body)
    const history = await h.request('GET', `/jobsvc/v1/jobs/${created.body.id}/history`)
    t.equal(history.body.data.filter((e: { type: string }) => e.type === 'job_cancelled').length, 1)
  })

  await t.test('reads ignore the header', async (t) => {
    const res = await h.request('GET', '/jobsvc/v1/jobs', undefined, { 'idempotency-key': 'not a key!' })
    t.equal(res.status, 200)
  })
})
