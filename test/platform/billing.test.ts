import { createHmac, randomBytes } from 'node:crypto'
import t, { type Test } from 'tap'
import { BillingService } from '../../services/use-cases/metering/billing-service.ts'
import { resolvePlans } from '../../domain/plans.ts'
import { signPayload } from '../../services/use-cases/metering/provider-signature.ts'
import { rollBillingPeriods } from '../../services/roles/scheduler/index.ts'
import { projectHandler } from '../../streams/aggregates.ts'
import { eventually, httpRequest, type HttpResponse } from '../support/harness.ts'
import { freshEmail, freshIp, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'
import { tokenFromMail } from '../support/smtp-sink.ts'

// Plans, overage, spend caps, allowance warnings, billing periods and the payment provider's
// webhook, over HTTP against the whole service (spec, Limits and Errors; docs/api-notes.md, "Billing routes").
// The starter plan's allowance is cut to 5 so the 80 % / 100 % marks and overage are reachable;
// free and pro keep the spec's numbers. The scheduler's own billing pass runs only at start-up
// (a long interval), so the period rollover below is driven by calling rollBillingPeriods.
const webhookSecret = 'whsec-test-secret-0123456789'
const starterAllowance = 5
const starterCentsPer10k = 150
const h = await startPlatformHarness(t, import.meta.filename, {
  config: { billingWebhookSecret: webhookSecret, plans: resolvePlans({ starter: { monthly_jobs: starterAllowance } }) },
  tunables: { billing_period_check_interval_ms: 3_600_000 },
})

const realClock = h.runtime.now
const restoreClock = () => {
  h.runtime.now = realClock
}
t.teardown(restoreClock)

const unknownProjectId = `prj_${'0'.repeat(26)}`
const billingPath = (projectId: string) => `/platform/v1/projects/${projectId}/billing`
const asUser = (user: { jwt: string }) => ({ jwt: user.jwt })
const job = (i = 0) => ({ job_type: 'billing.test', payload: { i } })

function isError(t: Test, res: HttpResponse, status: number, code: string, what: string): void {
  t.equal(res.status, status, `${what}: status ${status} (got ${res.status} ${JSON.stringify(res.body)})`)
  t.equal(res.body?.error?.code, code, `${what}: code ${code}`)
}

/** The UTC billing period around `at`: its first day (YYYY-MM-01) and the next month's first instant. */
function periodOf(at: Date): { start: string; startIso: string; endIso: string } {
  const start = new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), 1))
  const end = new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + 1, 1))
  return { start: start.toISOString().slice(0, 10), startIso: start.toISOString(), endIso: end.toISOString() }
}

async function getBilling(user: { jwt: string }, projectId: string) {
  return h.platform('GET', billingPath(projectId), undefined, asUser(user))
}

async function patchBilling(user: { jwt: string }, projectId: string, body: unknown) {
  return h.platform('PATCH', billingPath(projectId), body, asUser(user))
}

async function patchOk(t: Test, user: { jwt: string }, projectId: string, body: unknown) {
  const res = await patchBilling(user, projectId, body)
  t.equal(res.status, 200, `PATCH ${JSON.stringify(body)}: 200 (got ${res.status} ${JSON.stringify(res.body)})`)
  return res.body
}

async function createJob(apiKey: string, i = 0) {
  return httpRequest(h.url, apiKey, 'POST', '/jobsvc/v1/jobs', job(i))
}

interface ActivityRow {
  kind: string
  project_id: string | null
  user_id: string | null
  target_type: string
  target_id: string | null
  metadata: Record<string, unknown> | null
  seq: number
}

async function activityOf(projectId: string, kinds?: string[]): Promise<ActivityRow[]> {
  const rows = await h.runtime.sql<(Omit<ActivityRow, 'metadata' | 'seq'> & { metadata: string | null; seq: string | number })[]>`
    SELECT kind, project_id, user_id, target_type, target_id, metadata, seq FROM activity WHERE project_id = ${projectId} ORDER BY seq, id`
  return rows
    .map((r) => ({
      ...r,
      seq: Number(r.seq),
      metadata: r.metadata === null ? null : typeof r.metadata === 'string' ? JSON.parse(r.metadata) : r.metadata,
    }))
    .filter((r) => kinds === undefined || kinds.includes(r.kind))
}

/** Waits until `count` activity rows of `kind` exist for the project; returns them. */
async function activityRows(projectId: string, kind: string, count = 1): Promise<ActivityRow[]> {
  return eventually(
    async () => {
      const rows = await activityOf(projectId, [kind])
      return rows.length >= count ? rows : null
    },
    15_000,
    `${count} ${kind} activity row(s) for ${projectId}`,
  )
}

/**
 * A later change on the project (a spend-cap update to a fresh value), waited for in the
 * activity feed: the projector applies the log in order, so every earlier project event is in
 * the feed once this row is.
 */
async function activityBarrier(t: Test, owner: { jwt: string }, projectId: string): Promise<void> {
  const before = (await activityOf(projectId, ['spend_cap_updated'])).length
  const cap = 1_000_000 + Math.floor(Math.random() * 1_000_000)
  await patchOk(t, owner, projectId, { spend_cap_cents: cap })
  await activityRows(projectId, 'spend_cap_updated', before + 1)
}

async function projectName(user: VerifiedUser, projectId: string): Promise<string> {
  const res = await h.platform('GET', `/platform/v1/projects/${projectId}`, undefined, asUser(user))
  if (res.status !== 200) throw new Error(`project: ${res.status} ${JSON.stringify(res.body)}`)
  return res.body.name
}

/** Invites a fresh address with `role`, signs it up, verifies it and accepts the invitation. */
async function join(owner: VerifiedUser, projectId: string, role: string): Promise<VerifiedUser> {
  const email = freshEmail(role)
  const invited = await h.platform('POST', `/platform/v1/projects/${projectId}/members`, { email, role }, asUser(owner))
  if (invited.status !== 201) throw new Error(`invite: ${invited.status} ${JSON.stringify(invited.body)}`)
  const member = await newVerifiedUser(h, { email })
  const token = tokenFromMail(await h.smtp.next(email, /invited/i))
  const accepted = await h.platform('POST', '/platform/v1/invites/accept', { token }, asUser(member))
  if (accepted.status !== 200) throw new Error(`accept: ${accepted.status} ${JSON.stringify(accepted.body)}`)
  return member
}

// A team on a free project: owner, admin, member, viewer, and an outsider with projects of their own.
const owner = await newVerifiedUser(h)
const team = {
  owner,
  projectId: owner.projectId,
  admin: await join(owner, owner.projectId, 'admin'),
  member: await join(owner, owner.projectId, 'member'),
  viewer: await join(owner, owner.projectId, 'viewer'),
  outsider: await newVerifiedUser(h),
}

t.test('GET billing: the full view of a fresh free project', async (t) => {
  const u = await newVerifiedUser(h)
  const res = await getBilling(u, u.projectId)
  t.equal(res.status, 200, JSON.stringify(res.body))
  const period = periodOf(new Date())
  t.strictSame(res.body, {
    plan: 'free',
    billing_state: 'active',
    overage_enabled: false,
    overage_available: false,
    spend_cap_cents: null,
    period_start: period.startIso,
    period_end: period.endIso,
    allowance: 50_000,
    used: 0,
    overage: 0,
    overage_cost_cents: 0,
    overage_cents_per_10k: null,
    requests_per_hour: 1000,
    allowance_bonus: 0,
    overage_discount_percent: 0,
    promotions: [],
  })

  const used: string[] = []
  for (let i = 0; i < 3; i++) {
    const created = await createJob(u.apiKey, i)
    t.equal(created.status, 201, JSON.stringify(created.body))
    used.push(created.headers.get('x-quota-used')!)
    t.equal(created.headers.get('x-quota-limit'), '50000')
    t.equal(created.headers.get('x-quota-reset'), String(Date.parse(period.endIso) / 1000))
  }
  t.strictSame(used, ['0', '1', '2'], 'X-Quota-Used counts the jobs before each request')
  const after = await getBilling(u, u.projectId)
  t.equal(after.status, 200)
  t.equal(after.body.used, 3, 'used grows with each job created with the project key')
  t.equal(after.body.overage, 0)
  t.equal(after.body.overage_cost_cents, 0)

  const reads = await httpRequest(h.url, u.apiKey, 'GET', '/jobsvc/v1/jobs')
  t.equal(reads.status, 200)
  t.equal((await getBilling(u, u.projectId)).body.used, 3, 'reads do not count')
  const invalid = await httpRequest(h.url, u.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: '' })
  t.equal(invalid.status, 400)
  t.equal((await getBilling(u, u.projectId)).body.used, 3, 'a refused create gives its unit back')
})

t.test('GET billing: every member may read; others get 404, no session 401', async (t) => {
  const expected = await getBilling(team.owner, team.projectId)
  t.equal(expected.status, 200, JSON.stringify(expected.body))
  for (const [role, user] of [
    ['admin', team.admin],
    ['member', team.member],
    ['viewer', team.viewer],
  ] as const) {
    const res = await getBilling(user, team.projectId)
    t.equal(res.status, 200, `${role} reads the billing view (${JSON.stringify(res.body)})`)
    t.equal(res.body.plan, expected.body.plan, `${role} sees the project's plan`)
    t.equal(res.body.allowance, expected.body.allowance, `${role} sees the allowance`)
  }
  isError(t, await getBilling(team.outsider, team.projectId), 404, 'project_not_found', 'a non-member')
  isError(t, await getBilling(team.owner, unknownProjectId), 404, 'project_not_found', 'an unknown project')
  isError(t, await h.platform('GET', billingPath(team.projectId)), 401, 'unauthorized', 'no session')
  isError(t, await h.platform('GET', billingPath(team.projectId), undefined, { jwt: 'not-a-jwt' }), 401, 'unauthorized', 'a bad JWT')
  isError(t, await h.platform('PATCH', billingPath(team.projectId), { overage_enabled: false }), 401, 'unauthorized', 'PATCH without a session')
  isError(t, await patchBilling(team.outsider, team.projectId, { spend_cap_cents: 10 }), 404, 'project_not_found', 'PATCH by a non-member')
})

t.test('PATCH billing: roles — owner changes the plan, admin overage and cap, below admin nothing', async (t) => {
  const { owner, admin, member, viewer, projectId } = team
  isError(t, await patchBilling(admin, projectId, { plan: 'pro' }), 403, 'forbidden', 'admin changing the plan')
  isError(t, await patchBilling(member, projectId, { plan: 'pro' }), 403, 'forbidden', 'member changing the plan')
  isError(t, await patchBilling(member, projectId, { spend_cap_cents: 100 }), 403, 'forbidden', 'member setting the cap')
  isError(t, await patchBilling(member, projectId, { overage_enabled: false }), 403, 'forbidden', 'member setting overage')
  isError(t, await patchBilling(viewer, projectId, { spend_cap_cents: 100 }), 403, 'forbidden', 'viewer setting the cap')
  t.equal((await getBilling(owner, projectId)).body.plan, 'free', 'refused changes change nothing')
  t.equal((await getBilling(owner, projectId)).body.spend_cap_cents, null)

  const pro = await patchOk(t, owner, projectId, { plan: 'pro' })
  t.equal(pro.plan, 'pro')
  t.equal(pro.allowance, 3_000_000)
  t.equal(pro.overage_available, true)
  t.equal(pro.overage_cents_per_10k, 100)
  t.equal(pro.requests_per_hour, 50_000)
  t.equal(pro.overage_enabled, false, 'a plan change leaves overage off')
  t.equal((await getBilling(viewer, projectId)).body.plan, 'pro', 'the change is visible to every member')
  const created = await createJob(owner.apiKey)
  t.equal(created.status, 201, JSON.stringify(created.body))
  t.equal(created.headers.get('x-quota-limit'), '3000000', 'the next create uses the new plan')

  const byAdmin = await patchOk(t, admin, projectId, { overage_enabled: true, spend_cap_cents: 2500 })
  t.equal(byAdmin.overage_enabled, true, 'admin enables overage')
  t.equal(byAdmin.spend_cap_cents, 2500, 'admin sets the cap')
  t.equal(byAdmin.plan, 'pro')
  const off = await patchOk(t, admin, projectId, { overage_enabled: false })
  t.equal(off.overage_enabled, false, 'admin disables overage')
  t.equal(off.spend_cap_cents, 2500, 'an omitted field is left as it is')
  const same = await patchOk(t, owner, projectId, {})
  t.equal(same.plan, 'pro', 'an empty PATCH changes nothing')
  t.equal(same.spend_cap_cents, 2500)
})

t.test('PATCH billing: validation', async (t) => {
  const u = await newVerifiedUser(h)
  const cases: Array<[string, unknown]> = [
    ['an unknown field', { plan: 'pro', discount: 10 }],
    ['an unknown field alone', { billing_state: 'active' }],
    ['a negative cap', { spend_cap_cents: -1 }],
    ['a non-integer cap', { spend_cap_cents: 12.5 }],
    ['a string cap', { spend_cap_cents: '100' }],
    ['an unknown plan', { plan: 'platinum' }],
    ['a non-boolean overage', { overage_enabled: 'yes' }],
    ['a body that is not an object', [1, 2]],
  ]
  for (const [what, body] of cases) isError(t, await patchBilling(u, u.projectId, body), 400, 'invalid_request', what)
  const view = await getBilling(u, u.projectId)
  t.equal(view.body.plan, 'free', 'nothing was applied')
  t.equal(view.body.spend_cap_cents, null)

  isError(t, await patchBilling(u, u.projectId, { overage_enabled: true }), 409, 'overage_unavailable', 'overage on the free plan')
  t.equal((await getBilling(u, u.projectId)).body.overage_enabled, false)
  const off = await patchOk(t, u, u.projectId, { overage_enabled: false })
  t.equal(off.overage_enabled, false, 'turning overage off on free is accepted (already off)')
  const zero = await patchOk(t, u, u.projectId, { spend_cap_cents: 0 })
  t.equal(zero.spend_cap_cents, 0, 'a cap of 0 is allowed')
})

t.test('PATCH billing: a refused PATCH applies none of its changes', async (t) => {
  const u = await newVerifiedUser(h)
  await patchOk(t, u, u.projectId, { plan: 'pro', overage_enabled: true })
  const refused = await patchBilling(u, u.projectId, { plan: 'free', overage_enabled: true })
  isError(t, refused, 409, 'overage_unavailable', 'moving to free and enabling overage in one PATCH')
  const after = await getBilling(u, u.projectId)
  t.equal(after.body.plan, 'pro', `the plan is unchanged after the 409 (got ${after.body.plan})`)
  t.equal(after.body.overage_enabled, true, 'overage is unchanged after the 409')

  const admin = await join(u, u.projectId, 'admin')
  isError(t, await patchBilling(admin, u.projectId, { plan: 'business', spend_cap_cents: 9 }), 403, 'forbidden', 'admin changing plan and cap')
  t.equal((await getBilling(u, u.projectId)).body.spend_cap_cents, null, 'the cap is unchanged after the 403')
})

t.test('spend cap: set, shown on creates, cleared with null', async (t) => {
  const u = await newVerifiedUser(h)
  await patchOk(t, u, u.projectId, { plan: 'pro' })
  const set = await patchOk(t, u, u.projectId, { spend_cap_cents: 250 })
  t.equal(set.spend_cap_cents, 250)
  const withCap = await createJob(u.apiKey)
  t.equal(withCap.status, 201, JSON.stringify(withCap.body))
  t.equal(withCap.headers.get('x-quota-spend-cap'), '250', 'X-Quota-Spend-Cap shows the cap')

  const cleared = await patchOk(t, u, u.projectId, { spend_cap_cents: null })
  t.equal(cleared.spend_cap_cents, null, 'null clears the cap')
  t.equal((await getBilling(u, u.projectId)).body.spend_cap_cents, null)
  const withoutCap = await createJob(u.apiKey)
  t.equal(withoutCap.status, 201, JSON.stringify(withoutCap.body))
  t.equal(withoutCap.headers.get('x-quota-spend-cap'), null, 'the header disappears on the next create')

  const rows = await activityRows(u.projectId, 'spend_cap_updated', 2)
  t.strictSame(
    rows.map((r) => r.metadata),
    [{ spend_cap_cents: 250 }, { spend_cap_cents: null }],
    'one spend_cap_updated row per change, with the new value',
  )
  for (const row of rows) {
    t.equal(row.project_id, u.projectId)
    t.equal(row.target_type, 'project')
    t.equal(row.target_id, u.projectId)
  }
})

t.test('changing pro → free with overage on turns overage off; activity rows', async (t) => {
  const u = await newVerifiedUser(h)
  await patchOk(t, u, u.projectId, { plan: 'pro' })
  const on = await patchOk(t, u, u.projectId, { overage_enabled: true })
  t.equal(on.overage_enabled, true)
  t.equal(on.overage_available, true)
  const free = await patchOk(t, u, u.projectId, { plan: 'free' })
  t.equal(free.plan, 'free')
  t.equal(free.overage_enabled, false, 'overage is off after the move to free')
  t.equal(free.overage_available, false)
  t.equal(free.overage_cents_per_10k, null)
  t.equal(free.allowance, 50_000)
  t.equal((await getBilling(u, u.projectId)).body.overage_enabled, false, 'and stays off')

  const enabled = await activityRows(u.projectId, 'overage_enabled')
  const disabled = await activityRows(u.projectId, 'overage_disabled')
  t.equal(enabled.length, 1, 'one overage_enabled row')
  t.equal(disabled.length, 1, 'one overage_disabled row (from the plan change)')
  for (const row of [...enabled, ...disabled]) {
    t.equal(row.project_id, u.projectId, `${row.kind} has the project id`)
    t.equal(row.target_type, 'project')
    t.equal(row.target_id, u.projectId)
  }
  t.ok(enabled[0]!.seq <= disabled[0]!.seq, 'enabled before disabled')
})

t.test('allowance warnings at 80 % and 100 %, once each, mailed to the owner', async (t) => {
  const u = await newVerifiedUser(h, { plan: 'starter' })
  const name = await projectName(u, u.projectId)
  const view = await getBilling(u, u.projectId)
  t.equal(view.body.plan, 'starter')
  t.equal(view.body.allowance, starterAllowance)
  const eighty = Math.ceil(0.8 * starterAllowance)
  const period = periodOf(new Date()).start

  for (let i = 0; i < eighty; i++) {
    const res = await createJob(u.apiKey, i)
    t.equal(res.status, 201, JSON.stringify(res.body))
  }
  const w80 = await activityRows(u.projectId, 'allowance_warning_80')
  t.equal(w80.length, 1, 'one allowance_warning_80 row')
  t.strictSame(w80[0]!.metadata, { period, used: eighty, allowance: starterAllowance })
  t.equal(w80[0]!.target_id, u.projectId)
  const mail80 = await h.smtp.next(u.email, /80%/)
  t.ok(mail80.subject.includes(name), `the subject names the project (${mail80.subject})`)
  t.match(mail80.subject, /80% of this month's job allowance used/)
  t.equal((await activityOf(u.projectId, ['allowance_warning_100'])).length, 0, 'no 100 % warning yet')

  for (let i = eighty; i < starterAllowance; i++) {
    const res = await createJob(u.apiKey, i)
    t.equal(res.status, 201, JSON.stringify(res.body))
  }
  const w100 = await activityRows(u.projectId, 'allowance_warning_100')
  t.strictSame(w100[0]!.metadata, { period, used: starterAllowance, allowance: starterAllowance })
  const mail100 = await h.smtp.next(u.email, /100%/)
  t.ok(mail100.subject.includes(name), `the subject names the project (${mail100.subject})`)

  const refused = await createJob(u.apiKey)
  isError(t, refused, 429, 'monthly_allowance_exceeded', 'past the allowance with overage off')
  await patchOk(t, u, u.projectId, { overage_enabled: true })
  for (let i = 0; i < 3; i++) {
    const res = await createJob(u.apiKey, 100 + i)
    t.equal(res.status, 201, `overage create ${i}: ${JSON.stringify(res.body)}`)
    t.equal(res.headers.get('x-quota-overage'), String(i), 'X-Quota-Overage before this job')
  }
  await activityBarrier(t, u, u.projectId)
  t.equal((await activityOf(u.projectId, ['allowance_warning_80'])).length, 1, 'still one 80 % row')
  t.equal((await activityOf(u.projectId, ['allowance_warning_100'])).length, 1, 'still one 100 % row')
  const warningMails = h.smtp.mails.filter((m) => m.to.includes(u.email.toLowerCase()) && /allowance/.test(m.subject))
  t.equal(warningMails.length, 2, `exactly two warning mails (${warningMails.map((m) => m.subject).join(' | ')})`)
  const billing = await getBilling(u, u.projectId)
  t.equal(billing.body.used, starterAllowance + 3)
  t.equal(billing.body.overage, 3)
  t.equal(billing.body.overage_cost_cents, Math.ceil((3 * starterCentsPer10k) / 10_000))
})

t.test('spend cap stops overage creation', async (t) => {
  const u = await newVerifiedUser(h, { plan: 'starter' })
  await patchOk(t, u, u.projectId, { overage_enabled: true, spend_cap_cents: 0 })
  for (let i = 0; i < starterAllowance; i++) t.equal((await createJob(u.apiKey, i)).status, 201)
  const capped = await createJob(u.apiKey)
  isError(t, capped, 429, 'spend_cap_reached', 'the first overage job would cost 1 cent over a cap of 0')
  t.equal(capped.headers.get('x-quota-spend-cap'), '0')
  await patchOk(t, u, u.projectId, { spend_cap_cents: 1 })
  const more = await createJob(u.apiKey)
  t.equal(more.status, 201, `a raised cap lets creation continue (${JSON.stringify(more.body)})`)
})

t.test('provider webhook: signature scheme', async (t) => {
  const u = await newVerifiedUser(h)
  const body = JSON.stringify({
    id: `evt_${randomBytes(6).toString('hex')}`,
    type: 'billing_state.updated',
    data: { project_id: u.projectId, state: 'active' },
  })
  const now = new Date()
  const ts = Math.floor(now.getTime() / 1000)
  const independent = `t=${ts},v1=${createHmac('sha256', webhookSecret).update(`${ts}.${body}`).digest('hex')}`
  t.equal(signPayload(webhookSecret, body, now), independent, 'signPayload is t=<unix s>,v1=<hex HMAC-SHA256(secret, "t.body")>')

  const send = (payload: string, signature?: string, ip?: string) =>
    h.platform('POST', '/platform/v1/billing/webhook', payload, { ip, headers: signature === undefined ? {} : { 'jobsvc-signature': signature } })
  const sign = (payload: string, at: Date, secret = webhookSecret) => {
    const s = Math.floor(at.getTime() / 1000)
    return `t=${s},v1=${createHmac('sha256', secret).update(`${s}.${payload}`).digest('hex')}`
  }

  const ok = await send(body, independent)
  t.equal(ok.status, 200, `an independently signed event is accepted (${JSON.stringify(ok.body)})`)
  t.strictSame(ok.body, { received: true, project_id: u.projectId, billing_state: 'active' })

  isError(t, await send(body), 400, 'missing_signature', 'no signature header')
  isError(t, await send(body, ''), 400, 'missing_signature', 'an empty signature header')
  isError(t, await send(body, sign(body, new Date(), 'whsec-some-other-secret-000')), 400, 'invalid_signature', 'a wrong secret')
  const tampered = body.replace('"active"', '"past_due"')
  isError(t, await send(tampered, sign(body, new Date())), 400, 'invalid_signature', 'a tampered body')
  isError(t, await send(body, `t=${ts}`), 400, 'invalid_signature', 'no v1 entry')
  isError(t, await send(body, `v1=${'0'.repeat(64)}`), 400, 'invalid_signature', 'no timestamp')
  isError(t, await send(body, `t=${ts},v1=nothex`), 400, 'invalid_signature', 'a v1 that is not hex')
  isError(t, await send(body, sign(body, new Date(Date.now() - 6 * 60_000))), 400, 'invalid_signature', 'a timestamp 6 minutes old')
  isError(t, await send(body, sign(body, new Date(Date.now() + 6 * 60_000))), 400, 'invalid_signature', 'a timestamp 6 minutes ahead')
  const fourOld = await send(body, sign(body, new Date(Date.now() - 4 * 60_000)))
  t.equal(fourOld.status, 200, `a timestamp 4 minutes old is inside the window (${JSON.stringify(fourOld.body)})`)
  const fourAhead = await send(body, sign(body, new Date(Date.now() + 4 * 60_000)))
  t.equal(fourAhead.status, 200, `a timestamp 4 minutes ahead is inside the window (${JSON.stringify(fourAhead.body)})`)
  const rotating = await send(body, `${sign(body, new Date(), 'whsec-some-other-secret-000')},v1=${sign(body, new Date()).split('v1=')[1]}`)
  t.equal(rotating.status, 200, 'one good v1 among several is enough (secret rotation)')

  isError(
    t,
    await send('{"id": "x", "type": ', sign('{"id": "x", "type": ', new Date())),
    400,
    'invalid_request',
    'malformed JSON with a valid signature',
  )
  const wrongType = JSON.stringify({ id: 'evt_x', type: 'invoice.paid', data: { project_id: u.projectId, state: 'active' } })
  isError(t, await send(wrongType, sign(wrongType, new Date())), 400, 'invalid_request', 'an unknown event type')
  const badState = JSON.stringify({ id: 'evt_x', type: 'billing_state.updated', data: { project_id: u.projectId, state: 'bankrupt' } })
  isError(t, await send(badState, sign(badState, new Date())), 400, 'invalid_request', 'an unknown billing state')
  for (const projectId of [unknownProjectId, 'not-a-project']) {
    const unknown = JSON.stringify({ id: 'evt_y', type: 'billing_state.updated', data: { project_id: projectId, state: 'past_due' } })
    isError(t, await send(unknown, sign(unknown, new Date())), 404, 'project_not_found', `an unknown project (${projectId})`)
  }
  t.equal((await getBilling(u, u.projectId)).body.billing_state, 'active', 'refused events changed nothing')
})

t.test('provider webhook: an event id is applied once; a replay inside the window is a 200 duplicate', async (t) => {
  const u = await newVerifiedUser(h)
  const send = (payload: string, signature: string) =>
    h.platform('POST', '/platform/v1/billing/webhook', payload, { headers: { 'jobsvc-signature': signature } })
  const event = (id: string, state: string) => JSON.stringify({ id, type: 'billing_state.updated', data: { project_id: u.projectId, state } })
  const tag = randomBytes(4).toString('hex')
  const stateEvents = async () => {
    const history = await projectHandler.history(h.runtime.store, projectHandler.ref(u.projectId))
    return history.flatMap((r) => r.message.events).filter((e) => e.type === 'billing_state_changed' || e.type === 'billing_state_confirmed')
  }

  const pastDue = event(`evt_a_${tag}`, 'past_due')
  const pastDueSignature = signPayload(webhookSecret, pastDue, new Date())
  const first = await send(pastDue, pastDueSignature)
  t.strictSame(first.body, { received: true, project_id: u.projectId, billing_state: 'past_due' }, 'the first delivery is applied')
  const active = await send(event(`evt_b_${tag}`, 'active'), signPayload(webhookSecret, event(`evt_b_${tag}`, 'active'), new Date()))
  t.strictSame(active.body, { received: true, project_id: u.projectId, billing_state: 'active' }, 'a later event moves the state on')

  const replay = await send(pastDue, pastDueSignature)
  t.equal(replay.status, 200, 'the same signed request again, inside its 5 minutes: 200')
  t.strictSame(
    replay.body,
    { received: true, duplicate: true, project_id: u.projectId, billing_state: 'active' },
    'answered as a duplicate with the current state',
  )
  const resigned = await send(pastDue, signPayload(webhookSecret, pastDue, new Date(Date.now() + 1000)))
  t.strictSame(
    resigned.body,
    { received: true, duplicate: true, project_id: u.projectId, billing_state: 'active' },
    'so is the same event id signed again (a provider retry)',
  )
  t.equal((await getBilling(u, u.projectId)).body.billing_state, 'active', 'the replay did not put the project back in past_due')

  const confirming = event(`evt_c_${tag}`, 'active')
  const confirmingSignature = signPayload(webhookSecret, confirming, new Date())
  t.strictSame(
    (await send(confirming, confirmingSignature)).body,
    { received: true, project_id: u.projectId, billing_state: 'active' },
    'an event that confirms the current state is applied',
  )
  t.strictSame((await send(confirming, confirmingSignature)).body.duplicate, true, 'and its replay is a duplicate too')

  const parallel = event(`evt_d_${tag}`, 'unpaid')
  const parallelSignature = signPayload(webhookSecret, parallel, new Date())
  const answers = await Promise.all(Array.from({ length: 5 }, () => send(parallel, parallelSignature)))
  t.strictSame(
    answers.map((a) => a.status),
    [200, 200, 200, 200, 200],
    'five concurrent deliveries of one event: all 200',
  )
  t.equal(answers.filter((a) => a.body.duplicate !== true).length, 1, 'exactly one applied, four duplicates')

  const ids = (await stateEvents()).map((e) => e.data.provider_event_id)
  t.strictSame(ids, [`evt_a_${tag}`, `evt_b_${tag}`, `evt_c_${tag}`, `evt_d_${tag}`], 'the log holds each provider event once')
})

t.test('provider webhook: a blocked billing state stops job creation, not reads', async (t) => {
  const u = await newVerifiedUser(h)
  const existing = await createJob(u.apiKey)
  t.equal(existing.status, 201, JSON.stringify(existing.body))
  const jobId: string = existing.body.id
  const stateEvent = (state: string) =>
    JSON.stringify({ id: `evt_${randomBytes(6).toString('hex')}`, type: 'billing_state.updated', data: { project_id: u.projectId, state } })
  const send = (payload: string) =>
    h.platform('POST', '/platform/v1/billing/webhook', payload, { headers: { 'jobsvc-signature': signPayload(webhookSecret, payload, new Date()) } })

  const pastDue = await send(stateEvent('past_due'))
  t.equal(pastDue.status, 200, JSON.stringify(pastDue.body))
  t.strictSame(pastDue.body, { received: true, project_id: u.projectId, billing_state: 'past_due' })
  t.equal((await getBilling(u, u.projectId)).body.billing_state, 'past_due', 'the billing view shows the state')

  const blocked = await createJob(u.apiKey)
  isError(t, blocked, 402, 'billing_state_blocked', 'job creation while past due')
  t.type(blocked.body?.error?.message, 'string', 'the envelope has a message')
  t.type(blocked.body?.error?.request_id, 'string', 'the envelope has a request id')
  t.strictSame(Object.keys(blocked.body ?? {}), ['error'], 'the error envelope only')
  t.equal(blocked.headers.get('x-quota-used'), '1', 'the 402 carries the quota headers')
  t.equal((await getBilling(u, u.projectId)).body.used, 1, 'a blocked create takes no allowance')

  const list = await httpRequest(h.url, u.apiKey, 'GET', '/jobsvc/v1/jobs')
  t.equal(list.status, 200, 'the job list still reads')
  const one = await httpRequest(h.url, u.apiKey, 'GET', `/jobsvc/v1/jobs/${jobId}`)
  t.equal(one.status, 200, 'a job still reads')
  t.equal(one.body.id, jobId)

  for (const state of ['unpaid', 'cancelled', 'suspended']) {
    const changed = await send(stateEvent(state))
    t.equal(changed.body.billing_state, state)
    isError(t, await createJob(u.apiKey), 402, 'billing_state_blocked', `job creation while ${state}`)
  }

  const active = await send(stateEvent('active'))
  t.strictSame(active.body, { received: true, project_id: u.projectId, billing_state: 'active' })
  const again = await createJob(u.apiKey)
  t.equal(again.status, 201, `creation works again once active (${JSON.stringify(again.body)})`)
  t.equal(again.headers.get('x-quota-used'), '1')
})

t.test('provider webhook: exempt from the anonymous per-IP limit', async (t) => {
  const u = await newVerifiedUser(h)
  const ip = freshIp()
  const statuses: number[] = []
  for (let i = 0; i < 25; i++) {
    const state = i % 2 === 0 ? 'past_due' : 'active'
    const payload = JSON.stringify({ id: `evt_limit_${i}`, type: 'billing_state.updated', data: { project_id: u.projectId, state } })
    const res = await h.platform('POST', '/platform/v1/billing/webhook', payload, {
      ip,
      headers: { 'jobsvc-signature': signPayload(webhookSecret, payload, new Date()) },
    })
    statuses.push(res.status)
  }
  t.strictSame(statuses, Array(25).fill(200), '25 signed webhooks from one address: none 429')
  // The 25th event set past_due; put the project back.
  const payload = JSON.stringify({ id: 'evt_limit_end', type: 'billing_state.updated', data: { project_id: u.projectId, state: 'active' } })
  const back = await h.platform('POST', '/platform/v1/billing/webhook', payload, {
    ip,
    headers: { 'jobsvc-signature': signPayload(webhookSecret, payload, new Date()) },
  })
  t.equal(back.body.billing_state, 'active')

  const login = await h.platform('POST', '/platform/v1/auth/login', { email: freshEmail('nobody'), password: 'wrong-password' }, { ip })
  isError(t, login, 401, 'invalid_credentials', 'an anonymous auth POST from the same address afterwards (webhooks did not count)')
})

t.test('billing period rollover', async (t) => {
  t.teardown(restoreClock)
  // Set up in the current period: a starter project with overage on and 2 jobs beyond its
  // allowance, a free project well inside its allowance, and a pro project that created 7 jobs
  // (inside pro's allowance, overage never on) and then moved down to starter (allowance 5).
  const withOverage = await newVerifiedUser(h, { plan: 'starter' })
  const name = await projectName(withOverage, withOverage.projectId)
  await patchOk(t, withOverage, withOverage.projectId, { overage_enabled: true })
  const created = starterAllowance + 2
  for (let i = 0; i < created; i++) t.equal((await createJob(withOverage.apiKey, i)).status, 201)
  const cents = Math.ceil((2 * starterCentsPer10k) / 10_000)
  const before = await getBilling(withOverage, withOverage.projectId)
  t.equal(before.body.overage, 2)
  t.equal(before.body.overage_cost_cents, cents)
  const quiet = await newVerifiedUser(h)
  t.equal((await createJob(quiet.apiKey)).status, 201)
  const downgraded = await newVerifiedUser(h, { plan: 'pro' })
  for (let i = 0; i < created; i++) t.equal((await createJob(downgraded.apiKey, i)).status, 201)
  const down = await patchOk(t, downgraded, downgraded.projectId, { plan: 'starter' })
  t.equal(down.overage_enabled, false, 'overage was never turned on for the downgraded project')

  const real = new Date()
  const thisPeriod = periodOf(real).start
  const shifted = new Date(Date.UTC(real.getUTCFullYear(), real.getUTCMonth() + 1, 1, 0, 5))
  const nextPeriod = periodOf(shifted).start
  h.runtime.now = () => shifted
  const moved = await rollBillingPeriods(h.runtime, new BillingService(h.runtime), { period: '', projects: new Set() })
  t.ok(moved >= 3, `the pass moved every active project into the new period (${moved})`)

  await t.test('the project with overage: reset, charge, mail, fresh count', async (t) => {
    const reset = await activityRows(withOverage.projectId, 'billing_period_reset')
    t.equal(reset.length, 1)
    t.match(reset[0]!.metadata, { period: nextPeriod, previous_period: thisPeriod, previous_used: created })
    const charged = await activityRows(withOverage.projectId, 'overage_charged')
    t.equal(charged.length, 1)
    t.strictSame(charged[0]!.metadata, { period: thisPeriod, overage: 2, cents })
    t.equal(charged[0]!.project_id, withOverage.projectId)
    t.equal(charged[0]!.target_id, withOverage.projectId)
    const mail = await h.smtp.next(withOverage.email, /overage charged/)
    t.equal(mail.subject, `${name}: overage charged for ${thisPeriod}`)

    const fresh = await createJob(withOverage.apiKey)
    t.equal(fresh.status, 201, JSON.stringify(fresh.body))
    t.equal(fresh.headers.get('x-quota-used'), '0', 'X-Quota-Used starts at 0 in the new period')
    t.equal(fresh.headers.get('x-quota-overage'), '0')
    t.equal(fresh.headers.get('x-quota-reset'), String(Date.UTC(shifted.getUTCFullYear(), shifted.getUTCMonth() + 1, 1) / 1000))
  })

  await t.test('a project without overage: reset only', async (t) => {
    const reset = await activityRows(quiet.projectId, 'billing_period_reset')
    t.match(reset[0]!.metadata, { period: nextPeriod, previous_period: thisPeriod, previous_used: 1 })
    const fresh = await createJob(quiet.apiKey)
    t.equal(fresh.headers.get('x-quota-used'), '0', 'X-Quota-Used starts at 0 in the new period')
  })

  await t.test('a second pass in the same period adds nothing', async (t) => {
    const again = await rollBillingPeriods(h.runtime, new BillingService(h.runtime), { period: '', projects: new Set() })
    t.equal(again, 0, 'a second pass moves nothing')
    restoreClock()
    await activityBarrier(t, withOverage, withOverage.projectId)
    await activityBarrier(t, quiet, quiet.projectId)
    t.equal((await activityOf(withOverage.projectId, ['billing_period_reset'])).length, 1, 'still one reset')
    t.equal((await activityOf(withOverage.projectId, ['overage_charged'])).length, 1, 'still one charge')
    t.equal((await activityOf(quiet.projectId, ['overage_charged'])).length, 0, 'no charge without overage')
    t.equal((await activityOf(quiet.projectId, ['billing_period_reset'])).length, 1)
    const mails = h.smtp.mails.filter((m) => m.to.includes(withOverage.email.toLowerCase()) && /overage charged/.test(m.subject))
    t.equal(mails.length, 1, 'one overage mail')
  })

  // Spec, Limits 3-4: overage is billed only with overage on; with it off, creation is refused
  // past the allowance instead. These 7 jobs were all inside the pro allowance when created.
  await t.test('no overage is charged to a project that never had overage on (plan lowered mid-period)', async (t) => {
    restoreClock()
    await activityRows(downgraded.projectId, 'billing_period_reset')
    await activityBarrier(t, downgraded, downgraded.projectId)
    const charged = await activityOf(downgraded.projectId, ['overage_charged'])
    t.strictSame(
      charged.map((r) => r.metadata),
      [],
      'no overage_charged row',
    )
    const mails = h.smtp.mails.filter((m) => m.to.includes(downgraded.email.toLowerCase()) && /overage charged/.test(m.subject))
    t.equal(mails.length, 0, `no "overage charged" mail (${mails.map((m) => m.subject).join(' | ')})`)
  })
})

t.test('provider webhook without a billing secret: 503 billing_disabled', async (t) => {
  const other = await startPlatformHarness(t, import.meta.filename, { suffix: '_nobilling' })
  t.equal(other.config.billingWebhookSecret, null)
  const payload = JSON.stringify({ id: 'evt_1', type: 'billing_state.updated', data: { project_id: other.projectId, state: 'past_due' } })
  const res = await other.platform('POST', '/platform/v1/billing/webhook', payload, {
    headers: { 'jobsvc-signature': signPayload(webhookSecret, payload, new Date()) },
  })
  isError(t, res, 503, 'billing_disabled', 'a signed webhook')
  isError(t, await other.platform('POST', '/platform/v1/billing/webhook', payload), 503, 'billing_disabled', 'an unsigned webhook')
  t.equal((await other.request('POST', '/jobsvc/v1/jobs', job())).status, 201, 'the project was not blocked')
})
