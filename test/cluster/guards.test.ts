import t from 'tap'
import { exactExpectationsSince, isVersionBefore } from '../../services/infrastructure/write-guard.ts'
import { openIdempotencyStore } from '../../services/roles/api/idempotency-hooks.ts'
import { abandonedAfterMs, IdempotencyStore } from '../../services/roles/api/idempotency-store.ts'
import { AuthLimits, loginFailuresPerWindow } from '../../services/use-cases/platform/auth-limits.ts'
import { hashRecoveryCode } from '../../services/use-cases/platform/totp.ts'
import { promoCodeHandler, userHandler } from '../../streams/aggregates.ts'
import { startNatsCluster } from '../support/nats-cluster.ts'
import { newVerifiedUser, sessionFrom, startPlatformHarness, totpCode } from '../support/platform.ts'

/**
 * Every guard that rests on the log's expected-sequence check, on the machine's three-node
 * nats-server 2.9.10 cluster with three replicas. Before 2.9.21 the stream leader checks an
 * append's expected last subject sequence only against what it has applied, so appends in flight
 * together with the same expectation can all be stored (nats-io/nats-server#4320): each race
 * below sends its writes in one turn of the event loop, which puts them in flight together, and
 * exactly one may win.
 */
const cluster = await startNatsCluster(t)
const h = await startPlatformHarness(t, import.meta.filename, { roles: ['api', 'projector'], config: { natsUrl: cluster.urls, replicas: 3 } })
const racers = 20

/** Sends one decision `racers` times at once (`decide(i)` is the i-th); answers how many of them appended. */
async function race(decide: (i: number) => Promise<{ appended: boolean }>): Promise<number> {
  const results = await Promise.allSettled(Array.from({ length: racers }, (_, i) => decide(i)))
  return results.filter((r) => r.status === 'fulfilled' && r.value.appended).length
}

t.test("the cluster's nats-server is older than 2.9.21: with three replicas every guarded write takes its lock", async (t) => {
  const nats = h.runtime.nats.nc.info!.version
  t.ok(isVersionBefore(nats, exactExpectationsSince), `the cluster runs nats-server ${nats}`)
  t.ok(h.runtime.guard.locking, 'the guard takes its locks')
  for (const name of ['store', 'heartbeats', 'authLimits', 'idempotency'] as const)
    t.ok(h.runtime.guard.guards(h.runtime[name]), `${name} writes through it`)
})

t.test('a TOTP step opens one session, however many logins send its code at once', async (t) => {
  const u = await newVerifiedUser(h)
  const setup = await h.platform('POST', '/platform/v1/auth/2fa/setup', undefined, { jwt: u.jwt })
  const secret = setup.body.secret as string
  const verified = await h.platform('POST', '/platform/v1/auth/2fa/verify', { code: totpCode(secret) }, { jwt: u.jwt })
  t.equal(verified.status, 200, JSON.stringify(verified.body))
  const code = totpCode(secret, new Date(), 1)
  const logins = await Promise.all(
    Array.from({ length: 6 }, () => h.platform('POST', '/platform/v1/auth/login', { email: u.email, password: u.password, totp_code: code })),
  )
  t.same(logins.map((l) => l.status).sort(), [200, 401, 401, 401, 401, 401], 'one login with the code, the others refused as a replay')
  t.ok(sessionFrom(logins.find((l) => l.status === 200)!), 'and it has its session')

  const step = Math.floor(Date.now() / 30_000) + 5
  const won = await race(() =>
    userHandler.decide(h.runtime, userHandler.ref(u.userId), {
      type: 'accept_totp_step',
      data: { step },
      meta: { now: new Date().toISOString() },
    }),
  )
  t.equal(won, 1, `of ${racers} acceptances of one step sent at once, one is stored`)
})

t.test('a recovery code is used once, however many uses of it are sent at once', async (t) => {
  const u = await newVerifiedUser(h)
  const setup = await h.platform('POST', '/platform/v1/auth/2fa/setup', undefined, { jwt: u.jwt })
  await h.platform('POST', '/platform/v1/auth/2fa/verify', { code: totpCode(setup.body.secret) }, { jwt: u.jwt })
  const codes = (await h.platform('POST', '/platform/v1/auth/2fa/recovery/regenerate', undefined, { jwt: u.jwt })).body.codes as string[]
  t.equal(codes.length, 10, 'ten recovery codes')
  const won = await race(() =>
    userHandler.decide(h.runtime, userHandler.ref(u.userId), {
      type: 'use_recovery_code',
      data: { code_hash: hashRecoveryCode(codes[0]!) },
      meta: { now: new Date().toISOString() },
    }),
  )
  t.equal(won, 1, `of ${racers} uses of one recovery code sent at once, one is stored`)
  const user = (await userHandler.load(h.runtime.store, userHandler.ref(u.userId))).state!
  t.equal(user.recovery_code_hashes.length, 9, 'nine codes are left')
})

t.test('a promotion code with one use left is redeemed once', async (t) => {
  const ref = promoCodeHandler.ref('CLUSTER-ONCE')
  const now = () => new Date().toISOString()
  // Creates take no lock: the replicas check an expected sequence of 0 as they apply it.
  const created = await race(() =>
    promoCodeHandler.decide(h.runtime, ref, {
      type: 'create_promo_code',
      data: {
        code: 'CLUSTER-ONCE',
        kind: 'allowance_bonus',
        amount: 1000,
        periods: 1,
        max_uses: 1,
        expires_at: new Date(Date.now() + 86_400_000).toISOString(),
        created_by: 'usr_staff',
      },
      meta: { now: now() },
    }),
  )
  t.equal(created, 1, `of ${racers} creates of one code sent at once, one is stored`)
  const won = await race((i) =>
    promoCodeHandler.decide(h.runtime, ref, {
      type: 'redeem_promo_code',
      data: { project_id: `prj_race${i}`, redeemed_by: `usr_race${i}` },
      meta: { now: now() },
    }),
  )
  t.equal(won, 1, `of ${racers} projects redeeming the last use at once, one is stored`)
  t.equal((await promoCodeHandler.load(h.runtime.store, ref)).state!.uses, 1, 'the code counts one use')
})

t.test('the failed-login window takes its ten slots, however many attempts arrive at once', async (t) => {
  const limits = new AuthLimits(h.runtime.authLimits)
  const now = new Date()
  const verdicts = await Promise.all(Array.from({ length: 4 * loginFailuresPerWindow }, () => limits.reserveLoginAttempt('usr_cluster_race', now)))
  t.equal(verdicts.filter((v) => v.admitted).length, loginFailuresPerWindow, `${loginFailuresPerWindow} of ${4 * loginFailuresPerWindow} admitted`)
})

t.test('an abandoned idempotency reservation is taken over once, however many copies of its request arrive at once', async (t) => {
  const store = openIdempotencyStore(h.runtime)
  const key = IdempotencyStore.keyOf(h.projectId, `cluster-${h.runtime.newUlid()}`)
  // The reservation of a request whose process died: older than abandonedAfterMs, never completed.
  const long = Date.now() - 2 * abandonedAfterMs
  await h.runtime.idempotency.put(key, JSON.stringify({ state: 'pending', fingerprint: 'fingerprint', first_used_at: long, reserved_at: long }))
  // A copy that takes the reservation stores an answer at once; the others wait for it.
  const outcomes = await Promise.all(
    Array.from({ length: racers }, async () => {
      const reservation = await store.reserve(key, 'fingerprint')
      if (reservation.outcome === 'reserved')
        await store.complete(reservation, 'fingerprint', { status: 201, body: '{}', headers: {} }).catch(() => undefined)
      return reservation.outcome
    }),
  )
  t.equal(outcomes.filter((o) => o === 'reserved').length, 1, `one of ${racers} took the reservation over (${outcomes.join(', ')})`)

  const httpKey = `cluster-${h.runtime.newUlid()}`
  const answers = await Promise.all(
    Array.from({ length: racers }, () =>
      h.request('POST', '/jobsvc/v1/jobs', { job_type: 'once', payload: { n: 1 } }, { 'idempotency-key': httpKey }),
    ),
  )
  const created = new Set(answers.filter((a) => a.status === 201).map((a) => a.body.id))
  t.equal(created.size, 1, `through the API, one job for ${racers} copies of a request (${JSON.stringify(answers.map((a) => a.status))})`)
})
