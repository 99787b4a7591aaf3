import { randomBytes } from 'node:crypto'
import t, { type Test } from 'tap'
import { eventually, httpRequest, type HttpResponse } from '../support/harness.ts'
import {
  freshEmail,
  freshIp,
  joinProject,
  newVerifiedUser,
  sessionFrom,
  startPlatformHarness,
  totpCode,
  type VerifiedUser,
} from '../support/platform.ts'
import { tokenFromMail } from '../support/smtp-sink.ts'

// The dashboard's project, key and team routes, and the account export and deletion, over HTTP
// against the whole service (spec, Authentication 7-9 and Dashboard routes; README for the shapes
// the spec leaves open). Key checks go through the real service surface, GET /jobsvc/v1/jobs.
const h = await startPlatformHarness(t, import.meta.filename)

const hourMs = 60 * 60 * 1000
const dayMs = 24 * hourMs
const keyPattern = /^sv_live_sk_[0-9a-f]{32}$/
const unknownProjectId = `prj_${'0'.repeat(26)}`
const unknownUserId = `usr_${'0'.repeat(26)}`

const realClock = h.runtime.now
/** Moves the service's clock (every service reads deps.now() per call); `restoreClock` undoes it. */
const shiftClock = (ms: number) => {
  h.runtime.now = () => new Date(Date.now() + ms)
}
const restoreClock = () => {
  h.runtime.now = realClock
}
t.teardown(restoreClock)

const keyStatus = async (key: string) => (await httpRequest(h.url, key, 'GET', '/jobsvc/v1/jobs')).status
const projectPath = (projectId: string, rest = '') => `/platform/v1/projects/${projectId}${rest}`
const asUser = (user: { jwt: string }) => ({ jwt: user.jwt })

function isError(t: Test, res: HttpResponse, status: number, code: string, what: string): void {
  t.equal(res.status, status, `${what}: status ${status} (got ${res.status} ${JSON.stringify(res.body)})`)
  t.equal(res.body?.error?.code, code, `${what}: code ${code}`)
}

function isIsoDate(t: Test, value: unknown, what: string): void {
  t.type(value, 'string', `${what} is a string`)
  t.ok(typeof value === 'string' && /^\d{4}-\d\d-\d\dT/.test(value) && !Number.isNaN(Date.parse(value)), `${what} is an ISO date-time`)
}

const join = (owner: VerifiedUser, projectId: string, role: string) => joinProject(h, owner, projectId, role)

interface Team {
  owner: VerifiedUser
  projectId: string
  admin: VerifiedUser
  member: VerifiedUser
  viewer: VerifiedUser
  /** A verified user with projects of their own, not in this team. */
  outsider: VerifiedUser
}

async function newTeam(): Promise<Team> {
  const owner = await newVerifiedUser(h)
  const projectId = owner.projectId
  return {
    owner,
    projectId,
    admin: await join(owner, projectId, 'admin'),
    member: await join(owner, projectId, 'member'),
    viewer: await join(owner, projectId, 'viewer'),
    outsider: await newVerifiedUser(h),
  }
}

/** A team shared by the tests that only read it or are refused (nothing here revokes or removes). */
const shared = await newTeam()

async function activityOf(projectId: string) {
  return h.runtime.sql<
    { kind: string; project_id: string | null; user_id: string | null; target_type: string; target_id: string | null; metadata: string | null }[]
  >`
    SELECT kind, project_id, user_id, target_type, target_id, metadata FROM activity WHERE project_id = ${projectId} ORDER BY seq, id`
}

t.test('key rotation: the new key works at once, the old one for 24 hours', async (t) => {
  t.teardown(restoreClock)
  const u = await newVerifiedUser(h)
  const oldKey = u.apiKey
  t.equal(await keyStatus(oldKey), 200, 'the first key works')

  const rotated = await h.platform('POST', projectPath(u.projectId, '/keys/rotate'), undefined, asUser(u))
  t.equal(rotated.status, 200, JSON.stringify(rotated.body))
  t.strictSame(Object.keys(rotated.body).sort(), ['api_key', 'rotated_at'])
  t.match(rotated.body.api_key, keyPattern, 'sv_live_sk_ + 32 lowercase hex')
  t.equal(rotated.body.api_key.length, 43)
  t.not(rotated.body.api_key, oldKey, 'a new key')
  isIsoDate(t, rotated.body.rotated_at, 'rotated_at')
  const newKey: string = rotated.body.api_key

  t.equal(await keyStatus(newKey), 200, 'the new key works at once')
  t.equal(await keyStatus(oldKey), 200, 'the old key works in its grace window')

  const view = await h.platform('GET', projectPath(u.projectId), undefined, asUser(u))
  t.equal(view.body.api_key_prefix, newKey.slice(0, 24), 'the project shows the new key prefix')
  t.equal(view.body.keys_revoked_at, null)

  const fresh = await h.platform('POST', '/platform/v1/auth/login', { email: u.email, password: u.password })
  t.equal(fresh.body.projects[0].api_key_prefix, newKey.slice(0, 24), 'login lists the new prefix')

  shiftClock(dayMs - 60_000)
  t.equal(await keyStatus(oldKey), 200, 'the old key still works a minute before the 24 hours end')
  shiftClock(dayMs + 1000)
  const expired = await httpRequest(h.url, oldKey, 'GET', '/jobsvc/v1/jobs')
  isError(t, expired, 401, 'unauthorized', 'the old key 24 h + 1 s after the rotation')
  t.equal(await keyStatus(newKey), 200, 'the new key keeps working')
  restoreClock()
  t.equal(await keyStatus(newKey), 200, 'the new key works with the real clock')
})

t.test('back-to-back rotations drop the older grace key and give the previous one a fresh 24 hours', async (t) => {
  t.teardown(restoreClock)
  const u = await newVerifiedUser(h)
  const keyA = u.apiKey
  const first = await h.platform('POST', projectPath(u.projectId, '/keys/rotate'), undefined, asUser(u))
  t.equal(first.status, 200, JSON.stringify(first.body))
  const keyB: string = first.body.api_key

  // Twelve hours later A would still be inside its own window; the second rotation must drop it.
  shiftClock(12 * hourMs)
  const second = await h.platform('POST', projectPath(u.projectId, '/keys/rotate'), undefined, asUser(u))
  t.equal(second.status, 200, JSON.stringify(second.body))
  const keyC: string = second.body.api_key
  t.ok(Date.parse(second.body.rotated_at) > Date.now() + 11 * hourMs, 'rotated_at comes from the service clock')
  t.not(keyC, keyB)
  isError(t, await httpRequest(h.url, keyA, 'GET', '/jobsvc/v1/jobs'), 401, 'unauthorized', 'A after the second rotation')
  t.equal(await keyStatus(keyB), 200, 'B works (grace)')
  t.equal(await keyStatus(keyC), 200, 'C works (active)')

  // 35 h after the first rotation: past B's first window, inside its fresh one.
  shiftClock(12 * hourMs + 23 * hourMs)
  t.equal(await keyStatus(keyB), 200, 'B works 23 h after the second rotation (35 h after the first)')
  t.equal(await keyStatus(keyA), 401, 'A stays rejected')
  shiftClock(12 * hourMs + dayMs + 1000)
  t.equal(await keyStatus(keyB), 401, 'B is rejected 24 h + 1 s after the second rotation')
  t.equal(await keyStatus(keyC), 200, 'C works')
})

t.test('concurrent rotations are serialised: every caller gets 200 and a key that works', async (t) => {
  // Two admins (or a double click) rotating at the same moment: the aggregate serialises the
  // rotations, so each caller should get its key, and afterwards exactly the last two work.
  const u = await newVerifiedUser(h)
  const statuses: number[] = []
  const failures: unknown[] = []
  let lastRound: HttpResponse[] = []
  for (let round = 0; round < 5; round++) {
    lastRound = await Promise.all([1, 2, 3].map(() => h.platform('POST', projectPath(u.projectId, '/keys/rotate'), undefined, asUser(u))))
    for (const r of lastRound) {
      statuses.push(r.status)
      if (r.status !== 200) failures.push(r.body)
    }
  }
  t.strictSame(statuses, Array(15).fill(200), `15 concurrent rotations (5 rounds of 3) all answer 200; failures: ${JSON.stringify(failures)}`)
  const keys = lastRound.filter((r) => r.status === 200).map((r) => r.body.api_key as string)
  t.equal(new Set(keys).size, keys.length, 'every answered key is different')
  const working = (await Promise.all(keys.map(keyStatus))).filter((s) => s === 200).length
  t.equal(working, 2, 'of the last round of 3 answered keys, the last two rotations (active and grace) work')
  t.equal(await keyStatus(u.apiKey), 401, 'the original key was dropped')
  const view = await h.platform('GET', projectPath(u.projectId), undefined, asUser(u))
  t.ok(
    keys.some((k) => k.startsWith(view.body.api_key_prefix)),
    'the active key is one that a caller received',
  )
})

t.test('key routes need a session and the role admin or owner', async (t) => {
  const { owner, projectId, admin, member, viewer, outsider } = shared
  for (const [method, route] of [
    ['POST', '/keys/rotate'],
    ['DELETE', '/keys/revoke'],
  ] as const) {
    const path = projectPath(projectId, route)
    isError(t, await h.platform(method, path), 401, 'unauthorized', `${route} without a session`)
    isError(t, await h.platform(method, path, undefined, { jwt: 'not.a.jwt' }), 401, 'unauthorized', `${route} with a garbage JWT`)
    isError(
      t,
      await h.platform(method, path, undefined, { jwt: owner.jwt.slice(0, -3) + 'AAA' }),
      401,
      'unauthorized',
      `${route} with a tampered JWT`,
    )
    isError(t, await h.platform(method, path, undefined, asUser(member)), 403, 'forbidden', `${route} by a member`)
    isError(t, await h.platform(method, path, undefined, asUser(viewer)), 403, 'forbidden', `${route} by a viewer`)
    isError(t, await h.platform(method, path, undefined, asUser(outsider)), 404, 'project_not_found', `${route} by a non-member`)
    isError(
      t,
      await h.platform(method, projectPath(unknownProjectId, route), undefined, asUser(owner)),
      404,
      'project_not_found',
      `${route} on an unknown project`,
    )
    isError(t, await h.platform(method, projectPath('nope', route), undefined, asUser(owner)), 404, 'project_not_found', `${route} on a malformed id`)
  }
  t.equal(await keyStatus(owner.apiKey), 200, 'the refusals changed nothing: the first key is still active')

  const byAdmin = await h.platform('POST', projectPath(projectId, '/keys/rotate'), undefined, asUser(admin))
  t.equal(byAdmin.status, 200, `an admin rotates: ${JSON.stringify(byAdmin.body)}`)
  t.match(byAdmin.body.api_key, keyPattern)
  t.equal(await keyStatus(byAdmin.body.api_key), 200)

  // The session may come as the sv_jwt cookie instead of a Bearer header.
  const byCookie = await h.platform('POST', projectPath(projectId, '/keys/rotate'), undefined, { cookie: `sv_jwt=${owner.jwt}` })
  t.equal(byCookie.status, 200, `the owner rotates with the cookie: ${JSON.stringify(byCookie.body)}`)
  t.equal(await keyStatus(byCookie.body.api_key), 200)
  t.equal(await keyStatus(byAdmin.body.api_key), 200, 'the previous key is in grace')
  t.equal(await keyStatus(owner.apiKey), 401, 'the key before that was dropped')
})

t.test('revocation rejects every key at once and is permanent', async (t) => {
  const u = await newVerifiedUser(h)
  const keyA = u.apiKey
  const rotated = await h.platform('POST', projectPath(u.projectId, '/keys/rotate'), undefined, asUser(u))
  t.equal(rotated.status, 200)
  const keyB: string = rotated.body.api_key
  t.equal(await keyStatus(keyA), 200, 'A in grace before the revocation')
  t.equal(await keyStatus(keyB), 200, 'B active before the revocation')

  const revoked = await h.platform('DELETE', projectPath(u.projectId, '/keys/revoke'), undefined, asUser(u))
  t.equal(revoked.status, 200, JSON.stringify(revoked.body))
  t.strictSame(Object.keys(revoked.body), ['revoked_at'])
  isIsoDate(t, revoked.body.revoked_at, 'revoked_at')

  isError(t, await httpRequest(h.url, keyB, 'GET', '/jobsvc/v1/jobs'), 401, 'unauthorized', 'the active key right after revocation')
  isError(t, await httpRequest(h.url, keyA, 'GET', '/jobsvc/v1/jobs'), 401, 'unauthorized', 'the grace key right after revocation')
  t.equal((await httpRequest(h.url, keyB, 'POST', '/jobsvc/v1/jobs', { job_type: 'x' })).status, 401, 'job creation refused too')

  const view = await h.platform('GET', projectPath(u.projectId), undefined, asUser(u))
  t.equal(view.status, 200)
  t.equal(view.body.keys_revoked_at, revoked.body.revoked_at, 'the project shows when its keys were revoked')
  t.equal(view.body.api_key_prefix, null, 'no active key prefix')

  isError(
    t,
    await h.platform('DELETE', projectPath(u.projectId, '/keys/revoke'), undefined, asUser(u)),
    409,
    'already_revoked',
    'a second revocation',
  )
  isError(
    t,
    await h.platform('POST', projectPath(u.projectId, '/keys/rotate'), undefined, asUser(u)),
    409,
    'key_revoked',
    'a rotation after revocation',
  )
  t.equal(await keyStatus(keyB), 401, 'still rejected after the refused rotation')
})

t.test('projects: list, create, rename, delete', async (t) => {
  const u = await newVerifiedUser(h)
  isError(t, await h.platform('GET', '/platform/v1/projects'), 401, 'unauthorized', 'list without a session')

  const listed = await h.platform('GET', '/platform/v1/projects', undefined, asUser(u))
  t.equal(listed.status, 200, JSON.stringify(listed.body))
  t.equal(listed.body.data.length, 1)
  const first = listed.body.data[0]
  t.strictSame(Object.keys(first).sort(), ['api_key_prefix', 'created_at', 'id', 'keys_revoked_at', 'name', 'plan', 'role', 'updated_at'])
  t.match(first, { id: u.projectId, role: 'owner', plan: 'free', api_key_prefix: u.apiKey.slice(0, 24), keys_revoked_at: null })
  t.notOk(JSON.stringify(listed.body).includes(u.apiKey), 'no plaintext key in the list')

  const created = await h.platform('POST', '/platform/v1/projects', { name: '  Billing  ', plan: 'pro' }, asUser(u))
  t.equal(created.status, 201, JSON.stringify(created.body))
  t.match(created.body, { name: 'Billing', plan: 'pro', role: 'owner', keys_revoked_at: null })
  t.match(created.body.id, /^prj_[0-9a-z]{26}$/)
  t.match(created.body.api_key, keyPattern)
  t.equal(created.body.api_key_prefix, created.body.api_key.slice(0, 24))
  t.equal(await keyStatus(created.body.api_key), 200, 'the new project key works at once')
  const secondId: string = created.body.id

  const boundary = await h.platform('POST', '/platform/v1/projects', { name: 'n'.repeat(100) }, asUser(u))
  t.equal(boundary.status, 201, 'a 100-character name is accepted')
  t.equal(boundary.body.plan, 'free', "the plan defaults to the user's plan")

  for (const [what, body] of [
    ['an empty name', { name: '' }],
    ['a blank name', { name: '   ' }],
    ['a 101-character name', { name: 'n'.repeat(101) }],
    ['no name', {}],
    ['a number as name', { name: 42 }],
    ['the enterprise plan', { name: 'x', plan: 'enterprise' }],
    ['a NUL character in the name', { name: 'a\u0000b' }],
  ] as const) {
    isError(t, await h.platform('POST', '/platform/v1/projects', body, asUser(u)), 400, 'invalid_request', `create with ${what}`)
  }

  const all = await h.platform('GET', '/platform/v1/projects', undefined, asUser(u))
  t.strictSame(
    all.body.data.map((p: { id: string }) => p.id),
    [u.projectId, secondId, boundary.body.id],
    'three projects in creation order',
  )

  const renamed = await h.platform('PATCH', projectPath(u.projectId), { name: 'Renamed' }, asUser(u))
  t.equal(renamed.status, 200, JSON.stringify(renamed.body))
  t.match(renamed.body, { id: u.projectId, name: 'Renamed', role: 'owner' })
  t.ok(Date.parse(renamed.body.updated_at) >= Date.parse(renamed.body.created_at))
  t.equal((await h.platform('GET', projectPath(u.projectId), undefined, asUser(u))).body.name, 'Renamed', 'GET shows the new name')
  isError(t, await h.platform('PATCH', projectPath(u.projectId), { name: '' }, asUser(u)), 400, 'invalid_request', 'rename to empty')
  isError(t, await h.platform('PATCH', projectPath(u.projectId), { name: 'x'.repeat(101) }, asUser(u)), 400, 'invalid_request', 'rename too long')
  isError(t, await h.platform('PATCH', projectPath(u.projectId), { name: 'x' }), 401, 'unauthorized', 'rename without a session')

  const deleted = await h.platform('DELETE', projectPath(secondId), undefined, asUser(u))
  t.equal(deleted.status, 200, JSON.stringify(deleted.body))
  t.strictSame(Object.keys(deleted.body), ['deleted_at'])
  isIsoDate(t, deleted.body.deleted_at, 'deleted_at')
  isError(t, await httpRequest(h.url, created.body.api_key, 'GET', '/jobsvc/v1/jobs'), 401, 'unauthorized', "the deleted project's key")
  isError(t, await h.platform('GET', projectPath(secondId), undefined, asUser(u)), 404, 'project_not_found', 'GET of the deleted project')
  isError(t, await h.platform('DELETE', projectPath(secondId), undefined, asUser(u)), 404, 'project_not_found', 'deleting it again')
  isError(t, await h.platform('POST', projectPath(secondId, '/keys/rotate'), undefined, asUser(u)), 404, 'project_not_found', 'rotating its key')
  const after = await h.platform('GET', '/platform/v1/projects', undefined, asUser(u))
  t.notOk(
    after.body.data.some((p: { id: string }) => p.id === secondId),
    'the deleted project is no longer listed',
  )

  t.equal((await h.platform('DELETE', projectPath(boundary.body.id), undefined, asUser(u))).status, 200)
  isError(t, await h.platform('DELETE', projectPath(u.projectId), undefined, asUser(u)), 409, 'last_project', "deleting the user's only project")
  t.equal((await h.platform('GET', projectPath(u.projectId), undefined, asUser(u))).status, 200, 'the only project still exists')
  t.equal(await keyStatus(u.apiKey), 200, 'and its key still works')
})

t.test('rename and delete need the right role', async (t) => {
  const { projectId, admin, member, viewer, outsider, owner } = shared
  isError(t, await h.platform('PATCH', projectPath(projectId), { name: 'By member' }, asUser(member)), 403, 'forbidden', 'rename by a member')
  isError(t, await h.platform('PATCH', projectPath(projectId), { name: 'By viewer' }, asUser(viewer)), 403, 'forbidden', 'rename by a viewer')
  isError(
    t,
    await h.platform('PATCH', projectPath(projectId), { name: 'By outsider' }, asUser(outsider)),
    404,
    'project_not_found',
    'rename by a non-member',
  )
  const byAdmin = await h.platform('PATCH', projectPath(projectId), { name: 'Team project' }, asUser(admin))
  t.equal(byAdmin.status, 200, JSON.stringify(byAdmin.body))
  t.match(byAdmin.body, { name: 'Team project', role: 'admin' }, 'the view carries the caller role')
  const seenByMember = await h.platform('GET', projectPath(projectId), undefined, asUser(member))
  t.match(seenByMember.body, { name: 'Team project', role: 'member' })

  isError(t, await h.platform('DELETE', projectPath(projectId), undefined, asUser(admin)), 403, 'forbidden', 'delete by an admin')
  isError(t, await h.platform('DELETE', projectPath(projectId), undefined, asUser(member)), 403, 'forbidden', 'delete by a member')
  isError(t, await h.platform('DELETE', projectPath(projectId), undefined, asUser(outsider)), 404, 'project_not_found', 'delete by a non-member')
  t.equal((await h.platform('GET', projectPath(projectId), undefined, asUser(owner))).status, 200, 'the project survived')
})

t.test('an invitation is e-mailed and accepted by the invited address', async (t) => {
  const owner = await newVerifiedUser(h)
  const project = (await h.platform('GET', projectPath(owner.projectId), undefined, asUser(owner))).body
  const email = freshEmail('invitee')

  const invited = await h.platform(
    'POST',
    projectPath(owner.projectId, '/members'),
    { email: `  ${email.toUpperCase()} `, role: 'member' },
    asUser(owner),
  )
  t.equal(invited.status, 201, JSON.stringify(invited.body))
  t.strictSame(Object.keys(invited.body).sort(), ['email', 'expires_at', 'invite_id', 'invited_at', 'invited_by', 'role'])
  t.match(invited.body.invite_id, /^inv_[0-9a-z]{26}$/)
  t.equal(invited.body.email, email, 'the address is normalised')
  t.equal(invited.body.role, 'member')
  t.equal(invited.body.invited_by, owner.userId)
  isIsoDate(t, invited.body.invited_at, 'invited_at')
  isIsoDate(t, invited.body.expires_at, 'expires_at')
  const ttl = Date.parse(invited.body.expires_at) - Date.parse(invited.body.invited_at)
  t.ok(Math.abs(ttl - 7 * dayMs) < 5000, `the invitation lasts 7 days (${ttl} ms)`)

  const mail = await h.smtp.next(email, /invited/i)
  t.equal(mail.subject, 'You are invited to join a project on jobsvc', 'the subject is the service’s own words')
  t.match(mail.text, `the jobsvc project named "${project.name}" as member`)
  t.match(mail.text, /as member/)
  t.match(mail.text, /https:\/\/dash\.example\.test\/accept-invite\?token=/)
  const token = tokenFromMail(mail)

  const pending = await h.platform('GET', projectPath(owner.projectId, '/members'), undefined, asUser(owner))
  t.equal(pending.status, 200)
  t.equal(pending.body.members.length, 1, 'only the owner before acceptance')
  t.equal(pending.body.invites.length, 1)
  t.strictSame(pending.body.invites[0], invited.body, 'the pending invitation as created')
  t.notOk(JSON.stringify(pending.body).includes('token'), 'no token or token hash in the team view')

  const x = await newVerifiedUser(h, { email })
  isError(t, await h.platform('POST', '/platform/v1/invites/accept', { token }), 401, 'unauthorized', 'accept without a session')
  isError(t, await h.platform('POST', '/platform/v1/invites/accept', {}, asUser(x)), 400, 'invalid_request', 'accept without a token')
  const accepted = await h.platform('POST', '/platform/v1/invites/accept', { token }, asUser(x))
  t.equal(accepted.status, 200, JSON.stringify(accepted.body))
  t.match(accepted.body, { id: owner.projectId, name: project.name, role: 'member' })
  t.notOk('api_key' in accepted.body, 'no key for a member')

  const team = await h.platform('GET', projectPath(owner.projectId, '/members'), undefined, asUser(owner))
  t.equal(team.status, 200)
  t.strictSame(
    team.body.members.map((m: { user_id: string; email: string; role: string }) => [m.user_id, m.email, m.role]),
    [
      [owner.userId, owner.email, 'owner'],
      [x.userId, email, 'member'],
    ],
  )
  for (const m of team.body.members) {
    t.strictSame(Object.keys(m).sort(), ['email', 'joined_at', 'role', 'user_id'])
    isIsoDate(t, m.joined_at, 'joined_at')
  }
  t.strictSame(team.body.invites, [], 'the accepted invitation is gone')

  const seenByMember = await h.platform('GET', projectPath(owner.projectId, '/members'), undefined, asUser(x))
  t.equal(seenByMember.status, 200)
  t.equal(seenByMember.body.members.length, 2, 'a member sees the team')
  t.strictSame(seenByMember.body.invites, [], 'but not the invitations')

  const xProjects = await h.platform('GET', '/platform/v1/projects', undefined, asUser(x))
  t.strictSame(
    xProjects.body.data.map((p: { id: string; role: string }) => [p.id, p.role]).sort(),
    [
      [x.projectId, 'owner'],
      [owner.projectId, 'member'],
    ].sort(),
    "the member's list has both projects with their roles",
  )
  isError(t, await h.platform('POST', '/platform/v1/invites/accept', { token }, asUser(x)), 422, 'invalid_token', 'reusing the token')

  const again = await h.platform('POST', projectPath(owner.projectId, '/members'), { email, role: 'viewer' }, asUser(owner))
  isError(t, again, 409, 'member_exists', 'inviting a member again')
})

t.test('an invitation works only with its own token, for its own address, within 7 days', async (t) => {
  t.teardown(restoreClock)
  const owner = await newVerifiedUser(h)
  const invite = async (email: string, role = 'viewer', projectId = owner.projectId) => {
    const res = await h.platform('POST', projectPath(projectId, '/members'), { email, role }, asUser(owner))
    t.equal(res.status, 201, JSON.stringify(res.body))
    return tokenFromMail(await h.smtp.next(email, /invited/i))
  }
  const accept = (user: VerifiedUser, token: string) => h.platform('POST', '/platform/v1/invites/accept', { token }, asUser(user))

  const yEmail = freshEmail('y')
  const yToken = await invite(yEmail)
  const y = await newVerifiedUser(h, { email: yEmail })
  // Existing users stand in for the other parties (each new user costs two scrypt hashes).
  const z = shared.outsider
  isError(t, await accept(z, yToken), 422, 'invalid_token', 'another user accepting the token')
  isError(t, await accept(y, 'garbage'), 422, 'invalid_token', 'a garbage token')
  const [projectPart, invitePart, secret] = yToken.split('.')
  t.ok(projectPart && invitePart && secret, 'token is <project>.<invite>.<secret>')
  isError(t, await accept(y, `${projectPart}.${invitePart}.${secret!.slice(0, -2)}xx`), 422, 'invalid_token', 'a token with a wrong secret')
  isError(t, await accept(y, `${projectPart}.inv_${'0'.repeat(26)}.${secret}`), 422, 'invalid_token', 'an unknown invite id')
  isError(t, await accept(y, `${unknownProjectId}.${invitePart}.${secret}`), 422, 'invalid_token', 'an unknown project')
  const ok = await accept(y, yToken)
  t.equal(ok.status, 200, `the refused attempts did not use the token up: ${JSON.stringify(ok.body)}`)
  t.equal(ok.body.role, 'viewer')

  // A second invitation to the same address replaces the first.
  const wEmail = freshEmail('w')
  const firstW = await invite(wEmail, 'viewer')
  const secondW = await invite(wEmail, 'member')
  const w = await newVerifiedUser(h, { email: wEmail })
  isError(t, await accept(w, firstW), 422, 'invalid_token', 'the replaced invitation')
  const wJoined = await accept(w, secondW)
  t.equal(wJoined.status, 200)
  t.equal(wJoined.body.role, 'member', 'the role of the newer invitation')

  // An invitation into a project that is deleted dies with it.
  const doomed = await h.platform('POST', '/platform/v1/projects', { name: 'Doomed' }, asUser(owner))
  t.equal(doomed.status, 201)
  const uToken = await invite(shared.outsider.email, 'member', doomed.body.id)
  t.equal((await h.platform('DELETE', projectPath(doomed.body.id), undefined, asUser(owner))).status, 200)
  isError(t, await accept(shared.outsider, uToken), 422, 'invalid_token', 'an invitation into a deleted project')

  // Expiry: 7 days. The session is issued at the shifted time so that only the invitation is old.
  const v = shared.outsider
  const vToken = await invite(v.email)
  shiftClock(7 * dayMs + 1000)
  const login = await h.platform('POST', '/platform/v1/auth/login', { email: v.email, password: v.password }, { ip: freshIp() })
  t.equal(login.status, 200, JSON.stringify(login.body))
  isError(
    t,
    await h.platform('POST', '/platform/v1/invites/accept', { token: vToken }, { jwt: sessionFrom(login) }),
    422,
    'invalid_token',
    'an invitation 7 days + 1 s old',
  )
})

t.test('an invitation names the project only in its body, quoted on one line', async (t) => {
  const owner = await newVerifiedUser(h)
  const hostile = 'Your account is suspended\r\nBcc: x@evil.test\u202e "Click https://evil.test/login now'
  const renamed = await h.platform('PATCH', projectPath(owner.projectId), { name: hostile }, asUser(owner))
  t.equal(renamed.status, 200, JSON.stringify(renamed.body))
  const email = freshEmail('hostile')
  t.equal((await h.platform('POST', projectPath(owner.projectId, '/members'), { email, role: 'viewer' }, asUser(owner))).status, 201)
  const mail = await h.smtp.next(email, /invited/i)
  t.equal(mail.subject, 'You are invited to join a project on jobsvc')
  t.notMatch(mail.subject, /suspended|evil|Click/, 'nothing of the name in the subject')
  t.match(mail.text, `named "Your account is suspended Bcc: x@evil.test 'Click https://evil.test/login now" as viewer`, 'one quoted line')
})

t.test('invitations: at most 30 sent per hour and 100 pending per project', async (t) => {
  const owner = await newVerifiedUser(h)
  const path = projectPath(owner.projectId, '/members')
  t.teardown(restoreClock)
  const invite = (email = freshEmail('capped')) => h.platform('POST', path, { email, role: 'viewer' }, asUser(owner))
  for (let i = 0; i < 5; i++) isError(t, await invite(owner.email), 409, 'member_exists', `a refused invitation (${i}) sends nothing`)
  const invited: string[] = []
  const inviteMany = async (n: number) => {
    for (let i = 0; i < n; i++) {
      const email = freshEmail('capped')
      const res = await invite(email)
      if (res.status !== 201) return t.fail(`invitation ${invited.length + 1}: ${res.status} ${JSON.stringify(res.body)}`)
      invited.push(email)
    }
  }
  await inviteMany(30)
  const tooMany = await invite()
  isError(t, tooMany, 429, 'rate_limit_exceeded', 'the 31st of the hour')
  const retryAfter = Number(tooMany.headers.get('retry-after'))
  t.ok(retryAfter > 0 && retryAfter <= 3600, `Retry-After ${retryAfter} s`)

  for (const [hours, n] of [
    [1, 30],
    [2, 30],
    [3, 10],
  ] as const) {
    shiftClock(hours * hourMs + 1000)
    await inviteMany(n)
  }
  t.equal(invited.length, 100)
  isError(t, await invite(), 409, 'invite_limit_reached', 'the 101st pending invitation')
  const again = await invite(invited[0])
  t.equal(again.status, 201, 'inviting an invited address again replaces its invitation, so it does not count')
  const team = await h.platform('GET', path, undefined, asUser(owner))
  t.equal(team.body.invites.length, 100)

  shiftClock(7 * dayMs + 4 * hourMs)
  // The session lasted 7 days too.
  const login = await h.platform('POST', '/platform/v1/auth/login', { email: owner.email, password: owner.password })
  const later = { jwt: sessionFrom(login) }
  const expiredRoom = await h.platform('POST', path, { email: freshEmail('capped'), role: 'viewer' }, later)
  t.equal(expiredRoom.status, 201, 'once the invitations expired, there is room again')
  const after = await h.platform('GET', path, undefined, later)
  t.equal(after.body.invites.length, 1, 'and the expired ones left the project with it')
})

t.test('invitation validation and who may invite', async (t) => {
  const { owner, projectId, admin, member, viewer, outsider } = shared
  const path = projectPath(projectId, '/members')
  isError(t, await h.platform('POST', path, { email: freshEmail(), role: 'superuser' }, asUser(owner)), 422, 'invalid_role', "role 'superuser'")
  isError(t, await h.platform('POST', path, { email: freshEmail(), role: 'owner' }, asUser(owner)), 422, 'invalid_role', "role 'owner'")
  isError(t, await h.platform('POST', path, { email: freshEmail(), role: '' }, asUser(owner)), 422, 'invalid_role', 'an empty role')
  isError(t, await h.platform('POST', path, { email: freshEmail(), role: 'Admin' }, asUser(owner)), 422, 'invalid_role', 'a role in the wrong case')
  isError(t, await h.platform('POST', path, { email: 'not-an-email', role: 'member' }, asUser(owner)), 422, 'invalid_email', 'a malformed address')
  isError(
    t,
    await h.platform('POST', path, { email: 'a@b', role: 'member' }, asUser(owner)),
    422,
    'invalid_email',
    'an address without a dot in its domain',
  )
  isError(
    t,
    await h.platform('POST', path, { email: 'a b@example.com', role: 'member' }, asUser(owner)),
    422,
    'invalid_email',
    'an address with a space',
  )
  isError(t, await h.platform('POST', path, { role: 'member' }, asUser(owner)), 400, 'invalid_request', 'no email')
  isError(t, await h.platform('POST', path, { email: freshEmail() }, asUser(owner)), 400, 'invalid_request', 'no role')
  isError(
    t,
    await h.platform('POST', path, { email: `${'a'.repeat(320)}@example.com`, role: 'member' }, asUser(owner)),
    400,
    'invalid_request',
    'an address over 320 characters',
  )
  isError(
    t,
    await h.platform('POST', path, { email: member.email.toUpperCase(), role: 'viewer' }, asUser(owner)),
    409,
    'member_exists',
    'an existing member (any case)',
  )
  isError(t, await h.platform('POST', path, { email: owner.email, role: 'member' }, asUser(admin)), 409, 'member_exists', 'the owner, by an admin')

  isError(t, await h.platform('POST', path, { email: freshEmail(), role: 'viewer' }, asUser(member)), 403, 'forbidden', 'a member inviting')
  isError(t, await h.platform('POST', path, { email: freshEmail(), role: 'viewer' }, asUser(viewer)), 403, 'forbidden', 'a viewer inviting')
  isError(
    t,
    await h.platform('POST', path, { email: freshEmail(), role: 'viewer' }, asUser(outsider)),
    404,
    'project_not_found',
    'a non-member inviting',
  )
  isError(
    t,
    await h.platform('POST', projectPath(unknownProjectId, '/members'), { email: freshEmail(), role: 'viewer' }, asUser(owner)),
    404,
    'project_not_found',
    'an unknown project',
  )
  isError(t, await h.platform('POST', path, { email: freshEmail(), role: 'viewer' }), 401, 'unauthorized', 'no session')

  // Below the owner nobody grants a role at or above their own (docs/api-notes.md, "Dashboard and authentication").
  isError(
    t,
    await h.platform('POST', path, { email: freshEmail(), role: 'admin' }, asUser(admin)),
    403,
    'role_exceeds_caller',
    'an admin inviting an admin',
  )
  const ownerInvitesAdmin = await h.platform('POST', path, { email: freshEmail('admin2'), role: 'admin' }, asUser(owner))
  t.equal(ownerInvitesAdmin.status, 201, 'the owner invites an admin')
  const email = freshEmail('by-admin')
  const byAdmin = await h.platform('POST', path, { email, role: 'member' }, asUser(admin))
  t.equal(byAdmin.status, 201, `an admin invites a member: ${JSON.stringify(byAdmin.body)}`)
  t.equal(byAdmin.body.invited_by, admin.userId)
  t.equal(byAdmin.body.role, 'member')
  t.match((await h.smtp.next(email, /invited/i)).text, /as member/)
  const team = await h.platform('GET', path, undefined, asUser(admin))
  t.ok(
    team.body.invites.some((i: { invite_id: string }) => i.invite_id === byAdmin.body.invite_id),
    'an admin sees the pending invitation',
  )
  isError(t, await h.platform('GET', path, undefined, asUser(outsider)), 404, 'project_not_found', 'a non-member reading the team')
})

t.test('role changes', async (t) => {
  const owner = await newVerifiedUser(h)
  const projectId = owner.projectId
  const x = await join(owner, projectId, 'member')
  const memberPath = (userId: string) => projectPath(projectId, `/members/${userId}`)
  /** PATCH a member's role, as `by` (no session when absent). */
  const setRole = (userId: string, body: { role?: string }, by?: VerifiedUser) =>
    h.platform('PATCH', memberPath(userId), body, by === undefined ? undefined : asUser(by))

  const promoted = await setRole(x.userId, { role: 'admin' }, owner)
  t.equal(promoted.status, 200, JSON.stringify(promoted.body))
  t.strictSame(Object.keys(promoted.body).sort(), ['email', 'joined_at', 'role', 'user_id'])
  t.match(promoted.body, { user_id: x.userId, email: x.email, role: 'admin' })
  const team = await h.platform('GET', projectPath(projectId, '/members'), undefined, asUser(owner))
  t.equal(team.body.members.find((m: { user_id: string }) => m.user_id === x.userId).role, 'admin', 'the team shows the new role')
  t.equal((await h.platform('GET', projectPath(projectId), undefined, asUser(x))).body.role, 'admin', 'the project view shows it')
  const same = await setRole(x.userId, { role: 'admin' }, owner)
  t.equal(same.status, 200, 'setting the same role is a no-op')
  t.equal(same.body.role, 'admin')

  isError(t, await setRole(owner.userId, { role: 'viewer' }, x), 403, 'cannot_modify_owner', 'an admin demoting the owner')
  isError(t, await setRole(owner.userId, { role: 'admin' }, owner), 403, 'cannot_modify_owner', 'the owner demoting themself')
  isError(t, await setRole(unknownUserId, { role: 'viewer' }, owner), 404, 'member_not_found', 'an unknown user')
  isError(t, await setRole(shared.outsider.userId, { role: 'viewer' }, owner), 404, 'member_not_found', 'a user who is not a member')
  isError(t, await setRole(x.userId, { role: 'owner' }, owner), 422, 'invalid_role', "granting 'owner'")
  isError(t, await setRole(x.userId, { role: 'superuser' }, owner), 422, 'invalid_role', "granting 'superuser'")
  isError(t, await setRole(x.userId, {}, owner), 400, 'invalid_request', 'no role')
  isError(t, await setRole(x.userId, { role: 'viewer' }), 401, 'unauthorized', 'no session')
  isError(t, await h.platform('DELETE', memberPath(owner.userId), undefined, asUser(x)), 403, 'cannot_remove_owner', 'an admin removing the owner')
  isError(t, await h.platform('DELETE', memberPath(owner.userId), undefined, asUser(owner)), 403, 'cannot_remove_owner', 'the owner leaving')

  const s = shared
  const sharedMemberPath = (userId: string) => projectPath(s.projectId, `/members/${userId}`)
  isError(
    t,
    await h.platform('PATCH', sharedMemberPath(s.viewer.userId), { role: 'member' }, asUser(s.member)),
    403,
    'forbidden',
    'a member changing a role',
  )
  isError(
    t,
    await h.platform('PATCH', sharedMemberPath(s.viewer.userId), { role: 'member' }, asUser(s.viewer)),
    403,
    'forbidden',
    'a viewer promoting themself',
  )
  isError(
    t,
    await h.platform('PATCH', sharedMemberPath(s.viewer.userId), { role: 'member' }, asUser(s.outsider)),
    404,
    'project_not_found',
    'a non-member',
  )

  // Below the owner, an admin manages members and viewers, not other admins: granting, changing
  // or removing a role at or above its own is 403 role_exceeds_caller.
  const y = await join(owner, projectId, 'admin')
  isError(t, await setRole(y.userId, { role: 'viewer' }, x), 403, 'role_exceeds_caller', 'an admin demoting another admin')
  isError(t, await h.platform('DELETE', memberPath(y.userId), undefined, asUser(x)), 403, 'role_exceeds_caller', 'an admin removing another admin')
  isError(
    t,
    await h.platform('POST', projectPath(projectId, '/members'), { email: freshEmail(), role: 'admin' }, asUser(x)),
    403,
    'role_exceeds_caller',
    'an admin inviting an admin',
  )
  const team2 = await h.platform('GET', projectPath(projectId, '/members'), undefined, asUser(owner))
  t.equal(team2.body.members.find((m: { user_id: string }) => m.user_id === y.userId).role, 'admin', 'the refusals changed nothing')

  const toMember = await setRole(y.userId, { role: 'member' }, owner)
  t.equal(toMember.status, 200, 'the owner manages admins')
  t.equal(toMember.body.role, 'member')
  isError(t, await setRole(y.userId, { role: 'admin' }, x), 403, 'role_exceeds_caller', 'an admin granting admin to a member')
  isError(t, await setRole(y.userId, { role: 'owner' }, x), 422, 'invalid_role', "an admin granting 'owner'")
  const toViewer = await setRole(y.userId, { role: 'viewer' }, x)
  t.equal(toViewer.status, 200, `an admin demotes a member: ${JSON.stringify(toViewer.body)}`)
  t.equal(toViewer.body.role, 'viewer')
  const backToMember = await setRole(y.userId, { role: 'member' }, x)
  t.equal(backToMember.status, 200, 'an admin promotes a viewer to member')
  t.equal(backToMember.body.role, 'member')
  t.equal((await h.platform('DELETE', memberPath(y.userId), undefined, asUser(x))).status, 204, 'an admin removes a member')

  const leaving = await h.platform('DELETE', memberPath(x.userId), undefined, asUser(x))
  t.equal(leaving.status, 204, 'an admin may leave (self-removal is not role_exceeds_caller)')
  const left = await h.platform('GET', projectPath(projectId, '/members'), undefined, asUser(owner))
  t.strictSame(
    left.body.members.map((m: { user_id: string }) => m.user_id),
    [owner.userId],
    'only the owner is left',
  )
})

t.test('removing members and leaving', async (t) => {
  const owner = await newVerifiedUser(h)
  const projectId = owner.projectId
  const m = await join(owner, projectId, 'member')
  const v = await join(owner, projectId, 'viewer')
  const memberPath = (userId: string) => projectPath(projectId, `/members/${userId}`)

  isError(t, await h.platform('DELETE', memberPath(v.userId), undefined, asUser(m)), 403, 'forbidden', 'a member removing someone else')
  isError(t, await h.platform('DELETE', memberPath(unknownUserId), undefined, asUser(owner)), 404, 'member_not_found', 'removing an unknown user')
  isError(t, await h.platform('DELETE', memberPath(m.userId), undefined), 401, 'unauthorized', 'removing without a session')

  const removed = await h.platform('DELETE', memberPath(m.userId), undefined, asUser(owner))
  t.equal(removed.status, 204)
  t.equal(removed.body, null, 'no body')
  isError(t, await h.platform('GET', projectPath(projectId), undefined, asUser(m)), 404, 'project_not_found', 'the removed member reads the project')
  isError(
    t,
    await h.platform('GET', projectPath(projectId, '/members'), undefined, asUser(m)),
    404,
    'project_not_found',
    'the removed member reads the team',
  )
  const mList = await h.platform('GET', '/platform/v1/projects', undefined, asUser(m))
  t.strictSame(
    mList.body.data.map((p: { id: string }) => p.id),
    [m.projectId],
    "the removed member's list lost the project",
  )
  isError(t, await h.platform('DELETE', memberPath(m.userId), undefined, asUser(owner)), 404, 'member_not_found', 'removing them again')

  const left = await h.platform('DELETE', memberPath(v.userId), undefined, asUser(v))
  t.equal(left.status, 204, 'a viewer may leave')
  isError(t, await h.platform('GET', projectPath(projectId), undefined, asUser(v)), 404, 'project_not_found', 'the viewer after leaving')

  const team = await h.platform('GET', projectPath(projectId, '/members'), undefined, asUser(owner))
  t.strictSame(
    team.body.members.map((x: { user_id: string }) => x.user_id),
    [owner.userId],
    'only the owner is left',
  )

  const back = await h.platform('POST', projectPath(projectId, '/members'), { email: m.email, role: 'member' }, asUser(owner))
  t.equal(back.status, 201, 'a removed member can be invited again')
  const token = tokenFromMail(await h.smtp.next(m.email, /invited/i))
  const rejoined = await h.platform('POST', '/platform/v1/invites/accept', { token }, asUser(m))
  t.equal(rejoined.status, 200)
  t.equal((await h.platform('GET', projectPath(projectId), undefined, asUser(m))).body.role, 'member', 'and rejoin')
})

t.test('ownership transfer', async (t) => {
  const owner = await newVerifiedUser(h)
  const projectId = owner.projectId
  const x = await join(owner, projectId, 'member')
  const path = projectPath(projectId, '/transfer-ownership')

  isError(t, await h.platform('POST', path, { user_id: owner.userId }, asUser(x)), 403, 'forbidden', 'a member transferring')
  isError(t, await h.platform('POST', path, { user_id: unknownUserId }, asUser(owner)), 404, 'member_not_found', 'to a non-member')
  isError(t, await h.platform('POST', path, {}, asUser(owner)), 400, 'invalid_request', 'no user_id')
  isError(t, await h.platform('POST', path, { user_id: x.userId }), 401, 'unauthorized', 'no session')
  isError(t, await h.platform('POST', path, { user_id: x.userId }, asUser(shared.outsider)), 404, 'project_not_found', 'a non-member transferring')

  const transferred = await h.platform('POST', path, { user_id: x.userId }, asUser(owner))
  t.equal(transferred.status, 200, JSON.stringify(transferred.body))
  t.strictSame(Object.keys(transferred.body), ['members'])
  const roles = Object.fromEntries(transferred.body.members.map((m: { user_id: string; role: string }) => [m.user_id, m.role]))
  t.strictSame(roles, { [owner.userId]: 'admin', [x.userId]: 'owner' }, 'the new owner, and the old one as admin')

  isError(t, await h.platform('DELETE', projectPath(projectId), undefined, asUser(owner)), 403, 'forbidden', 'the old owner deleting')
  isError(t, await h.platform('POST', path, { user_id: owner.userId }, asUser(owner)), 403, 'forbidden', 'the old owner transferring back')
  const rotated = await h.platform('POST', projectPath(projectId, '/keys/rotate'), undefined, asUser(owner))
  t.equal(rotated.status, 200, 'the old owner, now admin, may still rotate')
  isError(
    t,
    await h.platform('PATCH', projectPath(projectId, `/members/${x.userId}`), { role: 'viewer' }, asUser(owner)),
    403,
    'cannot_modify_owner',
    'the old owner demoting the new one',
  )

  const me = await h.platform('GET', '/platform/v1/auth/me', undefined, asUser(x))
  t.ok(
    me.body.projects.some((p: { id: string }) => p.id === projectId),
    "the project is among the new owner's owned projects",
  )
  const oldMe = await h.platform('GET', '/platform/v1/auth/me', undefined, asUser(owner))
  t.notOk(
    oldMe.body.projects.some((p: { id: string }) => p.id === projectId),
    "and no longer among the old owner's",
  )
  t.equal((await h.platform('GET', projectPath(projectId), undefined, asUser(x))).body.role, 'owner')

  const back = await h.platform('POST', path, { user_id: owner.userId }, asUser(x))
  t.equal(back.status, 200, 'the new owner can transfer back')
  const deleted = await h.platform('DELETE', projectPath(projectId), undefined, asUser(x))
  isError(t, deleted, 403, 'forbidden', 'and then is an admin who cannot delete')
})

t.test('account export: everything about the user, no secrets, once a minute', async (t) => {
  t.teardown(restoreClock)
  const u = await newVerifiedUser(h)
  const setup = await h.platform('POST', '/platform/v1/auth/2fa/setup', undefined, asUser(u))
  t.equal(setup.status, 200)
  t.equal((await h.platform('POST', '/platform/v1/auth/2fa/verify', { code: totpCode(setup.body.secret) }, asUser(u))).status, 200)
  const codes = await h.platform('POST', '/platform/v1/auth/2fa/recovery/regenerate', undefined, asUser(u))
  t.equal(codes.status, 200)
  const rotated = await h.platform('POST', projectPath(u.projectId, '/keys/rotate'), undefined, asUser(u))
  t.equal(rotated.status, 200)
  const owner = await newVerifiedUser(h)
  const joined = await h.platform('POST', projectPath(owner.projectId, '/members'), { email: u.email, role: 'viewer' }, asUser(owner))
  t.equal(joined.status, 201)
  const inviteToken = tokenFromMail(await h.smtp.next(u.email, /invited/i))
  t.equal((await h.platform('POST', '/platform/v1/invites/accept', { token: inviteToken }, asUser(u))).status, 200)
  await eventually(
    async () => (await h.runtime.sql`SELECT 1 FROM activity WHERE user_id = ${u.userId} AND kind = 'recovery_codes_regenerated'`).length > 0,
    15_000,
    'account activity',
  )
  await eventually(async () => (await activityOf(owner.projectId)).some((r) => r.kind === 'member_joined'), 15_000, 'team activity')

  isError(t, await h.platform('GET', '/platform/v1/account/export'), 401, 'unauthorized', 'export without a session')
  const exported = await h.platform('GET', '/platform/v1/account/export', undefined, asUser(u))
  t.equal(exported.status, 200, JSON.stringify(exported.body))
  t.match(exported.headers.get('content-type') ?? '', /application\/json/)
  t.match(exported.headers.get('content-disposition') ?? '', /attachment/)
  const body = exported.body
  t.match(body.profile, { user_id: u.userId, email: u.email, email_verified: true, totp_enabled: true })
  t.strictSame(
    body.projects.map((p: { id: string; role: string }) => [p.id, p.role]).sort(),
    [
      [u.projectId, 'owner'],
      [owner.projectId, 'viewer'],
    ].sort(),
  )
  t.strictSame(body.teams.map((team: { project_id: string }) => team.project_id).sort(), [u.projectId, owner.projectId].sort())
  const ownTeam = body.teams.find((team: { project_id: string }) => team.project_id === u.projectId)
  t.strictSame(
    ownTeam.members.map((m: { user_id: string }) => m.user_id),
    [u.userId],
  )
  const kinds = new Set(body.activity.map((a: { kind: string }) => a.kind))
  for (const kind of ['terms_accepted', 'two_factor_enabled', 'recovery_codes_regenerated', 'api_key_rotated', 'member_joined']) {
    t.ok(kinds.has(kind), `the export's activity has ${kind}`)
  }
  const text = JSON.stringify(body)
  t.notOk(text.includes('password_hash'), 'no password hash field')
  t.notOk(text.includes(u.password), 'no password')
  t.notOk(/key_hash|token_hash|recovery_code_hashes/.test(text), 'no key, token or recovery-code hashes')
  t.notOk(text.includes(u.apiKey), 'no plaintext of the first key')
  t.notOk(text.includes(rotated.body.api_key), 'no plaintext of the current key')
  t.notOk(/sv_live_sk_[0-9a-f]{32}/.test(text), 'no full API key at all')
  t.notOk(text.includes(setup.body.secret), 'no TOTP secret')
  for (const code of codes.body.codes as string[]) t.notOk(text.includes(code), `no recovery code ${code}`)
  t.notOk(text.includes(inviteToken.split('.')[2]!), 'no invitation secret')

  const second = await h.platform('GET', '/platform/v1/account/export', undefined, asUser(u))
  isError(t, second, 429, 'rate_limit_exceeded', 'a second export within 60 s')
  const retryAfter = Number(second.headers.get('retry-after'))
  t.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After is 1..60 seconds (${second.headers.get('retry-after')})`)
  const otherUser = await h.platform('GET', '/platform/v1/account/export', undefined, asUser(owner))
  t.equal(otherUser.status, 200, 'the cooldown is per user')

  shiftClock(61_000)
  t.equal((await h.platform('GET', '/platform/v1/account/export', undefined, asUser(u))).status, 200, 'allowed again after 60 s')
})

t.test("account export: a project's audit trail and pending invites only where the role may read them", async (t) => {
  t.teardown(restoreClock)
  const team = await newTeam()
  // A webhook URL (often with a credential in it) and a pending invitation: audit-log material.
  const hookUrl = `https://8.8.8.8/hook/${randomBytes(6).toString('hex')}`
  const hook = await httpRequest(h.url, team.owner.apiKey, 'POST', '/jobsvc/v1/webhooks', { url: hookUrl, events: ['job.created'] })
  t.equal(hook.status, 201, JSON.stringify(hook.body))
  const pending = freshEmail('pending')
  t.equal((await h.platform('POST', projectPath(team.projectId, '/members'), { email: pending, role: 'member' }, asUser(team.owner))).status, 201)
  t.equal((await h.platform('PATCH', '/platform/v1/auth/profile', { display_name: 'Viewer' }, asUser(team.viewer))).status, 200)
  await eventually(
    async () => {
      const kinds = new Set((await activityOf(team.projectId)).map((r) => r.kind))
      const own = await h.runtime.sql`SELECT 1 FROM activity WHERE user_id = ${team.viewer.userId} AND kind = 'profile_updated'`
      return kinds.has('webhook_created') && kinds.has('member_invited') && own.length > 0
    },
    15_000,
    'the activity rows',
  )

  const exportOf = async (user: VerifiedUser) => {
    const res = await h.platform('GET', '/platform/v1/account/export', undefined, asUser(user))
    t.equal(res.status, 200, JSON.stringify(res.body))
    return res.body as {
      activity: Array<{ kind: string; project_id: string | null; target_id: string | null }>
      teams: Array<{ project_id: string; invites: unknown[] }>
    }
  }
  for (const [role, user] of [
    ['viewer', team.viewer],
    ['member', team.member],
  ] as const) {
    const body = await exportOf(user)
    const text = JSON.stringify(body)
    t.notOk(text.includes(hookUrl), `${role}: no webhook URL`)
    t.notOk(text.includes(pending), `${role}: no pending invitee`)
    const projectRows = body.activity.filter((a) => a.project_id === team.projectId)
    t.ok(
      projectRows.some((a) => a.kind === 'member_joined'),
      `${role}: their own joining`,
    )
    t.ok(
      projectRows.every((a) => a.target_id === user.userId),
      `${role}: of the project's trail, only rows about them (${JSON.stringify(projectRows.map((a) => a.kind))})`,
    )
    t.same(body.teams.find((x) => x.project_id === team.projectId)?.invites, [], `${role}: no invites in the team`)
    t.ok(
      body.activity.some((a) => a.kind === 'terms_accepted' && a.project_id === null),
      `${role}: their own account activity`,
    )
    if (role === 'viewer')
      t.ok(
        body.activity.some((a) => a.kind === 'profile_updated' && a.target_id === user.userId),
        'the viewer sees their own profile change',
      )
  }

  for (const [role, user] of [
    ['admin', team.admin],
    ['owner', team.owner],
  ] as const) {
    const body = await exportOf(user)
    const text = JSON.stringify(body)
    t.ok(text.includes(hookUrl), `${role}: the webhook URL, as in the audit-log export`)
    t.ok(text.includes(pending), `${role}: the pending invitee`)
    const kinds = new Set(body.activity.filter((a) => a.project_id === team.projectId).map((a) => a.kind))
    for (const kind of ['webhook_created', 'member_invited', 'member_joined']) t.ok(kinds.has(kind), `${role}: the project's ${kind}`)
    t.notOk(
      body.activity.some((a) => a.project_id === null && a.target_id === team.viewer.userId),
      `${role}: not the viewer's own account rows`,
    )
  }
  const outsiderText = JSON.stringify(await exportOf(team.outsider))
  t.notOk(outsiderText.includes(hookUrl) || outsiderText.includes(pending), 'an outsider sees nothing of the project')
})

t.test('account deletion', async (t) => {
  const u = await newVerifiedUser(h)
  const second = await h.platform('POST', '/platform/v1/projects', { name: 'Second' }, asUser(u))
  t.equal(second.status, 201)
  const member = await join(u, u.projectId, 'member')
  const other = await newVerifiedUser(h)
  const invited = await h.platform('POST', projectPath(other.projectId, '/members'), { email: u.email, role: 'admin' }, asUser(other))
  t.equal(invited.status, 201)
  const token = tokenFromMail(await h.smtp.next(u.email, /invited/i))
  t.equal((await h.platform('POST', '/platform/v1/invites/accept', { token }, asUser(u))).status, 200)

  isError(t, await h.platform('DELETE', '/platform/v1/account'), 401, 'unauthorized', 'without a session')
  isError(t, await h.platform('DELETE', '/platform/v1/account', undefined, asUser(u)), 400, 'confirm_required', 'without confirm')
  isError(
    t,
    await h.platform('DELETE', `/platform/v1/account?confirm=${encodeURIComponent(other.email)}`, undefined, asUser(u)),
    400,
    'confirm_required',
    'with another address',
  )
  isError(t, await h.platform('DELETE', '/platform/v1/account?confirm=', undefined, asUser(u)), 400, 'confirm_required', 'with an empty confirm')
  t.equal((await h.platform('GET', '/platform/v1/auth/me', undefined, asUser(u))).status, 200, 'the refusals deleted nothing')

  const deleted = await h.platform('DELETE', `/platform/v1/account?confirm=${encodeURIComponent(u.email.toUpperCase())}`, undefined, asUser(u))
  t.equal(deleted.status, 200, JSON.stringify(deleted.body))
  t.strictSame(Object.keys(deleted.body), ['deleted_at'])
  isIsoDate(t, deleted.body.deleted_at, 'deleted_at')
  t.match(deleted.headers.get('set-cookie') ?? '', /sv_jwt=;.*Max-Age=0/, 'the session cookie is expired')

  const me = await h.platform('GET', '/platform/v1/auth/me', undefined, asUser(u))
  isError(t, me, 404, 'user_not_found', 'the old session on /auth/me')
  isError(t, await h.platform('GET', '/platform/v1/projects', undefined, asUser(u)), 404, 'user_not_found', 'the old session on the project list')
  isError(t, await h.platform('POST', '/platform/v1/auth/login', { email: u.email, password: u.password }), 401, 'invalid_credentials', 'logging in')
  isError(t, await httpRequest(h.url, u.apiKey, 'GET', '/jobsvc/v1/jobs'), 401, 'unauthorized', "the first owned project's key")
  t.equal(await keyStatus(second.body.api_key), 401, "the second owned project's key")
  isError(
    t,
    await h.platform('GET', projectPath(u.projectId), undefined, asUser(member)),
    404,
    'project_not_found',
    'a member of a deleted owned project',
  )

  const otherTeam = await h.platform('GET', projectPath(other.projectId, '/members'), undefined, asUser(other))
  t.equal(otherTeam.status, 200, 'a project the user was only a member of survives')
  t.strictSame(
    otherTeam.body.members.map((m: { user_id: string }) => m.user_id),
    [other.userId],
    'without the deleted user',
  )
  t.equal(await keyStatus(other.apiKey), 200, 'and its key works')

  const again = await h.platform('POST', '/platform/v1/auth/signup', { email: u.email, password: 'another-password', accept_terms: true })
  t.equal(again.status, 201, `the address is free again: ${JSON.stringify(again.body)}`)
  t.not(again.body.user_id, u.userId, 'a new user')
  isError(
    t,
    await h.platform('GET', '/platform/v1/auth/me', undefined, asUser(u)),
    404,
    'user_not_found',
    'the old session does not reach the new account',
  )
})

t.test('the projector records project activity with the project id', async (t) => {
  const owner = await newVerifiedUser(h)
  const projectId = owner.projectId
  const ok = (res: HttpResponse, status: number, what: string) => t.equal(res.status, status, `${what}: ${JSON.stringify(res.body)}`)

  const originalName: string = (await h.platform('GET', projectPath(projectId), undefined, asUser(owner))).body.name
  const rotated = await h.platform('POST', projectPath(projectId, '/keys/rotate'), undefined, asUser(owner))
  ok(rotated, 200, 'rotate')
  ok(await h.platform('PATCH', projectPath(projectId), { name: 'Audited' }, asUser(owner)), 200, 'rename')
  const xEmail = freshEmail('x')
  const invited = await h.platform('POST', projectPath(projectId, '/members'), { email: xEmail, role: 'member' }, asUser(owner))
  ok(invited, 201, 'invite')
  const x = await newVerifiedUser(h, { email: xEmail })
  ok(
    await h.platform('POST', '/platform/v1/invites/accept', { token: tokenFromMail(await h.smtp.next(xEmail, /invited/i)) }, asUser(x)),
    200,
    'accept',
  )
  ok(await h.platform('PATCH', projectPath(projectId, `/members/${x.userId}`), { role: 'admin' }, asUser(owner)), 200, 'role change')
  const y = await join(owner, projectId, 'viewer')
  ok(await h.platform('DELETE', projectPath(projectId, `/members/${y.userId}`), undefined, asUser(owner)), 204, 'remove')
  const spare = await h.platform('POST', '/platform/v1/projects', { name: 'Spare' }, asUser(owner))
  ok(spare, 201, 'create a spare project')
  ok(await h.platform('DELETE', projectPath(spare.body.id), undefined, asUser(owner)), 200, 'delete the spare project')
  ok(await h.platform('POST', projectPath(projectId, '/transfer-ownership'), { user_id: x.userId }, asUser(owner)), 200, 'transfer')
  ok(await h.platform('DELETE', projectPath(projectId, '/keys/revoke'), undefined, asUser(owner)), 200, 'revoke by the old owner, now admin')

  const expected = [
    'api_key_rotated',
    'project_renamed',
    'member_invited',
    'team_invite_accepted',
    'member_joined',
    'member_role_changed',
    'member_removed',
    'ownership_transferred',
    'api_key_revoked',
  ]
  const rows = await eventually(
    async () => {
      const found = await activityOf(projectId)
      return found.some((r) => r.kind === 'api_key_revoked') ? found : null
    },
    15_000,
    'the revocation in the activity table',
  )
  const kinds = rows.map((r) => r.kind)
  for (const kind of expected) t.ok(kinds.includes(kind), `activity has ${kind}`)
  t.strictSame(
    kinds.filter((k) => expected.includes(k) && k !== 'member_invited' && k !== 'team_invite_accepted' && k !== 'member_joined'),
    ['api_key_rotated', 'project_renamed', 'member_role_changed', 'member_removed', 'ownership_transferred', 'api_key_revoked'],
    'in the order they happened',
  )
  for (const row of rows) {
    t.equal(row.project_id, projectId, `${row.kind} carries the project id`)
    t.equal(row.user_id, null, `${row.kind} is not an account row`)
  }
  const byKind = (kind: string) => rows.find((r) => r.kind === kind)!
  t.equal(byKind('api_key_rotated').target_id, rotated.body.api_key.slice(0, 24), 'the rotation names the new prefix, not the key')
  t.strictSame(JSON.parse(byKind('project_renamed').metadata!), { previous_name: originalName, name: 'Audited' })
  t.match(JSON.parse(byKind('member_invited').metadata!), { email: xEmail, role: 'member', invited_by: owner.userId })
  t.equal(byKind('member_invited').target_id, invited.body.invite_id)
  t.equal(byKind('team_invite_accepted').target_id, x.userId)
  t.strictSame(JSON.parse(byKind('member_role_changed').metadata!), { role: 'admin', previous_role: 'member' })
  t.equal(byKind('member_removed').target_id, y.userId)
  t.strictSame(JSON.parse(byKind('ownership_transferred').metadata!), { from_user_id: owner.userId, to_user_id: x.userId })
  t.equal(rows.filter((r) => r.kind === 'member_joined').length, 2, 'two members joined')
  t.equal(rows.filter((r) => r.kind === 'member_invited').length, 2, 'two invitations')
  t.notOk(
    rows.some((r) => /sv_live_sk_[0-9a-f]{32}/.test(JSON.stringify(r))),
    'no plaintext key in any row',
  )

  const spareRows = await eventually(
    async () => {
      const found = await activityOf(spare.body.id)
      return found.some((r) => r.kind === 'project_deleted') ? found : null
    },
    15_000,
    'project_deleted in the activity table',
  )
  const deletedRow = spareRows.find((r) => r.kind === 'project_deleted')!
  t.equal(deletedRow.project_id, spare.body.id)
  t.equal(deletedRow.target_id, spare.body.id)
})

t.test('the projector records account activity with the user id', async (t) => {
  const u = await newVerifiedUser(h)
  const ok = (res: HttpResponse, what: string) => t.equal(res.status, 200, `${what}: ${JSON.stringify(res.body)}`)
  ok(await h.platform('PATCH', '/platform/v1/auth/profile', { display_name: 'Ada', timezone: 'Europe/Paris' }, asUser(u)), 'profile')
  const setup = await h.platform('POST', '/platform/v1/auth/2fa/setup', undefined, asUser(u))
  ok(setup, '2fa setup')
  ok(await h.platform('POST', '/platform/v1/auth/2fa/verify', { code: totpCode(setup.body.secret) }, asUser(u)), '2fa verify')
  ok(await h.platform('POST', '/platform/v1/auth/2fa/recovery/regenerate', undefined, asUser(u)), 'regenerate')
  const changed = await h.platform(
    'POST',
    '/platform/v1/auth/change-password',
    { current_password: u.password, new_password: 'a-new-password-1' },
    asUser(u),
  )
  ok(changed, 'change password')
  const jwt = sessionFrom(changed)
  ok(await h.platform('DELETE', `/platform/v1/account?confirm=${encodeURIComponent(u.email)}`, undefined, { jwt }), 'delete account')

  const expected = ['terms_accepted', 'profile_updated', 'two_factor_enabled', 'recovery_codes_regenerated', 'password_changed', 'account_deleted']
  const rows = await eventually(
    async () => {
      const found = await h.runtime.sql<
        { kind: string; project_id: string | null; user_id: string | null; target_type: string; target_id: string | null; metadata: string | null }[]
      >`
      SELECT kind, project_id, user_id, target_type, target_id, metadata FROM activity WHERE user_id = ${u.userId} ORDER BY seq, id`
      return found.some((r) => r.kind === 'account_deleted') ? found : null
    },
    15_000,
    'account_deleted in the activity table',
  )
  t.strictSame(
    rows.map((r) => r.kind).filter((k) => expected.includes(k)),
    expected,
    'every account kind, in order',
  )
  for (const row of rows) {
    t.equal(row.user_id, u.userId, `${row.kind} carries the user id`)
    t.equal(row.project_id, null, `${row.kind} carries no project id`)
    t.equal(row.target_type, 'user')
    t.equal(row.target_id, u.userId)
  }
  t.strictSame(JSON.parse(rows.find((r) => r.kind === 'profile_updated')!.metadata!).changed.sort(), ['display_name', 'timezone'])
  t.notOk(
    rows.some((r) => JSON.stringify(r).includes(setup.body.secret)),
    'no TOTP secret in any row',
  )
})
