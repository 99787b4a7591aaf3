import { randomBytes } from 'node:crypto'
import t from 'tap'
import { eventually, httpRequest, type HttpResponse, type SpawnedService } from '../support/harness.ts'
import { sessionFrom } from '../support/platform.ts'
import { startSmtpSink, tokenFromMail, type SmtpSink } from '../support/smtp-sink.ts'
import { spawnedInstall } from '../support/spawned-install.ts'

/**
 * Two OS processes on one namespace and database: the first runs every role, the second only
 * the API. The anonymous-route limits, the login lockout and API-key revocation must hold for
 * the install as a whole, whichever process a request lands on.
 */

let ipCounter = 0
/** A distinct client address per call (TEST-NET-3), so one request's IP window is its own. */
function nextIp(): string {
  ipCounter += 1
  return `203.0.${113 + Math.floor(ipCounter / 250)}.${(ipCounter % 250) + 1}`
}

function email(tag: string): string {
  return `${tag}-${randomBytes(5).toString('hex')}@example.com`
}

function anon<T = any>(svc: SpawnedService, path: string, body: unknown, ip: string): Promise<HttpResponse<T>> {
  return httpRequest<T>(svc.url, null, 'POST', path, body, { 'x-forwarded-for': ip })
}

function withJwt<T = any>(svc: SpawnedService, method: string, path: string, jwt: string, ip = nextIp()): Promise<HttpResponse<T>> {
  return httpRequest<T>(svc.url, null, method, path, undefined, { 'x-forwarded-for': ip, authorization: `Bearer ${jwt}` })
}

/** Sign up and verify through `svc` (token from the sink), each POST from its own address. */
async function verifiedUser(
  svc: SpawnedService,
  smtp: SmtpSink,
  tag: string,
): Promise<{ email: string; password: string; userId: string; projectId: string; apiKey: string }> {
  const address = email(tag)
  const password = `pw-${randomBytes(8).toString('hex')}`
  const signup = await anon(svc, '/platform/v1/auth/signup', { email: address, password, accept_terms: true }, nextIp())
  if (signup.status !== 201) throw new Error(`signup: ${signup.status} ${JSON.stringify(signup.body)}`)
  const token = tokenFromMail(await smtp.next(address, /verify/i))
  const verified = await anon(svc, '/platform/v1/auth/verify', { token }, nextIp())
  if (verified.status !== 200) throw new Error(`verify: ${verified.status} ${JSON.stringify(verified.body)}`)
  return { email: address, password, userId: signup.body.user_id, projectId: verified.body.project_id, apiKey: verified.body.api_key }
}

t.test('two API processes share the auth limits and see revocations', async (t) => {
  const smtp = await startSmtpSink(t)
  const install = await spawnedInstall(t, import.meta.filename, { env: { TRUST_PROXY: 'true', SMTP_URL: smtp.url } })
  const [p1, p2] = await Promise.all([install.start(), install.start(['--role', 'api'])])
  t.not(p1.url, p2.url, 'two processes, two listening addresses')
  t.match(p2.output(), /"roles":\["api"\]/, 'the second process runs the API role only')

  await t.test('the per-IP limit of the anonymous routes is one window across processes', async (t) => {
    const ip = nextIp()
    // Every POST counts, whatever its answer: a mix of routes and outcomes, ten on each process, at once.
    const request = (svc: SpawnedService, i: number) =>
      i % 2 === 0
        ? anon(svc, '/platform/v1/auth/login', { email: email('nobody'), password: 'wrong-password' }, ip)
        : anon(svc, '/platform/v1/auth/verify', { token: `usr_nope.${randomBytes(8).toString('hex')}` }, ip)
    const answers = await Promise.all([
      ...Array.from({ length: 10 }, (_, i) => request(p1, i)),
      ...Array.from({ length: 10 }, (_, i) => request(p2, i)),
    ])
    const codes = answers.map((r) => `${r.status} ${r.body?.error?.code}`)
    t.same(
      codes,
      Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? '401 invalid_credentials' : '400 invalid_verification_token')),
      'the first 20 POSTs (10 per process) are answered normally',
    )

    const over1 = await anon(p1, '/platform/v1/auth/login', { email: email('nobody'), password: 'wrong-password' }, ip)
    t.equal(over1.status, 429, 'the 21st POST, on process 1, is refused')
    t.equal(over1.body?.error?.code, 'rate_limit_exceeded')
    t.match(over1.headers.get('retry-after'), /^[1-9]\d*$/, 'with Retry-After in seconds')
    const over2 = await anon(p2, '/platform/v1/auth/forgot', { email: email('nobody') }, ip)
    t.equal(over2.status, 429, 'and the next one, on process 2, too')
    t.equal(over2.body?.error?.code, 'rate_limit_exceeded')

    const other = await anon(p2, '/platform/v1/auth/login', { email: email('nobody'), password: 'wrong-password' }, nextIp())
    t.equal(other.status, 401, 'another address is not limited')
  })

  await t.test('the login lockout counts failures from both processes', async (t) => {
    const u = await verifiedUser(p1, smtp, 'lock')
    const failures: string[] = []
    for (const svc of [p1, p1, p1, p1, p1, p2, p2, p2, p2, p2]) {
      const res = await anon(svc, '/platform/v1/auth/login', { email: u.email, password: `${u.password}-wrong` }, nextIp())
      failures.push(`${res.status} ${res.body?.error?.code}`)
    }
    t.same(
      failures,
      Array.from({ length: 10 }, () => '401 invalid_credentials'),
      '10 wrong passwords, 5 on each process, each refused as wrong',
    )

    const onP2 = await anon(p2, '/platform/v1/auth/login', { email: u.email, password: u.password }, nextIp())
    t.equal(onP2.status, 429, 'the right password on process 2 is refused: the account is locked')
    t.equal(onP2.body?.error?.code, 'account_locked')
    t.match(onP2.headers.get('retry-after'), /^[1-9]\d*$/, 'with Retry-After in seconds')
    t.ok(Number(onP2.headers.get('retry-after')) <= 15 * 60, 'no longer than the 15-minute window')
    t.equal(onP2.headers.get('set-cookie'), null, 'no session is issued')

    const onP1 = await anon(p1, '/platform/v1/auth/login', { email: u.email, password: u.password }, nextIp())
    t.equal(onP1.status, 429, 'and on process 1 as well')
    t.equal(onP1.body?.error?.code, 'account_locked')
    t.match(onP1.headers.get('retry-after'), /^[1-9]\d*$/)
  })

  await t.test('rotation and revocation on one process apply on the other', async (t) => {
    const u = await verifiedUser(p1, smtp, 'keys')
    const login = await anon(p1, '/platform/v1/auth/login', { email: u.email, password: u.password }, nextIp())
    t.equal(login.status, 200, JSON.stringify(login.body))
    const jwt = sessionFrom(login)
    const jobs = (svc: SpawnedService, key: string) => httpRequest(svc.url, key, 'GET', '/jobsvc/v1/jobs')

    t.equal((await jobs(p2, u.apiKey)).status, 200, 'the first key works on process 2 (which now holds the project)')

    const rotated = await withJwt(p1, 'POST', `/platform/v1/projects/${u.projectId}/keys/rotate`, jwt)
    t.equal(rotated.status, 200, JSON.stringify(rotated.body))
    const newKey = rotated.body.api_key as string
    t.match(newKey, /^sv_live_sk_[0-9a-f]{32}$/)
    const newOnP2 = await jobs(p2, newKey)
    t.equal(newOnP2.status, 200, `the new key works on process 2 at once (${JSON.stringify(newOnP2.body)})`)
    t.equal((await jobs(p2, u.apiKey)).status, 200, 'the old key still works on process 2 (grace)')
    t.equal((await jobs(p1, newKey)).status, 200, 'the new key works on process 1')
    t.equal((await jobs(p1, u.apiKey)).status, 200, 'the old key works on process 1 (grace)')

    // Back-to-back rotations on process 1: each new key works on process 2 at once, the previous
    // one stays in grace and the one before it is dropped, on process 2 as well.
    const keys = [u.apiKey, newKey]
    for (let round = 0; round < 3; round++) {
      const again = await withJwt(p1, 'POST', `/platform/v1/projects/${u.projectId}/keys/rotate`, jwt)
      t.equal(again.status, 200, JSON.stringify(again.body))
      keys.push(again.body.api_key as string)
      const [current, previous, dropped] = [keys.at(-1)!, keys.at(-2)!, keys.at(-3)!]
      const statuses = await Promise.all([jobs(p2, current), jobs(p2, previous), jobs(p2, dropped)]).then((r) => r.map((x) => x.status))
      t.same(
        statuses,
        [200, 200, 401],
        `rotation ${round + 2}: on process 2 the new key works at once, the previous is in grace, the older is dropped`,
      )
    }
    const [current, previous] = [keys.at(-1)!, keys.at(-2)!]

    const revoked = await withJwt(p1, 'DELETE', `/platform/v1/projects/${u.projectId}/keys/revoke`, jwt)
    t.equal(revoked.status, 200, JSON.stringify(revoked.body))
    const answeredAt = Date.now()
    let observedMs = -1
    const probes: string[] = []
    const statuses = await eventually(
      async () => {
        const [n, o] = await Promise.all([jobs(p2, current), jobs(p2, previous)])
        probes.push(`${n.status}/${o.status}`)
        if (n.status === 401 && o.status === 401) {
          observedMs = Date.now() - answeredAt
          return [n.body?.error?.code, o.body?.error?.code]
        }
        return null
      },
      2_000,
      'the newest and the grace key to be refused on process 2 after the revocation',
    ).catch((err: Error) => err.message)
    t.same(statuses, ['unauthorized', 'unauthorized'], 'both keys are 401 unauthorized on process 2 shortly after the revocation')
    t.comment(`revocation observed on process 2 ${observedMs} ms after process 1 answered; probes (newest/grace key): ${probes.join(' ')}`)
    t.equal((await jobs(p1, current)).status, 401, 'the newest key is refused on process 1')
    t.equal((await jobs(p1, previous)).status, 401, 'the grace key is refused on process 1')
    t.equal((await jobs(p2, current)).status, 401, 'and it stays refused on process 2')
    const late = await withJwt(p2, 'POST', `/platform/v1/projects/${u.projectId}/keys/rotate`, jwt)
    t.equal(`${late.status} ${late.body?.error?.code}`, '409 key_revoked', 'process 2 refuses to rotate a revoked project')
  })
})
