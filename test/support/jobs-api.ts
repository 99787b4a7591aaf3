import type { Test } from 'tap'
import type { Harness, HttpResponse } from './harness.ts'

type Body = Record<string, unknown>

/**
 * The job and worker calls that API tests make over and over, on the harness's project.
 * `create` sends `jobType` and an empty payload unless the body names its own; it and `claimOne`
 * throw on anything but success, because they set a test up rather than assert on the API.
 */
export function jobsApi(h: Harness, defaults: { jobType: string }) {
  /** Polls without waiting unless the body sets `wait_seconds`. */
  const poll = (body: Body) => h.request('POST', '/jobsvc/v1/workers/poll', { wait_seconds: 0, ...body })
  return {
    async create(body: Body): Promise<any> {
      const res = await h.request('POST', '/jobsvc/v1/jobs', { job_type: defaults.jobType, payload: {}, ...body })
      if (res.status !== 201) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`)
      return res.body
    },
    getJob: async (id: string): Promise<any> => (await h.request('GET', `/jobsvc/v1/jobs/${id}`)).body,
    poll,
    ack: (body: Body) => h.request('POST', '/jobsvc/v1/workers/ack', body),
    /** Claims the one job waiting on `queue`, long-polling up to 5 s for it to become claimable. */
    async claimOne(queue: string, workerId: string): Promise<any> {
      const res = await poll({ worker_id: workerId, queues: [queue], wait_seconds: 5 })
      if (res.body?.jobs?.length !== 1) throw new Error(`poll on ${queue} answered ${JSON.stringify(res.body)}`)
      return res.body.jobs[0]
    },
  }
}

/** Asserts an error answer: its status and its envelope's code, under `what` when given. */
export function isError(t: Pick<Test, 'equal'>, res: HttpResponse, status: number, code: string, what?: string): void {
  t.equal(res.status, status, what ?? `status ${status}`)
  t.equal(res.body?.error?.code, code, what ?? `code ${code}`)
}
