import t from 'tap'
import type { JobCommand } from '../../domain/job.ts'
import { jobHandler } from '../../streams/aggregates.ts'
import { JobService } from '../../services/use-cases/jobs/job-service.ts'
import { healInterruptedCascades } from '../../services/roles/scheduler/index.ts'
import { eventually, startHarness, type Harness } from '../support/harness.ts'

/**
 * A crash between a parent's append and its children's leaves the children waiting on a parent
 * that has ended. The parent's move is appended here straight through its handler, without the
 * API's cascade, which is exactly what such a crash leaves behind; the scheduler's sweep must
 * finish the cascade.
 */
async function appendWithoutCascade(h: Harness, jobId: string, command: JobCommand): Promise<void> {
  await jobHandler.decide(h.runtime, jobHandler.ref(h.projectId, jobId), command)
}

const now = () => ({ now: new Date().toISOString() })

t.test('a crash between a parent and its children heals itself', async (t) => {
  const h = await startHarness(t, import.meta.filename, { tunables: { cascade_sweep_interval_ms: 100 } })
  const create = async (body: Record<string, unknown>) => (await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'x', payload: {}, ...body })).body
  const state = async (id: string) => (await h.request('GET', `/jobsvc/v1/jobs/${id}`)).body.state as string

  t.test('a parent that succeeded activates its waiting children', async (t) => {
    const parent = await create({ queue: 'heal-a' })
    const child = await create({ queue: 'heal-a-children', parent_job_id: parent.id })
    t.equal(child.state, 'scheduled')
    const polled = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: ['heal-a'], wait_seconds: 5 })
    t.equal(polled.body.jobs[0]?.id, parent.id)
    await appendWithoutCascade(h, parent.id, {
      type: 'ack_job',
      data: { worker_id: 'w', status: 'succeeded', duration_ms: 1, error: null },
      meta: now(),
    })
    t.equal(await state(parent.id), 'succeeded')
    await eventually(async () => (await state(child.id)) === 'pending', 15_000, 'the child to be activated')
    t.pass('the child was activated by the sweep')
  })

  t.test('a parent that was cancelled cancels its waiting children', async (t) => {
    const parent = await create({ queue: 'heal-b', run_at: new Date(Date.now() + 3_600_000).toISOString() })
    const child = await create({ queue: 'heal-b', parent_job_id: parent.id })
    await appendWithoutCascade(h, parent.id, { type: 'cancel_job', data: {}, meta: now() })
    await eventually(async () => (await state(child.id)) === 'cancelled', 15_000, 'the child to be cancelled')
    const history = await h.request('GET', `/jobsvc/v1/jobs/${child.id}/history`)
    t.equal(history.body.data.at(-1).data.reason, 'parent_cancelled')
  })

  t.test('children of a parent still running keep waiting', async (t) => {
    const parent = await create({ queue: 'heal-c' })
    const child = await create({ queue: 'heal-c', parent_job_id: parent.id })
    await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: ['heal-c'], wait_seconds: 5 })
    await h.request('GET', '/jobsvc/v1/jobs')
    await healInterruptedCascades(h.runtime, new JobService(h.runtime))
    t.equal(await state(child.id), 'scheduled', 'a sweep over a processing parent moves nothing')
  })
})
