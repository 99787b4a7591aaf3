import { randomInt } from 'node:crypto'
import t from 'tap'
import { scryptRuns } from '../../services/use-cases/platform/passwords.ts'
import { isError } from '../support/jobs-api.ts'
import { newVerifiedUser, sessionFrom, startPlatformHarness, totpCode } from '../support/platform.ts'

// Issue 23, item 7: work is counted where it is done. change-password and 2fa/disable ran scrypt
// on every call with no limit: a stolen session could guess the password at scrypt's pace, and a
// burst of them queued seconds of work on libuv's pool ahead of everything else. They now take a
// slot of the account's failed-login window (as a login does), and every scrypt run takes a place
// among a bounded number in flight per process (429 past it). The anonymous per-IP limit counts an
// IPv6 client by its /64, and an IPv4-mapped address as the IPv4 address.

const h = await startPlatformHarness(t, import.meta.filename, { roles: ['api'] })
const auth = '/platform/v1/auth'
const changePassword = (jwt: string, current: string, next: string) =>
  h.platform('POST', `${auth}/change-password`, { current_password: current, new_password: next }, { jwt })
const disableTwoFactor = (jwt: string, password: string, code: string) => h.platform('POST', `${auth}/2fa/disable`, { password, code }, { jwt })
const logIn = (email: string, password: string) => h.platform('POST', `${auth}/login`, { email, password })

t.test("wrong passwords on change-password and 2fa/disable count in the account's failed-login window", async (t) => {
  const user = await newVerifiedUser(h)
  const setup = await h.platform('POST', `${auth}/2fa/setup`, undefined, { jwt: user.jwt })
  t.equal(setup.status, 200)
  const verified = await h.platform('POST', `${auth}/2fa/verify`, { code: totpCode(setup.body.secret) }, { jwt: user.jwt })
  t.equal(verified.status, 200)
  for (let i = 0; i < 5; i++) {
    const change = await changePassword(user.jwt, `wrong-${i}`, 'a-new-password-1')
    isError(t, change, 401, 'invalid_credentials', `change-password, wrong password ${i + 1}`)
    const disable = await disableTwoFactor(user.jwt, `wrong-${i}`, '000000')
    isError(t, disable, 401, 'invalid_credentials', `2fa/disable, wrong password ${i + 1}`)
  }
  const locked = await changePassword(user.jwt, user.password, 'a-new-password-1')
  isError(t, locked, 429, 'account_locked', 'the eleventh check, even with the right password')
  t.ok(Number(locked.headers.get('retry-after')) > 0, 'Retry-After')
  isError(t, await disableTwoFactor(user.jwt, user.password, totpCode(setup.body.secret)), 429, 'account_locked', '2fa/disable too')
  isError(t, await logIn(user.email, user.password), 429, 'account_locked', 'and the login: one window')
})

t.test('a right password gives its slot back', async (t) => {
  const user = await newVerifiedUser(h)
  let current = user.password
  for (let i = 0; i < 11; i++) {
    const next = `right-password-${i}`
    const change = await changePassword(user.jwt, current, next)
    t.equal(change.status, 200, `change ${i + 1}: not counted as a failure`)
    user.jwt = sessionFrom(change)
    current = next
  }
})

t.test('past the scrypt runs in flight in this process, password checks answer 429 at once', async (t) => {
  const user = await newVerifiedUser(h)
  const taken: Array<() => void> = []
  t.teardown(() => taken.forEach((exit) => exit()))
  for (let exit = scryptRuns.tryEnter(); exit !== null; exit = scryptRuns.tryEnter()) taken.push(exit)
  t.equal(taken.length, 16, 'password_hashes_in_flight: 16')
  const change = await changePassword(user.jwt, user.password, 'a-new-password-2')
  isError(t, change, 429, 'rate_limit_exceeded', 'change-password')
  t.equal(change.headers.get('retry-after'), '1')
  isError(t, await logIn(user.email, user.password), 429, 'rate_limit_exceeded', 'login')
  isError(t, await logIn('nobody@example.com', 'x'), 429, 'rate_limit_exceeded', 'login of nobody')
  taken.pop()!()
  const after = await h.platform(
    'POST',
    `${auth}/change-password`,
    { current_password: user.password, new_password: 'a-new-password-2' },
    { jwt: user.jwt },
  )
  t.equal(after.status, 200, 'with a place free it runs; the refusals were not failed logins')
  taken.splice(0).forEach((exit) => exit())
  t.equal((await logIn('nobody@example.com', 'x')).status, 401, 'the decoy is made again')
})

t.test('the anonymous limit counts an IPv6 client by its /64, an IPv4-mapped one as IPv4', async (t) => {
  const post = (ip: string) => h.platform('POST', `${auth}/login`, {}, { ip })
  const prefix = `2001:db8:${randomInt(0, 0xffff).toString(16)}:${randomInt(0, 0xffff).toString(16)}`
  for (let i = 0; i < 20; i++) {
    const res = await post(i % 2 === 0 ? `${prefix}::${i + 1}` : `${prefix}:ffff:${i}:0:1`)
    t.equal(res.status, 400, `POST ${i + 1}, counted`)
  }
  const over = await post(`${prefix}:1234:5678:9abc:def0`)
  isError(t, over, 429, 'rate_limit_exceeded', 'a third address of the same /64')
  t.ok(Number(over.headers.get('retry-after')) > 0, 'Retry-After')
  const nextNetwork = `2001:db8:${randomInt(0, 0xffff).toString(16)}:${randomInt(0, 0xffff).toString(16)}::1`
  t.equal((await post(nextNetwork)).status, 400, 'another /64 has its own count')

  const v4 = `198.51.${randomInt(0, 255)}.${randomInt(1, 255)}`
  for (let i = 0; i < 20; i++) t.equal((await post(i % 2 === 0 ? v4 : `::ffff:${v4}`)).status, 400, `IPv4 POST ${i + 1}`)
  isError(t, await post(v4), 429, 'rate_limit_exceeded', 'an IPv4-mapped address counts as its IPv4 address')
})
