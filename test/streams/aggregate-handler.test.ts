import t from 'tap'
import { ulid } from 'ulid'
import type { Job } from '../../domain/job.ts'
import type { Project } from '../../domain/project/index.ts'
import type { Loaded } from '../../streams/event-store.ts'
import {
  alertHandler,
  deliveryHandler,
  emailClaimHandler,
  jobHandler,
  progressHandler,
  projectHandler,
  promoCodeHandler,
  recurringHandler,
  userHandler,
  webhookHandler,
} from '../../streams/aggregates.ts'
import { platformScope } from '../../streams/names.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'
import { createJobData } from '../support/job-commands.ts'

const { store } = await openIsolatedStore(t, import.meta.filename, { database: false })
const projectId = 'prj_aggregatehandler'

t.test("each handler addresses its aggregates as the log's subjects have always named them", async (t) => {
  t.strictSame(jobHandler.ref(projectId, 'job_1'), { aggregate: 'job', projectId, id: 'job_1' })
  t.strictSame(progressHandler.ref(projectId, 'job_1'), { aggregate: 'progress', projectId, id: 'job_1' }, "a job's reports are keyed by its id")
  t.strictSame(projectHandler.ref('prj_1'), { aggregate: 'project', projectId: 'prj_1', id: 'prj_1' }, 'a project is its own scope')
  t.strictSame(recurringHandler.ref(projectId, 'rjob_x'), { aggregate: 'recurring', projectId, id: 'rjob_x' })
  t.strictSame(alertHandler.ref(projectId, 'alr_1'), { aggregate: 'alert', projectId, id: 'alr_1' })
  t.strictSame(webhookHandler.ref(projectId, 'whk_1'), { aggregate: 'webhook', projectId, id: 'whk_1' })
  t.strictSame(deliveryHandler.ref(projectId, 'dlv_1'), { aggregate: 'delivery', projectId, id: 'dlv_1' })
  t.strictSame(userHandler.ref('usr_1'), { aggregate: 'user', projectId: platformScope, id: 'usr_1' }, 'users belong to no project')
  t.strictSame(emailClaimHandler.ref('ab12'), { aggregate: 'email', projectId: platformScope, id: 'ab12' })
  t.strictSame(promoCodeHandler.ref('SPRING'), { aggregate: 'promo', projectId: platformScope, id: 'SPRING' })
})

t.test('a decision stores events with ids made in one place, and a load reads back the state it decided', async (t) => {
  const ref = jobHandler.ref(projectId, `job_${ulid()}`)
  const ids = ['01HZZZZZZZZZZZZZZZZZZZZZZ1']
  const created = await jobHandler.decide({ store, newUlid: () => ids.shift()! }, ref, {
    type: 'create_job',
    data: createJobData({ job_id: ref.id, project_id: projectId }),
    meta: { now: new Date().toISOString() },
  })
  t.same(
    created.events.map((e) => e.id),
    ['evt_01HZZZZZZZZZZZZZZZZZZZZZZ1'],
    'evt_ and the runtime ULID',
  )
  const loaded: Loaded<Job> = await jobHandler.load(store, ref)
  t.equal(loaded.seq, created.seq)
  t.equal(loaded.state?.id, ref.id)
  t.equal((await jobHandler.history(store, ref)).length, 1)
  t.equal((await jobHandler.last(store, ref))?.seq, created.seq)
})

/**
 * Never called: what tsc (`npm run typecheck`) must refuse. Each `@ts-expect-error` fails the
 * type check if the line below it ever compiles, so a wrong pairing of handler and ref, or a ref
 * built by hand, stays a compile error.
 */
export function wrongPairingsDoNotCompile(): void {
  // @ts-expect-error a project's ref is not a job's
  void jobHandler.load(store, projectHandler.ref('prj_1'))
  // @ts-expect-error a job's progress reports are another aggregate than the job
  void jobHandler.decide({ store, newUlid: ulid }, progressHandler.ref(projectId, 'job_1'), { type: 'cancel_job', data: {}, meta: { now: '' } })
  // @ts-expect-error refs come from their handler, not from an object literal
  void projectHandler.load(store, { aggregate: 'project', projectId: 'prj_1', id: 'prj_1' })
  // @ts-expect-error a job's handler takes job commands only
  void jobHandler.decide({ store, newUlid: ulid }, jobHandler.ref(projectId, 'job_1'), { type: 'create_project', data: {}, meta: { now: '' } })
  // @ts-expect-error a job's load answers a job, not a project
  const _project: Promise<Loaded<Project>> = jobHandler.load(store, jobHandler.ref(projectId, 'job_1'))
}
