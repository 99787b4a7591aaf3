import t, { type Test } from 'tap'
import { resolvePlans } from '../../domain/plans.ts'
import { AccountService } from '../../services/use-cases/platform/accounts.ts'
import { promoCodeHandler } from '../../streams/aggregates.ts'
import { eventually, httpRequest, withClockShifted, type HttpResponse } from '../support/harness.ts'
import { joinProject, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'

// Staff administration (/platform/v1/admin) and promotion codes over HTTP against the whole
// service (docs/api-notes.md, "Staff administration" and "Promotion codes"). The starter plan's allowance
// is cut to 2 jobs and its overage rate raised to a dollar a job, so one overage job shows a
// discount in whole cents.
const starterAllowance = 2
const h = await startPlatformHarness(t, import.meta.filename, {
  config: { plans: resolvePlans({ starter: { monthly_jobs: starterAllowance, overage_cents_per_10k: 1_000_000 } }) },
})

const accounts = new AccountService(h.runtime)
const staff = await newVerifiedUser(h)
await accounts.setAdmin(staff.email, true)
const customer = await newVerifiedUser(h, { plan: 'free' })
const teammate = await joinProject(h, customer, customer.projectId, 'admin')

const asUser = (user: { jwt: string }) => ({ jwt: user.jwt })
const admin = (method: string, path: string, body?: unknown, user: { jwt: string } = staff) =>
  h.platform(method, `/platform/v1/admin${path}`, body, asUser(user))
const inAnHour = () => new Date(Date.now() + 3_600_000).toISOString()

function isError(t: Test, res: HttpResponse, status: number, code: string, what: string): void {
  t.equal(res.status, status, `${what}: status ${status} (got ${res.status} ${JSON.stringify(res.body)})`)
  t.equal(res.body?.error?.code, code, `${what}: code ${code}`)
}

async function feedKinds(project: { apiKey: string }): Promise<Array<{ kind: string; metadata: string | null }>> {
  const res = await httpRequest(h.url, project.apiKey, 'GET', '/jobsvc/v1/activity?limit=100')
  if (res.status !== 200) throw new Error(`activity: ${res.status} ${JSON.stringify(res.body)}`)
  return res.body.data
}

/** Waits until the project's activity feed has a row of `kind`; returns it. */
function feedRow(project: { apiKey: string }, kind: string): Promise<{ kind: string; metadata: string | null }> {
  return eventually(async () => (await feedKinds(project)).find((r) => r.kind === kind), 15_000, `${kind} in the feed`)
}

async function auditKinds(owner: VerifiedUser): Promise<string[]> {
  const window = `from=${new Date(Date.now() - 3_600_000).toISOString()}&until=${inAnHour()}&format=jsonl`
  const res = await h.platform('GET', `/jobsvc/v1/projects/${owner.projectId}/audit-log/export?${window}`, undefined, asUser(owner))
  if (res.status !== 200) throw new Error(`audit export: ${res.status} ${JSON.stringify(res.body)}`)
  return String(res.body)
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line).kind)
}

t.test('anyone who is not staff gets the 404 of an unknown path, whatever the request', async (t) => {
  const paths: Array<[string, string, unknown?]> = [
    ['GET', `/projects/${customer.projectId}`],
    ['GET', `/users/${customer.userId}`],
    ['POST', `/users/${customer.userId}/suspend`],
    ['PUT', `/projects/${customer.projectId}/rate-limit-override`, { requests_per_hour: 'lots' }],
    ['PUT', `/projects/${customer.projectId}/plan`, { plan: 'pro' }],
    ['POST', '/promo-codes', '{not json'],
  ]
  for (const [method, path, body] of paths) {
    for (const [who, options] of [
      ['anonymous', {}],
      ['a customer', asUser(customer)],
      ['a bad session', { jwt: 'not-a-jwt' }],
    ] as const) {
      const res = await h.platform(method, `/platform/v1/admin${path}`, body, options)
      isError(t, res, 404, 'route_not_found', `${method} ${path} as ${who}`)
      t.equal(res.body.error.message, `no route ${method} /platform/v1/admin${path}`, 'the same message as a missing path')
    }
  }
  t.equal((await h.platform('GET', '/platform/v1/auth/me', undefined, asUser(staff))).body.is_admin, true, 'staff is staff')
})

t.test('lookups: a project by id, a user by id or e-mail', async (t) => {
  const project = await admin('GET', `/projects/${customer.projectId}`)
  t.equal(project.status, 200, JSON.stringify(project.body))
  t.match(project.body, { id: customer.projectId, status: 'active', rate_limit_override: null, billing: { plan: 'free', requests_per_hour: 1000 } })
  t.same(project.body.members.map((m: { email: string }) => m.email).sort(), [customer.email, teammate.email].sort())

  const byId = await admin('GET', `/users/${customer.userId}`)
  t.equal(byId.status, 200, JSON.stringify(byId.body))
  t.match(byId.body, { user_id: customer.userId, email: customer.email, status: 'active', is_admin: false })
  t.same(byId.body.projects, [{ id: customer.projectId, name: 'My first project', role: 'owner' }])
  const byEmail = await admin('GET', `/users/${encodeURIComponent(customer.email.toUpperCase())}`)
  t.same(byEmail.body, byId.body, 'by e-mail, case aside')

  isError(t, await admin('GET', `/projects/prj_${'0'.repeat(26)}`), 404, 'project_not_found', 'an unknown project')
  isError(t, await admin('GET', '/projects/not-an-id'), 404, 'project_not_found', 'not a project id')
  isError(t, await admin('GET', `/users/usr_${'0'.repeat(26)}`), 404, 'user_not_found', 'an unknown user id')
  isError(t, await admin('GET', '/users/nobody@example.com'), 404, 'user_not_found', 'an unknown address')
})

t.test('suspend and reinstate: login and sessions follow, and each of the user’s projects records it', async (t) => {
  const session = await h.platform('GET', '/platform/v1/auth/me', undefined, asUser(teammate))
  t.equal(session.status, 200)
  const suspended = await admin('POST', `/users/${teammate.userId}/suspend`)
  t.equal(suspended.status, 200, JSON.stringify(suspended.body))
  t.equal(suspended.body.status, 'suspended')
  isError(
    t,
    await h.platform('POST', '/platform/v1/auth/login', { email: teammate.email, password: teammate.password }),
    403,
    'account_suspended',
    'login',
  )
  isError(t, await h.platform('GET', '/platform/v1/auth/me', undefined, asUser(teammate)), 401, 'unauthorized', 'an open session')
  isError(t, await admin('POST', `/users/${staff.userId}/suspend`), 409, 'invalid_state', 'staff suspending themselves')
  isError(t, await admin('POST', `/users/usr_${'0'.repeat(26)}/suspend`), 404, 'user_not_found', 'an unknown user')

  const reinstated = await admin('POST', `/users/${encodeURIComponent(teammate.email)}/reinstate`)
  t.equal(reinstated.body.status, 'active', 'reinstated by e-mail address')
  t.equal((await h.platform('POST', '/platform/v1/auth/login', { email: teammate.email, password: teammate.password })).status, 200, 'login again')

  // The teammate belongs to two projects: their own first one and the customer's.
  for (const project of [customer, teammate]) {
    const row = await feedRow(project, 'admin_user_reinstated')
    t.ok(row, `admin_user_reinstated on ${project === customer ? "the customer's" : "the teammate's own"} project`)
    t.ok(
      (await feedKinds(project)).some((r) => r.kind === 'admin_user_suspended'),
      'and admin_user_suspended',
    )
  }
})

t.test('a request-limit override shows in X-RateLimit-Limit while it lasts, then lapses', async (t) => {
  const limitNow = async () => (await httpRequest(h.url, customer.apiKey, 'GET', '/jobsvc/v1/jobs')).headers.get('x-ratelimit-limit')
  t.equal(await limitNow(), '1000', "the free plan's limit")
  const path = `/projects/${customer.projectId}/rate-limit-override`
  isError(
    t,
    await admin('PUT', path, { requests_per_hour: 1000, expires_at: inAnHour(), reason: 'launch' }),
    400,
    'invalid_request',
    'not above the plan',
  )
  isError(
    t,
    await admin('PUT', path, { requests_per_hour: 5000, expires_at: new Date(Date.now() - 1000).toISOString(), reason: 'launch' }),
    400,
    'invalid_request',
    'already expired',
  )
  isError(t, await admin('PUT', path, { requests_per_hour: 5000, expires_at: inAnHour() }), 400, 'invalid_request', 'no reason')

  const expiresAt = inAnHour()
  const set = await admin('PUT', path, { requests_per_hour: 5000, expires_at: expiresAt, reason: 'launch week' })
  t.equal(set.status, 200, JSON.stringify(set.body))
  t.match(set.body, { rate_limit_override: { requests_per_hour: 5000, expires_at: expiresAt, reason: 'launch week', set_by: staff.userId } })
  t.equal(set.body.billing.requests_per_hour, 5000, 'the billing answer shows the limit that applies')
  await eventually(async () => (await limitNow()) === '5000', 15_000, 'X-RateLimit-Limit 5000')
  t.pass('X-RateLimit-Limit shows the override')
  t.equal(await withClockShifted(h.runtime, 3_600_000 + 60_000, limitNow), '1000', "past expires_at the plan's limit applies again")
  const row = await feedRow(customer, 'admin_rate_limit_override')
  t.match(JSON.parse(row.metadata!), { requests_per_hour: 5000, previous_requests_per_hour: 1000, reason: 'launch week', expires_at: expiresAt })
})

t.test("staff change a project's plan", async (t) => {
  const changed = await admin('PUT', `/projects/${customer.projectId}/plan`, { plan: 'pro' })
  t.equal(changed.status, 200, JSON.stringify(changed.body))
  t.equal(changed.body.billing.plan, 'pro')
  const billing = await h.platform('GET', `/platform/v1/projects/${customer.projectId}/billing`, undefined, asUser(customer))
  t.equal(billing.body.plan, 'pro', 'the owner sees it')
  isError(t, await admin('PUT', `/projects/${customer.projectId}/plan`, { plan: 'platinum' }), 400, 'invalid_request', 'an unknown plan')
  const row = await feedRow(customer, 'admin_plan_changed')
  t.match(JSON.parse(row.metadata!), { plan: 'pro', previous_plan: 'free' })
  const kinds = await auditKinds(customer)
  for (const kind of ['admin_rate_limit_override', 'admin_plan_changed', 'admin_user_suspended', 'admin_user_reinstated']) {
    t.ok(kinds.includes(kind), `${kind} in the audit-log export`)
  }
})

t.test('promotion codes', async (t) => {
  const owner = await newVerifiedUser(h, { plan: 'starter' })
  const apply = (user: VerifiedUser, code: string, projectId = user.projectId) =>
    h.platform('POST', `/platform/v1/projects/${projectId}/billing/promo-code`, { code }, asUser(user))
  const create = (body: Record<string, unknown>) => admin('POST', '/promo-codes', { periods: 2, expires_at: inAnHour(), max_uses: 10, ...body })

  await t.test('staff create them; a taken code or a bad field is refused', async (t) => {
    const created = await create({ code: 'bonus-10', kind: 'allowance_bonus', amount: 10 })
    t.equal(created.status, 201, JSON.stringify(created.body))
    t.match(created.body, { code: 'BONUS-10', kind: 'allowance_bonus', amount: 10, uses: 0, created_by: staff.userId })
    isError(t, await create({ code: 'BONUS-10', kind: 'allowance_bonus', amount: 5 }), 409, 'invalid_state', 'a taken code')
    isError(t, await create({ code: 'OFF-200', kind: 'overage_discount', amount: 200 }), 400, 'invalid_request', 'over 100 % off')
    isError(t, await create({ code: 'no spaces', kind: 'allowance_bonus', amount: 5 }), 400, 'invalid_request', 'a code with a space')
  })

  await t.test('an allowance bonus raises the allowance in the billing answer and the quota headers', async (t) => {
    const applied = await apply(owner, 'bonus-10')
    t.equal(applied.status, 200, JSON.stringify(applied.body))
    t.match(applied.body, { allowance: starterAllowance + 10, allowance_bonus: 10, overage_discount_percent: 0 })
    t.match(applied.body.promotions, [{ code: 'BONUS-10', kind: 'allowance_bonus', amount: 10, periods: 2 }])
    const job = await httpRequest(h.url, owner.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'promo', payload: {} })
    t.equal(job.status, 201)
    t.equal(job.headers.get('x-quota-limit'), String(starterAllowance + 10), 'X-Quota-Limit')
    isError(t, await apply(owner, 'BONUS-10'), 422, 'invalid_token', 'the same code twice on one project')
    const row = await feedRow(owner, 'promo_code_applied')
    t.match(JSON.parse(row.metadata!), { code: 'BONUS-10', kind: 'allowance_bonus', amount: 10, periods: 2 })
    t.ok((await auditKinds(owner)).includes('promo_code_applied'), 'promo_code_applied in the audit-log export')
  })

  await t.test('an overage discount lowers the overage charge', async (t) => {
    const discounted = await newVerifiedUser(h, { plan: 'starter' })
    const overage = await h.platform('PATCH', `/platform/v1/projects/${discounted.projectId}/billing`, { overage_enabled: true }, asUser(discounted))
    t.equal(overage.status, 200)
    t.equal((await create({ code: 'HALF-OFF', kind: 'overage_discount', amount: 50 })).status, 201)
    t.equal((await apply(discounted, 'half-off')).status, 200)
    for (let i = 0; i < starterAllowance + 1; i++) {
      t.equal((await httpRequest(h.url, discounted.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'promo', payload: { i } })).status, 201)
    }
    const billing = await h.platform('GET', `/platform/v1/projects/${discounted.projectId}/billing`, undefined, asUser(discounted))
    t.match(billing.body, { overage: 1, overage_discount_percent: 50, overage_cost_cents: 50 }, 'one overage job at half of 100 cents')
    const next = await httpRequest(h.url, discounted.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'promo', payload: {} })
    t.equal(next.headers.get('x-quota-overage-cost'), '50', 'X-Quota-Overage-Cost')
  })

  await t.test('unknown, expired, used-up codes and non-owners are refused without spending a use', async (t) => {
    isError(t, await apply(owner, 'NO-SUCH-CODE'), 422, 'invalid_token', 'an unknown code')
    isError(t, await apply(owner, '!'), 422, 'invalid_token', 'not a code at all')
    t.equal(
      (await create({ code: 'SOON-GONE', kind: 'allowance_bonus', amount: 1, expires_at: new Date(Date.now() + 60_000).toISOString() })).status,
      201,
    )
    isError(t, await withClockShifted(h.runtime, 120_000, () => apply(owner, 'SOON-GONE')), 422, 'invalid_token', 'an expired code')
    t.equal((await create({ code: 'ONCE', kind: 'allowance_bonus', amount: 1, max_uses: 1 })).status, 201)
    const member = await joinProject(h, owner, owner.projectId, 'admin')
    isError(t, await apply(member, 'ONCE', owner.projectId), 403, 'forbidden', 'an admin, not the owner')
    isError(t, await apply(customer, 'ONCE', owner.projectId), 404, 'project_not_found', 'not a member')
    t.equal((await apply(customer, 'ONCE')).status, 200, 'the use is still there for an owner')
    isError(t, await apply(owner, 'ONCE'), 422, 'invalid_token', 'a used-up code')
  })

  await t.test('two concurrent applies of a one-use code: exactly one wins', async (t) => {
    t.equal((await create({ code: 'RACE', kind: 'allowance_bonus', amount: 7, max_uses: 1 })).status, 201)
    const [a, b] = await Promise.all([newVerifiedUser(h), newVerifiedUser(h)])
    const answers = await Promise.all([apply(a!, 'RACE'), apply(b!, 'RACE')])
    t.same(answers.map((r) => r.status).sort(), [200, 422], JSON.stringify(answers.map((r) => r.body)))
    t.equal(answers.find((r) => r.status === 422)!.body.error.code, 'invalid_token')
    const code = await promoCodeHandler.load(h.runtime.store, promoCodeHandler.ref('RACE'))
    t.equal(code.state!.uses, 1, 'one use counted')
  })

  await t.test('every refusal of a code reads alike, and ten failures an hour per user and per project are all one gets', async (t) => {
    const guesser = await newVerifiedUser(h, { plan: 'starter' })
    t.equal(
      (await create({ code: 'GONE-SOON', kind: 'allowance_bonus', amount: 1, expires_at: new Date(Date.now() + 60_000).toISOString() })).status,
      201,
    )
    t.equal((await create({ code: 'TAKEN', kind: 'allowance_bonus', amount: 1, max_uses: 1 })).status, 201)
    t.equal((await apply(customer, 'TAKEN')).status, 200, 'another project takes the one use')
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString()
    for (const code of ['FRESH-1', 'FRESH-2', 'FRESH-3'])
      t.equal((await create({ code, kind: 'allowance_bonus', amount: 1, expires_at: tomorrow })).status, 201)
    t.equal((await apply(guesser, 'FRESH-1')).status, 200)

    const refusals = [
      await apply(guesser, 'NO-SUCH-CODE'),
      await withClockShifted(h.runtime, 120_000, () => apply(guesser, 'GONE-SOON')),
      await apply(guesser, 'TAKEN'),
      await apply(guesser, 'FRESH-1'),
      await apply(guesser, '!'),
    ]
    t.same(
      refusals.map((r) => [r.status, r.body.error?.code]),
      refusals.map(() => [422, 'invalid_token']),
    )
    t.equal(new Set(refusals.map((r) => r.body.error.message)).size, 1, `one message: ${refusals[0]!.body.error.message}`)

    for (let i = 0; i < 5; i++)
      isError(t, await apply(guesser, `GUESS-${i}`), 422, 'invalid_token', `guess ${i}: the failures count, a success did not`)
    const locked = await apply(guesser, 'FRESH-2')
    isError(t, locked, 429, 'rate_limit_exceeded', 'the eleventh try, a good code, waits out the window')
    const retryAfter = Number(locked.headers.get('retry-after'))
    t.ok(retryAfter > 3000 && retryAfter <= 3600, `Retry-After ${retryAfter} s: when the oldest failure leaves the hour`)
    const second = await h.platform('POST', '/platform/v1/projects', { name: 'second', plan: 'starter' }, asUser(guesser))
    t.equal(second.status, 201)
    isError(t, await apply(guesser, 'FRESH-2', second.body.id), 429, 'rate_limit_exceeded', "the user's window covers every project of theirs")

    const heir = await joinProject(h, guesser, guesser.projectId, 'admin')
    t.equal(
      (await h.platform('POST', `/platform/v1/projects/${guesser.projectId}/transfer-ownership`, { user_id: heir.userId }, asUser(guesser))).status,
      200,
    )
    isError(t, await apply(heir, 'FRESH-2', guesser.projectId), 429, 'rate_limit_exceeded', "the project's window holds whoever owns it")
    t.equal((await apply(heir, 'FRESH-2')).status, 200, "the new owner's own project is not held")
    t.equal((await withClockShifted(h.runtime, 3_601_000, () => apply(guesser, 'FRESH-3', second.body.id))).status, 200, 'an hour later')
  })
})

t.test('the operator takes staff status away: the routes disappear for them', async (t) => {
  await accounts.setAdmin(staff.email, false)
  isError(t, await admin('GET', `/projects/${customer.projectId}`), 404, 'route_not_found', 'former staff')
  await accounts.setAdmin(staff.email, true)
  t.equal((await admin('GET', `/projects/${customer.projectId}`)).status, 200, 'staff again')
})
