import { httpRequest, type Harness } from './harness.ts'
import { jobsApi } from './jobs-api.ts'

/** The job and worker calls of `jobsApi`, made with another project's key (a signed-up user's). */
export function projectJobsApi(h: Harness, apiKey: string, defaults: { jobType: string }) {
  return jobsApi({ ...h, apiKey, request: (method, path, body, headers) => httpRequest(h.url, apiKey, method, path, body, headers) }, defaults)
}

export const sampleFailure = {
  type: 'CardDeclined',
  message: 'the card was declined by the issuer',
  stack_trace: 'CardDeclined: the card was declined by the issuer\n    at charge (worker/billing.ts:42:11)\n    at run (worker/main.ts:7:3)',
}

/** Creates a single-attempt job on its own queue, claims it and fails it: it is dead-lettered. */
export async function deadLetteredJob(api: ReturnType<typeof jobsApi>, queue: string, jobType = 'charge.card'): Promise<string> {
  const job = await api.create({ job_type: jobType, queue, max_attempts: 1, payload: { order_id: 'ord_1042', amount_cents: 1999 } })
  const claimed = await api.claimOne(queue, 'worker-dashboard-test')
  const ack = await api.ack({ job_id: claimed.id, worker_id: 'worker-dashboard-test', status: 'failed', duration_ms: 120, error: sampleFailure })
  if (ack.status !== 200) throw new Error(`ack answered ${ack.status}: ${JSON.stringify(ack.body)}`)
  return job.id
}
