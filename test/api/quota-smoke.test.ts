import t from 'tap'
import { resolvePlans } from '../../domain/plans.ts'
import { startHarness } from '../support/harness.ts'

t.test('quota headers and the allowance', async (t) => {
  const h = await startHarness(t, import.meta.filename, { config: { plans: resolvePlans({ business: { monthly_jobs: 3 } }) } })
  const used: string[] = []
  for (let i = 0; i < 3; i++) {
    const res = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'q', payload: {} })
    t.equal(res.status, 201)
    used.push(res.headers.get('x-quota-used')!)
    t.equal(res.headers.get('x-quota-limit'), '3')
  }
  t.same(used, ['0', '1', '2'])
  const refused = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'q', payload: {} })
  t.equal(refused.status, 429)
  t.equal(refused.body.error.code, 'monthly_allowance_exceeded')
  t.equal(refused.headers.get('x-quota-used'), '3')
  t.equal(refused.headers.get('x-quota-spend-cap'), null)
  const invalid = await h.request('POST', '/jobsvc/v1/jobs', { job_type: '' })
  t.equal(invalid.status, 400)
  t.equal(invalid.headers.get('x-quota-used'), '3', 'validation errors carry the headers too')
})
