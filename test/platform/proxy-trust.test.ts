import { randomInt } from 'node:crypto'
import t from 'tap'
import * as api from '../../services/roles/api/index.ts'
import { ConfigError, loadConfig, type Config } from '../../services/infrastructure/config.ts'
import { httpRequest, startHarness, type HttpResponse } from '../support/harness.ts'

/**
 * TRUST_PROXY (CONTRACT.md): which `X-Forwarded-For` entry is the client. A proxy that appends
 * leaves the client's own header in front of the address it saw, so only the entries the
 * trusted hops wrote may be believed; the per-IP limit of the anonymous routes shows which
 * address the service took. The service's config comes from loadConfig, as `npm start` reads
 * the environment.
 */

const env = (trustProxy: string) => ({ TRUST_PROXY: trustProxy, JOBSVC_SECRET: 'proxy-test-secret-proxy-test-secret' })
const trustOf = (trustProxy: string) => loadConfig(env(trustProxy)).trustProxy

t.test('TRUST_PROXY forms: false, a hop count, a list of proxy addresses, or true', async (t) => {
  t.equal(trustOf('false'), false)
  t.equal(trustOf('0'), false, '0 hops trusts nobody')
  t.equal(trustOf('true'), true, 'true keeps its meaning: every hop')
  t.equal(trustOf('1'), 1, 'a number is a hop count, so 1 is one proxy, not true')
  t.equal(trustOf('2'), 2)
  t.strictSame(
    trustOf(' 10.0.0.7, 10.1.0.0/16,::1 ,fd00::/8,loopback'),
    ['10.0.0.7', '10.1.0.0/16', '::1', 'fd00::/8', 'loopback'],
    'a comma-separated list of addresses and CIDRs',
  )
  t.equal(loadConfig({ JOBSVC_SECRET: 'proxy-test-secret-proxy-test-secret' }).trustProxy, false, 'the default is false')
  for (const bad of ['yes', '10.0.0.0/33', '10.0.0', 'proxy.example.com', '1.5', '-1', '10.0.0.1,,']) {
    t.throws(() => loadConfig(env(bad)), ConfigError, `${JSON.stringify(bad)} is refused at start`)
    try {
      loadConfig(env(bad))
    } catch (err) {
      t.match((err as Error).message, /^TRUST_PROXY/, `the message names TRUST_PROXY (${(err as Error).message})`)
    }
  }
})

t.test('behind an appending proxy, a hop count or the proxy list takes the address the proxy saw', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api'] })
  const startApi = async (trustProxy: Config['trustProxy']) => {
    const role = await api.start({ ...h.runtime, config: { ...h.config, trustProxy } })
    t.teardown(role.stop)
    return role.address
  }
  // What a proxy that appends forwards: the client's own header first, the address it saw last.
  const anonymousPost = (url: string, clientIp: string): Promise<HttpResponse> =>
    httpRequest(
      url,
      null,
      'POST',
      '/platform/v1/auth/verify',
      { token: 'garbage' },
      { 'x-forwarded-for': `198.51.100.${randomInt(1, 255)}, ${clientIp}` },
    )

  const cases: Array<[string, string]> = [
    ['TRUST_PROXY=1 (one proxy)', '1'],
    ['TRUST_PROXY=127.0.0.1 (the proxy, which the tests connect from)', '127.0.0.1'],
    ['TRUST_PROXY=127.0.0.0/8', '127.0.0.0/8'],
  ]
  for (const [index, [what, value]] of cases.entries()) {
    const url = await startApi(trustOf(value))
    const clientIp = `203.0.113.${11 + index}`
    const statuses: number[] = []
    for (let i = 0; i < 20; i++) statuses.push((await anonymousPost(url, clientIp)).status)
    t.strictSame(statuses, Array(20).fill(400), `${what}: 20 POSTs with a forged first entry each are answered`)
    const over = await anonymousPost(url, clientIp)
    t.equal(over.status, 429, `${what}: the 21st from the same client is 429 whatever it forges`)
    t.equal(over.body?.error?.code, 'rate_limit_exceeded')
    const other = await anonymousPost(url, `203.0.113.${31 + index}`)
    t.equal(other.status, 400, `${what}: another client behind the same proxy is still answered (the proxy's own address is not the client)`)
  }

  // true trusts every hop: the forged left-most entry is taken as the client (unsafe behind a
  // proxy that appends, hence "development and tests only").
  const url = await startApi(trustOf('true'))
  const clientIp = '203.0.113.21'
  const statuses: number[] = []
  for (let i = 0; i < 21; i++) {
    const res = await httpRequest(
      url,
      null,
      'POST',
      '/platform/v1/auth/verify',
      { token: 'garbage' },
      { 'x-forwarded-for': `192.0.2.${i + 1}, ${clientIp}` },
    )
    statuses.push(res.status)
  }
  t.strictSame(statuses, Array(21).fill(400), 'TRUST_PROXY=true: each forged first entry is a new client, so 21 POSTs pass')
})
