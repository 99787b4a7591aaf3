import { JobsvcClient, JobsvcError, type Operation } from '@jobsvc/sdk'
import t from 'tap'
import { eventually, startHarness } from '../support/harness.ts'

// Issue 28, item 6 through the TypeScript SDK: `jobs.bulk` counts (dry run) and starts a bulk
// cancel, `operations.wait` follows it to its end; refusals are JobsvcErrors with the envelope's code.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector', 'scheduler', 'dispatcher'] })
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })

t.test('jobs.bulk: a dry run, then an operation followed by operations.wait', async (t) => {
  const { results } = await client.jobs.createBatch(
    Array.from({ length: 4 }, (_, i) => ({ job_type: 'sdk-bulk', queue: 'sdk-bulk', payload: { i } })),
  )
  const ids = results.map((r) => ('body' in r && r.status === 201 ? r.body.id : ''))
  const dry = await eventually(async () => {
    const count = await client.jobs.bulk({ action: 'cancel', filter: { queues: ['sdk-bulk'] }, dry_run: true })
    return count.matched === 4 ? count : null
  })
  t.strictSame([...dry.sample_ids].sort(), [...ids].sort())
  const started = await client.jobs.bulk({ action: 'cancel', filter: { queues: ['sdk-bulk'], job_types: ['sdk-bulk'] } })
  t.match(started, { operation_id: /^op_/, matched: 4 })
  const seen: Operation[] = []
  const op = await client.operations.wait(started.operation_id, { intervalMs: 50, onProgress: (o) => seen.push(o) })
  t.match(op, { kind: 'job_bulk', status: 'succeeded', processed: 4, succeeded: 4, failed: 0 })
  t.equal(seen.at(-1)?.status, 'succeeded')
  for (const id of ids) t.equal((await client.jobs.get(id)).state, 'cancelled')
})

t.test('refusals are JobsvcErrors; a wait stops at its signal', async (t) => {
  const refused = await client.jobs.bulk({ action: 'retry', filter: {} }).catch((err: unknown) => err)
  t.ok(refused instanceof JobsvcError)
  t.match(refused, { status: 400, code: 'invalid_request' })
  const controller = new AbortController()
  controller.abort(new Error('stop waiting'))
  await t.rejects(client.operations.wait(`op_${'0'.repeat(26)}`, { signal: controller.signal }), 'an aborted wait rejects')
})
