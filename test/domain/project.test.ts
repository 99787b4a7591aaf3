import assert from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { fold } from '../../domain/decider.ts'
import {
  AlreadyRevoked,
  CannotModifyOwner,
  CannotRemoveOwner,
  Forbidden,
  InvalidRateLimitOverride,
  InvalidRole,
  InvalidToken,
  KeyRevoked,
  LastProject,
  MemberExists,
  MemberNotFound,
  ProjectAlreadyExists,
  ProjectNotFound,
  RoleExceedsCaller,
} from '../../domain/errors.ts'
import {
  lastPeriodOf,
  promotionTermsOf,
  requestsPerHourOf,
  activeKeyPrefix,
  apiKeyGraceMs,
  hasRoleAtLeast,
  projectDecider,
  projectRoles,
  roleOf,
  type BillingState,
  type Project,
  type ProjectAggregate,
  type ProjectCommand,
  type ProjectEvent,
  type ProjectRole,
} from '../../domain/project/index.ts'
import { decideChecked, deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const now = '2025-03-01T12:00:00.000Z'

const createProject: ProjectCommand = {
  type: 'create_project',
  data: {
    project_id: 'prj_1',
    name: 'Acme',
    plan: 'starter',
    owner_email: 'ops@acme.test',
    key: { prefix: 'jsk_live_0123456789abcde', key_hash: 'a'.repeat(64) },
  },
  meta: { now },
}

function createdEvents(ownerEmail: string | null = 'ops@acme.test'): ProjectEvent[] {
  return [
    {
      type: 'project_created',
      data: { project_id: 'prj_1', name: 'Acme', plan: 'starter', owner_email: ownerEmail, owner_user_id: null, created_at: now },
    },
    { type: 'api_key_issued', data: { prefix: 'jsk_live_0123456789abcde', key_hash: 'a'.repeat(64), issued_at: now } },
  ]
}

t.test('create project: the project and its first API key', async (t) => {
  const project = deciderSpec(t, projectDecider).given([]).when(createProject).then(createdEvents())
  t.same(project, {
    id: 'prj_1',
    name: 'Acme',
    plan: 'starter',
    owner_email: 'ops@acme.test',
    created_at: now,
    updated_at: now,
    status: 'active',
    keys: [{ prefix: 'jsk_live_0123456789abcde', key_hash: 'a'.repeat(64), status: 'active', issued_at: now, expires_at: null }],
    keys_revoked_at: null,
    members: [],
    invites: [],
    billing_state: 'active',
    overage_enabled: false,
    spend_cap_cents: null,
    allowance_warnings: [],
    billing_period: `${now.slice(0, 7)}-01`,
    provider_events: [],
    retry_policies: { project: null, queues: [] },
    rate_limit_override: null,
    promotions: [],
    history_expired_through: 0,
    queue_pauses: [],
    queue_settings: [],
    queue_limits: [],
  })
})

t.test('create project without an owner email', async (t) => {
  const command: ProjectCommand = { ...createProject, data: { ...createProject.data, owner_email: null } }
  const project = deciderSpec(t, projectDecider).given([]).when(command).then(createdEvents(null))
  t.equal(project?.owner_email, null)
})

t.test('create project refuses an existing project', async (t) => {
  deciderSpec(t, projectDecider).given(createdEvents()).when(createProject).thenThrows(ProjectAlreadyExists, 'invalid_state')
})

const t0 = Date.parse(now)
/** The instant `seconds` after the project's creation. */
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString()
const day = 24 * 3600

const keyOf = (n: number) => ({ prefix: `jsk_live_${String(n).padStart(15, '0')}`, key_hash: String(n % 10).repeat(64) })
const firstKey = { prefix: 'jsk_live_0123456789abcde', key_hash: 'a'.repeat(64) }

type ProjectData<T extends ProjectCommand['type']> = Extract<ProjectCommand, { type: T }>['data']

/** A command of `type` decided at `seconds` after creation. */
function command<T extends ProjectCommand['type']>(type: T, data: ProjectData<T>, seconds = 60): ProjectCommand {
  return { type, data, meta: { now: at(seconds) } } as ProjectCommand
}

const emailOf = (userId: string) => `${userId.slice(4)}@acme.test`

const joined = (userId: string, role: ProjectRole, seconds = 1): ProjectEvent => ({
  type: 'member_joined',
  data: { user_id: userId, email: emailOf(userId), role, joined_at: at(seconds) },
})

/** Acme with its owner and one admin, one member and one viewer. */
const team: ProjectEvent[] = [
  {
    type: 'project_created',
    data: { project_id: 'prj_1', name: 'Acme', plan: 'starter', owner_email: emailOf('usr_owner'), owner_user_id: 'usr_owner', created_at: now },
  },
  { type: 'api_key_issued', data: { ...firstKey, issued_at: now } },
  joined('usr_admin', 'admin'),
  joined('usr_member', 'member'),
  joined('usr_viewer', 'viewer'),
]

const rotated = (n: number, seconds: number): ProjectEvent => ({
  type: 'api_key_rotated',
  data: { ...keyOf(n), rotated_at: at(seconds), grace_until: at(seconds + day) },
})

const spec = (t: Parameters<typeof deciderSpec>[0]) => deciderSpec(t, projectDecider)

/** The project `events` lead to, asserted to exist. */
function projectOf(events: readonly ProjectEvent[]): Project {
  const project = fold(projectDecider, projectDecider.initialState, events)
  if (project === null) throw new Error('the events do not create a project')
  return project
}

const rotate = (actor: string | null, n = 1, seconds = 60) => command('rotate_api_key', { actor_user_id: actor, key: keyOf(n) }, seconds)
const revoke = (actor: string | null, seconds = 60) => command('revoke_api_keys', { actor_user_id: actor }, seconds)

t.test('create project with an owner user: the owner is the first member', async (t) => {
  const create = command(
    'create_project',
    { project_id: 'prj_1', name: 'Acme', plan: 'starter', owner_email: 'ops@acme.test', owner_user_id: 'usr_owner', key: firstKey },
    0,
  )
  const project = spec(t)
    .given([])
    .when(create)
    .then([
      {
        type: 'project_created',
        data: { project_id: 'prj_1', name: 'Acme', plan: 'starter', owner_email: 'ops@acme.test', owner_user_id: 'usr_owner', created_at: now },
      },
      { type: 'api_key_issued', data: { ...firstKey, issued_at: now } },
    ])
  t.same(project?.members, [{ user_id: 'usr_owner', email: 'ops@acme.test', role: 'owner', joined_at: now }])
})

t.test('rotate: the active key enters a 24 h grace window and the new key is active', async (t) => {
  const project = spec(t)
    .given(team)
    .when(rotate('usr_owner', 1, 60))
    .then([rotated(1, 60)])
  t.equal(at(60 + day), new Date(t0 + 60_000 + apiKeyGraceMs).toISOString(), 'grace_until is rotated_at + 24 h')
  t.same(project?.keys, [
    { ...firstKey, status: 'grace', issued_at: now, expires_at: at(60 + day) },
    { ...keyOf(1), status: 'active', issued_at: at(60), expires_at: null },
  ])
  t.equal(project?.updated_at, at(60))
  if (project !== null) t.equal(activeKeyPrefix(project), keyOf(1).prefix)
})

t.test('a second rotation drops the older grace key and gives the previous key a fresh window', async (t) => {
  const project = spec(t)
    .given([...team, rotated(1, 60)])
    .when(rotate('usr_admin', 2, 3600))
    .then([rotated(2, 3600)])
  t.same(project?.keys, [
    { ...keyOf(1), status: 'grace', issued_at: at(60), expires_at: at(3600 + day) },
    { ...keyOf(2), status: 'active', issued_at: at(3600), expires_at: null },
  ])
  t.equal(project?.keys.filter((k) => k.status === 'active').length, 1, 'one active key')
  t.notOk(
    project?.keys.some((k) => k.prefix === firstKey.prefix),
    'the first key is gone',
  )
})

t.test('revoke: every key revoked, grace keys included, and keys_revoked_at set', async (t) => {
  const project = spec(t)
    .given([...team, rotated(1, 60)])
    .when(revoke('usr_admin', 120))
    .then([{ type: 'api_key_revoked', data: { revoked_at: at(120) } }])
  t.equal(project?.keys_revoked_at, at(120))
  t.equal(project?.keys.length, 2)
  t.ok(
    project?.keys.every((k) => k.status === 'revoked' && k.expires_at === at(120)),
    'every key is revoked now',
  )
  if (project === null) return
  t.equal(activeKeyPrefix(project), null, 'no active key after revocation')
  spec(t)
    .givenState(project)
    .when(rotate('usr_owner', 2, 180))
    .thenThrows(KeyRevoked, 'key_revoked')
  spec(t).givenState(project).when(revoke('usr_owner', 180)).thenThrows(AlreadyRevoked, 'already_revoked')
  spec(t)
    .givenState(project)
    .when(rotate(null, 2, 180))
    .thenThrows(KeyRevoked, 'key_revoked', 'not even by the operator')
})

t.test('key routes: non-members get project_not_found, members below admin get forbidden, the operator may', async (t) => {
  spec(t).given(team).when(rotate('usr_stranger')).thenThrows(ProjectNotFound, 'project_not_found')
  spec(t).given(team).when(revoke('usr_stranger')).thenThrows(ProjectNotFound, 'project_not_found')
  for (const actor of ['usr_member', 'usr_viewer']) {
    spec(t).given(team).when(rotate(actor)).thenThrows(Forbidden, 'forbidden', `rotate by ${actor}`)
    spec(t).given(team).when(revoke(actor)).thenThrows(Forbidden, 'forbidden', `revoke by ${actor}`)
  }
  spec(t)
    .given(team)
    .when(rotate(null, 1, 60))
    .then([rotated(1, 60)], 'operator rotates')
  spec(t)
    .given(team)
    .when(revoke(null, 60))
    .then([{ type: 'api_key_revoked', data: { revoked_at: at(60) } }], 'operator revokes')
  spec(t)
    .given(createdEvents())
    .when(rotate(null, 1, 60))
    .then([rotated(1, 60)], 'operator on a project without members')
  spec(t).given([]).when(rotate(null)).thenThrows(ProjectNotFound, 'project_not_found', 'no project')
})

t.test('record audit-log export: admin and owner, recorded with who exported', async (t) => {
  const exportBy = (actor: string) => command('record_audit_log_export', { actor_user_id: actor, from: at(0), until: at(30), format: 'csv' })
  for (const actor of ['usr_owner', 'usr_admin']) {
    spec(t)
      .given(team)
      .when(exportBy(actor))
      .then([{ type: 'audit_log_exported', data: { from: at(0), until: at(30), format: 'csv', exported_by: actor, exported_at: at(60) } }], actor)
  }
  for (const actor of ['usr_member', 'usr_viewer']) spec(t).given(team).when(exportBy(actor)).thenThrows(Forbidden, 'forbidden', actor)
  spec(t).given(team).when(exportBy('usr_stranger')).thenThrows(ProjectNotFound, 'project_not_found', 'not a member')
})

t.test('rename: admin and above, nothing when the name is unchanged', async (t) => {
  const project = spec(t)
    .given(team)
    .when(command('rename_project', { actor_user_id: 'usr_admin', name: 'Acme 2' }))
    .then([{ type: 'project_renamed', data: { name: 'Acme 2', previous_name: 'Acme', renamed_at: at(60) } }])
  t.equal(project?.name, 'Acme 2')
  spec(t)
    .given(team)
    .when(command('rename_project', { actor_user_id: 'usr_owner', name: 'Acme' }))
    .then([])
  spec(t)
    .given(team)
    .when(command('rename_project', { actor_user_id: 'usr_member', name: 'X' }))
    .thenThrows(Forbidden, 'forbidden')
  spec(t)
    .given(team)
    .when(command('rename_project', { actor_user_id: 'usr_stranger', name: 'X' }))
    .thenThrows(ProjectNotFound, 'project_not_found')
})

t.test('delete project: owner only, never their last project; the operator may always', async (t) => {
  const del = (actor: string | null, others: number) => command('delete_project', { actor_user_id: actor, other_projects_of_actor: others }, 300)
  const withInvite: ProjectEvent[] = [
    ...team,
    rotated(1, 60),
    {
      type: 'member_invited',
      data: {
        invite_id: 'inv_1',
        email: 'new@acme.test',
        role: 'member',
        token_hash: 'tok_1',
        expires_at: at(7 * day),
        invited_by: 'usr_owner',
        invited_at: at(60),
      },
    },
  ]
  const project = spec(t)
    .given(withInvite)
    .when(del('usr_owner', 1))
    .then([{ type: 'project_deleted', data: { deleted_at: at(300) } }])
  t.equal(project?.status, 'deleted')
  t.ok(
    project?.keys.every((k) => k.status === 'revoked'),
    'its keys are dead',
  )
  t.same(project?.invites, [], 'its invites are dropped')
  spec(t).given(team).when(del('usr_owner', 0)).thenThrows(LastProject, 'last_project')
  spec(t)
    .given(team)
    .when(del(null, 0))
    .then([{ type: 'project_deleted', data: { deleted_at: at(300) } }], 'operator')
  spec(t).given(team).when(del('usr_admin', 3)).thenThrows(Forbidden, 'forbidden')
  spec(t).given(team).when(del('usr_viewer', 3)).thenThrows(Forbidden, 'forbidden')
  spec(t).given(team).when(del('usr_stranger', 3)).thenThrows(ProjectNotFound, 'project_not_found')
  if (project === null) return
  const later: ProjectCommand[] = [
    rotate('usr_owner'),
    revoke('usr_owner'),
    command('rename_project', { actor_user_id: 'usr_owner', name: 'X' }),
    del('usr_owner', 1),
    command('invite_member', {
      actor_user_id: 'usr_owner',
      invite_id: 'inv_2',
      email: 'x@acme.test',
      role: 'member',
      token_hash: 'tok_2',
      expires_at: at(8 * day),
    }),
    command('accept_invite', { invite_id: 'inv_1', token_hash: 'tok_1', user_id: 'usr_new', email: 'new@acme.test' }),
    command('change_member_role', { actor_user_id: 'usr_owner', user_id: 'usr_member', role: 'viewer' }),
    command('remove_member', { actor_user_id: 'usr_owner', user_id: 'usr_member' }),
    command('remove_member', { actor_user_id: 'usr_viewer', user_id: 'usr_viewer' }),
    command('transfer_ownership', { actor_user_id: 'usr_owner', user_id: 'usr_admin' }),
    rotate(null),
  ]
  for (const c of later) spec(t).givenState(project).when(c).thenThrows(ProjectNotFound, 'project_not_found', `${c.type} on a deleted project`)
})

const invite = (actor: string | null, email: string, role: string, n = 1, seconds = 60) =>
  command(
    'invite_member',
    { actor_user_id: actor, invite_id: `inv_${n}`, email, role, token_hash: `tok_${n}`, expires_at: at(seconds + 7 * day) },
    seconds,
  )

const invited = (invitedBy: string, email: string, role: ProjectRole, n = 1, seconds = 60): ProjectEvent => ({
  type: 'member_invited',
  data: {
    invite_id: `inv_${n}`,
    email,
    role,
    token_hash: `tok_${n}`,
    expires_at: at(seconds + 7 * day),
    invited_by: invitedBy,
    invited_at: at(seconds),
  },
})

t.test('invite member: admin and above, assignable roles only, not an existing member', async (t) => {
  const project = spec(t)
    .given(team)
    .when(invite('usr_owner', 'new@acme.test', 'admin'))
    .then([invited('usr_owner', 'new@acme.test', 'admin')])
  t.same(project?.invites, [(invited('usr_owner', 'new@acme.test', 'admin') as Extract<ProjectEvent, { type: 'member_invited' }>).data])
  spec(t)
    .given(team)
    .when(invite('usr_admin', 'new@acme.test', 'member'))
    .then([invited('usr_admin', 'new@acme.test', 'member')], 'an admin invites a member')
  spec(t)
    .given(team)
    .when(invite('usr_admin', 'new@acme.test', 'admin'))
    .thenThrows(RoleExceedsCaller, 'role_exceeds_caller', 'an admin cannot make another admin')
  for (const role of ['member', 'viewer'] as const) {
    spec(t)
      .given(team)
      .when(invite('usr_owner', 'new@acme.test', role))
      .then([invited('usr_owner', 'new@acme.test', role)], `owner invites a ${role}`)
  }
  spec(t)
    .given(team)
    .when(invite(null, 'new@acme.test', 'viewer'))
    .then([invited('operator', 'new@acme.test', 'viewer')], 'the operator')
  spec(t)
    .given(team)
    .when(invite('usr_owner', 'new@acme.test', 'superuser'))
    .thenThrows(InvalidRole, 'invalid_role', 'unknown role')
  spec(t)
    .given(team)
    .when(invite('usr_owner', 'new@acme.test', 'owner'))
    .thenThrows(InvalidRole, 'invalid_role', 'owner is not assignable')
  spec(t)
    .given(team)
    .when(invite(null, 'new@acme.test', 'owner'))
    .thenThrows(InvalidRole, 'invalid_role', 'not even by the operator')
  spec(t)
    .given(team)
    .when(invite('usr_member', 'new@acme.test', 'viewer'))
    .thenThrows(Forbidden, 'forbidden', 'member')
  spec(t)
    .given(team)
    .when(invite('usr_viewer', 'new@acme.test', 'viewer'))
    .thenThrows(Forbidden, 'forbidden', 'viewer')
  spec(t)
    .given(team)
    .when(invite('usr_stranger', 'new@acme.test', 'viewer'))
    .thenThrows(ProjectNotFound, 'project_not_found', 'non-member')
  spec(t)
    .given(team)
    .when(invite('usr_owner', emailOf('usr_member'), 'admin'))
    .thenThrows(MemberExists, 'member_exists', 'a member')
  spec(t)
    .given(team)
    .when(invite('usr_admin', emailOf('usr_owner'), 'viewer'))
    .thenThrows(MemberExists, 'member_exists', 'the owner')
})

t.test('inviting the same address again replaces the earlier invite', async (t) => {
  const project = spec(t)
    .given([...team, invited('usr_owner', 'new@acme.test', 'viewer', 1)])
    .when(invite('usr_admin', 'new@acme.test', 'member', 2, 120))
    .then([invited('usr_admin', 'new@acme.test', 'member', 2, 120)])
  t.same(
    project?.invites.map((i) => i.invite_id),
    ['inv_2'],
  )
})

const accept = (over: Partial<ProjectData<'accept_invite'>> = {}, seconds = 3600) =>
  command('accept_invite', { invite_id: 'inv_1', token_hash: 'tok_1', user_id: 'usr_new', email: 'new@acme.test', ...over }, seconds)

t.test('accept invite: the invited user joins with the invited role, once', async (t) => {
  const given = [...team, invited('usr_admin', 'new@acme.test', 'member'), invited('usr_admin', 'other@acme.test', 'viewer', 2)]
  const project = spec(t)
    .given(given)
    .when(accept())
    .then([
      { type: 'team_invite_accepted', data: { invite_id: 'inv_1', user_id: 'usr_new' } },
      { type: 'member_joined', data: { user_id: 'usr_new', email: 'new@acme.test', role: 'member', joined_at: at(3600) } },
    ])
  t.same(
    project?.invites.map((i) => i.invite_id),
    ['inv_2'],
    'only the accepted invite is removed',
  )
  if (project === null) return
  t.equal(roleOf(project, 'usr_new'), 'member')
  spec(t).givenState(project).when(accept({}, 3700)).thenThrows(InvalidToken, 'invalid_token', 'accepting again')
  spec(t)
    .givenState(project)
    .when(accept({ user_id: 'usr_other' }, 3700))
    .thenThrows(InvalidToken, 'invalid_token', 'a used invite, by someone else')
})

t.test('accept invite refuses a wrong token, an expired invite, another address or an unknown invite', async (t) => {
  const given = [...team, invited('usr_admin', 'new@acme.test', 'member')]
  spec(t)
    .given(given)
    .when(accept({ token_hash: 'tok_x' }))
    .thenThrows(InvalidToken, 'invalid_token', 'wrong hash')
  spec(t)
    .given(given)
    .when(accept({}, 60 + 7 * day))
    .thenThrows(InvalidToken, 'invalid_token', 'at expiry')
  spec(t)
    .given(given)
    .when(accept({}, 60 + 8 * day))
    .thenThrows(InvalidToken, 'invalid_token', 'after expiry')
  spec(t)
    .given(given)
    .when(accept({ email: 'other@acme.test' }))
    .thenThrows(InvalidToken, 'invalid_token', 'other address')
  spec(t)
    .given(given)
    .when(accept({ invite_id: 'inv_9' }))
    .thenThrows(InvalidToken, 'invalid_token', 'unknown invite')
  spec(t)
    .given([...given, invited('usr_admin', 'new@acme.test', 'viewer', 2)])
    .when(accept())
    .thenThrows(InvalidToken, 'invalid_token', 'an invite replaced by a newer one')
  spec(t).given([]).when(accept()).thenThrows(ProjectNotFound, 'project_not_found', 'no project')
})

t.test('accept invite by a user who is already a member is refused', async (t) => {
  spec(t)
    .given([...team, invited('usr_admin', 'new@acme.test', 'admin')])
    .when(accept({ user_id: 'usr_viewer' }))
    .thenThrows(MemberExists, 'member_exists')
})

const changeRole = (actor: string | null, userId: string, role: string) =>
  command('change_member_role', { actor_user_id: actor, user_id: userId, role }, 120)

t.test('change member role', async (t) => {
  const project = spec(t)
    .given(team)
    .when(changeRole('usr_admin', 'usr_member', 'viewer'))
    .then([{ type: 'member_role_changed', data: { user_id: 'usr_member', role: 'viewer', previous_role: 'member', changed_at: at(120) } }])
  if (project !== null) t.equal(roleOf(project, 'usr_member'), 'viewer')
  spec(t)
    .given(team)
    .when(changeRole('usr_owner', 'usr_viewer', 'admin'))
    .then(
      [{ type: 'member_role_changed', data: { user_id: 'usr_viewer', role: 'admin', previous_role: 'viewer', changed_at: at(120) } }],
      'owner promotes',
    )
  spec(t)
    .given(team)
    .when(changeRole(null, 'usr_admin', 'member'))
    .then(
      [{ type: 'member_role_changed', data: { user_id: 'usr_admin', role: 'member', previous_role: 'admin', changed_at: at(120) } }],
      'operator demotes',
    )
  spec(t)
    .given(team)
    .when(changeRole('usr_admin', 'usr_member', 'member'))
    .then([], 'to the same role')
  spec(t)
    .given(team)
    .when(changeRole('usr_admin', 'usr_owner', 'viewer'))
    .thenThrows(CannotModifyOwner, 'cannot_modify_owner')
  spec(t)
    .given(team)
    .when(changeRole('usr_owner', 'usr_owner', 'admin'))
    .thenThrows(CannotModifyOwner, 'cannot_modify_owner', 'the owner on themself')
  spec(t)
    .given(team)
    .when(changeRole('usr_admin', 'usr_nobody', 'viewer'))
    .thenThrows(MemberNotFound, 'member_not_found')
  spec(t)
    .given(team)
    .when(changeRole('usr_owner', 'usr_member', 'owner'))
    .thenThrows(InvalidRole, 'invalid_role', 'to owner')
  spec(t)
    .given(team)
    .when(changeRole('usr_owner', 'usr_member', 'root'))
    .thenThrows(InvalidRole, 'invalid_role', 'unknown role')
  spec(t)
    .given(team)
    .when(changeRole('usr_member', 'usr_viewer', 'member'))
    .thenThrows(Forbidden, 'forbidden', 'by a member')
  spec(t)
    .given(team)
    .when(changeRole('usr_stranger', 'usr_viewer', 'member'))
    .thenThrows(ProjectNotFound, 'project_not_found')
})

const remove = (actor: string | null, userId: string) => command('remove_member', { actor_user_id: actor, user_id: userId }, 120)

t.test('remove member', async (t) => {
  const project = spec(t)
    .given(team)
    .when(remove('usr_admin', 'usr_member'))
    .then([{ type: 'member_removed', data: { user_id: 'usr_member', removed_at: at(120) } }])
  t.same(
    project?.members.map((m) => m.user_id),
    ['usr_owner', 'usr_admin', 'usr_viewer'],
  )
  if (project !== null) {
    t.equal(roleOf(project, 'usr_member'), null)
    spec(t).givenState(project).when(remove('usr_admin', 'usr_member')).thenThrows(MemberNotFound, 'member_not_found', 'removed twice')
    spec(t).givenState(project).when(rotate('usr_member')).thenThrows(ProjectNotFound, 'project_not_found', 'a removed member is a stranger')
  }
  spec(t).given(team).when(remove('usr_admin', 'usr_owner')).thenThrows(CannotRemoveOwner, 'cannot_remove_owner')
  spec(t).given(team).when(remove(null, 'usr_owner')).thenThrows(CannotRemoveOwner, 'cannot_remove_owner', 'not even by the operator')
  spec(t).given(team).when(remove('usr_owner', 'usr_owner')).thenThrows(CannotRemoveOwner, 'cannot_remove_owner', 'the owner leaving')
  spec(t)
    .given(team)
    .when(remove('usr_viewer', 'usr_viewer'))
    .then([{ type: 'member_removed', data: { user_id: 'usr_viewer', removed_at: at(120) } }], 'a viewer may leave')
  spec(t).given(team).when(remove('usr_member', 'usr_viewer')).thenThrows(Forbidden, 'forbidden', 'a member removing another')
  spec(t).given(team).when(remove('usr_stranger', 'usr_stranger')).thenThrows(ProjectNotFound, 'project_not_found', 'a stranger leaving')
  spec(t).given(team).when(remove('usr_owner', 'usr_nobody')).thenThrows(MemberNotFound, 'member_not_found')
  spec(t)
    .given(team)
    .when(remove(null, 'usr_admin'))
    .then([{ type: 'member_removed', data: { user_id: 'usr_admin', removed_at: at(120) } }], 'operator')
})

const transfer = (actor: string | null, userId: string) => command('transfer_ownership', { actor_user_id: actor, user_id: userId }, 120)

t.test('transfer ownership: owner only, to a member; the old owner becomes admin', async (t) => {
  const project = spec(t)
    .given(team)
    .when(transfer('usr_owner', 'usr_viewer'))
    .then([{ type: 'ownership_transferred', data: { from_user_id: 'usr_owner', to_user_id: 'usr_viewer', transferred_at: at(120) } }])
  if (project === null) return
  t.equal(roleOf(project, 'usr_viewer'), 'owner')
  t.equal(roleOf(project, 'usr_owner'), 'admin')
  t.equal(project.members.filter((m) => m.role === 'owner').length, 1, 'one owner')
  t.equal(project.owner_email, emailOf('usr_viewer'))
  spec(t).givenState(project).when(transfer('usr_owner', 'usr_admin')).thenThrows(Forbidden, 'forbidden', 'the old owner can no longer')
  spec(t).given(team).when(transfer('usr_admin', 'usr_member')).thenThrows(Forbidden, 'forbidden', 'by an admin')
  spec(t).given(team).when(transfer('usr_stranger', 'usr_member')).thenThrows(ProjectNotFound, 'project_not_found')
  spec(t).given(team).when(transfer('usr_owner', 'usr_nobody')).thenThrows(MemberNotFound, 'member_not_found')
  spec(t).given(team).when(transfer('usr_owner', 'usr_owner')).then([], 'to the owner themself')
  spec(t)
    .given(team)
    .when(transfer(null, 'usr_admin'))
    .then([{ type: 'ownership_transferred', data: { from_user_id: 'usr_owner', to_user_id: 'usr_admin', transferred_at: at(120) } }], 'operator')
})

t.test('roleOf, hasRoleAtLeast and activeKeyPrefix', async (t) => {
  const project = projectOf(team)
  t.equal(roleOf(project, 'usr_owner'), 'owner')
  t.equal(roleOf(project, 'usr_viewer'), 'viewer')
  t.equal(roleOf(project, 'usr_stranger'), null)
  t.equal(roleOf(project, null), 'owner', 'the operator acts as owner')
  const rank = (r: ProjectRole) => ['viewer', 'member', 'admin', 'owner'].indexOf(r)
  for (const role of projectRoles) {
    for (const least of projectRoles) t.equal(hasRoleAtLeast(role, least), rank(role) >= rank(least), `${role} at least ${least}`)
  }
  t.equal(activeKeyPrefix(project), firstKey.prefix)
  t.equal(activeKeyPrefix(projectOf([...team, rotated(1, 60), rotated(2, 120)])), keyOf(2).prefix)
  t.equal(activeKeyPrefix(projectOf([...team, { type: 'api_key_revoked', data: { revoked_at: at(60) } }])), null)
})

/**
 * Random team and key commands from random actors (the operator, members of every role, a
 * stranger). Refused commands are skipped as the API appends nothing for them.
 */
const users = ['usr_owner', 'usr_a', 'usr_b', 'usr_c'] as const
const actorArb = fc.constantFrom<string | null>(null, ...users, 'usr_x')
const userArb = fc.constantFrom<string>(...users, 'usr_x')
const roleArb = fc.constantFrom('admin', 'member', 'viewer', 'owner', 'root')

type TeamOp =
  | { type: 'rotate'; actor: string | null }
  | { type: 'revoke'; actor: string | null }
  | { type: 'invite'; actor: string | null; email: string; role: string }
  | { type: 'accept'; user: string; pick: number; rightToken: boolean; rightEmail: boolean }
  | { type: 'role'; actor: string | null; user: string; role: string }
  | { type: 'remove'; actor: string | null; user: string }
  | { type: 'transfer'; actor: string | null; user: string }

const teamOp: fc.Arbitrary<TeamOp> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ type: fc.constant('rotate' as const), actor: actorArb }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('revoke' as const), actor: actorArb }) },
  {
    weight: 5,
    arbitrary: fc.record({ type: fc.constant('invite' as const), actor: actorArb, email: userArb.map(emailOf), role: roleArb }),
  },
  {
    weight: 6,
    arbitrary: fc.record({
      type: fc.constant('accept' as const),
      user: userArb,
      pick: fc.nat(5),
      rightToken: fc.constantFrom(true, true, true, false),
      rightEmail: fc.boolean(),
    }),
  },
  { weight: 4, arbitrary: fc.record({ type: fc.constant('role' as const), actor: actorArb, user: userArb, role: roleArb }) },
  { weight: 3, arbitrary: fc.record({ type: fc.constant('remove' as const), actor: actorArb, user: userArb }) },
  {
    weight: 3,
    arbitrary: fc.record({
      type: fc.constant('transfer' as const),
      // Mostly the owner or the operator, the only actors a transfer is not refused for.
      actor: fc.oneof(fc.constantFrom<string | null>(null, 'usr_owner'), actorArb),
      user: userArb,
    }),
  },
)

const teamSteps = fc.array(fc.record({ op: teamOp, advanceS: fc.constantFrom(0, 1, 60, 3600, day, 8 * day) }), { maxLength: 40, size: 'max' })

/** Members join only through invitations, so half of the runs start with two of them already in. */
const teamScenario = fc.record({ seeded: fc.boolean(), steps: teamSteps })

const seedInvites: ReadonlyArray<{ user: string; role: ProjectRole }> = [
  { user: 'usr_a', role: 'admin' },
  { user: 'usr_b', role: 'member' },
]

/** The creation events, then (when seeded) invitations accepted by usr_a and usr_b, all decided. */
function startingHistory(seeded: boolean): ProjectEvent[] {
  const create = command(
    'create_project',
    { project_id: 'prj_1', name: 'Acme', plan: 'starter', owner_email: emailOf('usr_owner'), owner_user_id: 'usr_owner', key: firstKey },
    0,
  )
  const history = projectDecider.decide(create, null)
  if (!seeded) return history
  seedInvites.forEach(({ user, role }, i) => {
    const inv = command(
      'invite_member',
      { actor_user_id: 'usr_owner', invite_id: `inv_seed${i}`, email: emailOf(user), role, token_hash: `tok_seed${i}`, expires_at: at(7 * day) },
      0,
    )
    history.push(...projectDecider.decide(inv, fold(projectDecider, null, history)))
    const acc = command('accept_invite', { invite_id: `inv_seed${i}`, token_hash: `tok_seed${i}`, user_id: user, email: emailOf(user) }, 0)
    history.push(...projectDecider.decide(acc, fold(projectDecider, null, history)))
  })
  return history
}

function toTeamCommand(op: TeamOp, state: Project, n: number, nowIso: string): ProjectCommand {
  const meta = { now: nowIso }
  switch (op.type) {
    case 'rotate':
      return { type: 'rotate_api_key', data: { actor_user_id: op.actor, key: keyOf(n) }, meta }
    case 'revoke':
      return { type: 'revoke_api_keys', data: { actor_user_id: op.actor }, meta }
    case 'invite':
      return {
        type: 'invite_member',
        data: {
          actor_user_id: op.actor,
          invite_id: `inv_${n}`,
          email: op.email,
          role: op.role,
          token_hash: `tok_${n}`,
          expires_at: new Date(Date.parse(nowIso) + 7 * day * 1000).toISOString(),
        },
        meta,
      }
    case 'accept': {
      // Mostly an invite that exists, so that runs do get members in.
      const target = state.invites.length === 0 ? undefined : state.invites[op.pick % state.invites.length]
      const inviteId = target?.invite_id ?? 'inv_none'
      return {
        type: 'accept_invite',
        data: {
          invite_id: inviteId,
          token_hash: op.rightToken ? `tok_${inviteId.slice(4)}` : 'tok_wrong',
          user_id: op.rightEmail && target !== undefined ? `usr_${target.email.split('@')[0]}` : op.user,
          email: op.rightEmail && target !== undefined ? target.email : emailOf(op.user),
        },
        meta,
      }
    }
    case 'role':
      return { type: 'change_member_role', data: { actor_user_id: op.actor, user_id: op.user, role: op.role }, meta }
    case 'remove':
      return { type: 'remove_member', data: { actor_user_id: op.actor, user_id: op.user }, meta }
    case 'transfer':
      return { type: 'transfer_ownership', data: { actor_user_id: op.actor, user_id: op.user }, meta }
  }
}

t.test('random team and key commands keep one owner, at most one active key, and fold to the same state', async (t) => {
  const numRuns = 300
  const seen = new Map<string, number>()
  const property = fc.property(teamScenario, ({ seeded, steps }) => {
    const history = startingHistory(seeded)
    let state: ProjectAggregate = fold(projectDecider, projectDecider.initialState, history)
    let clock = t0
    steps.forEach(({ op, advanceS }, i) => {
      clock += advanceS * 1000
      if (state === null) throw new Error('the project disappeared')
      const command = toTeamCommand(op, state, i + 1, new Date(clock).toISOString())
      const step = decideChecked(projectDecider, command, state)
      if ('refusal' in step) {
        seen.set(`refused:${step.refusal.code}`, (seen.get(`refused:${step.refusal.code}`) ?? 0) + 1)
        return
      }
      const events = step.events
      state = step.next
      history.push(...events)
      for (const e of events) seen.set(e.type, (seen.get(e.type) ?? 0) + 1)
      if (state === null) throw new Error('the project disappeared')
      const owners = state.members.filter((m) => m.role === 'owner')
      assert.equal(owners.length, 1, `exactly one owner after ${command.type}: ${JSON.stringify(state.members)}`)
      assert.equal(new Set(state.members.map((m) => m.user_id)).size, state.members.length, 'members are unique')
      const active = state.keys.filter((k) => k.status === 'active')
      assert.ok(active.length <= 1, `at most one active key: ${JSON.stringify(state.keys)}`)
      assert.equal(active.length, state.keys_revoked_at === null ? 1 : 0, 'one active key until revoked, none after')
      assert.ok(state.keys.filter((k) => k.status === 'grace').length <= 1, 'at most one grace key')
      assert.ok(
        state.invites.every((inv) => inv.role !== 'owner'),
        'no invite grants ownership',
      )
      assert.deepEqual(fold(projectDecider, projectDecider.initialState, history), state, 'folding every event gives the state')
    })
    assert.deepEqual(fold(projectDecider, projectDecider.initialState, history), state, 'the final state is the fold of the history')
  })
  const details = fc.check(property, { numRuns })
  t.equal(details.failed, false, fc.defaultReportMessage(details) ?? `team invariants (${numRuns} runs)`)
  for (const type of [
    'api_key_rotated',
    'api_key_revoked',
    'member_invited',
    'team_invite_accepted',
    'member_role_changed',
    'member_removed',
    'ownership_transferred',
  ]) {
    t.ok((seen.get(type) ?? 0) > 0, `the generator reaches ${type}`)
  }
  for (const code of [
    'forbidden',
    'project_not_found',
    'invalid_role',
    'invalid_token',
    'member_not_found',
    'cannot_modify_owner',
    'cannot_remove_owner',
    'key_revoked',
  ]) {
    t.ok((seen.get(`refused:${code}`) ?? 0) > 0, `the generator hits the refusal ${code}`)
  }
})

t.test('below the owner, nobody manages a role at or above their own (role_exceeds_caller)', async (t) => {
  const twoAdmins = [...team, joined('usr_admin2', 'admin')]
  spec(t)
    .given(twoAdmins)
    .when(changeRole('usr_admin', 'usr_admin2', 'viewer'))
    .thenThrows(RoleExceedsCaller, 'role_exceeds_caller', 'an admin demoting an admin')
  spec(t)
    .given(twoAdmins)
    .when(changeRole('usr_admin', 'usr_member', 'admin'))
    .thenThrows(RoleExceedsCaller, 'role_exceeds_caller', 'an admin promoting to admin')
  spec(t).given(twoAdmins).when(remove('usr_admin', 'usr_admin2')).thenThrows(RoleExceedsCaller, 'role_exceeds_caller', 'an admin removing an admin')
  spec(t)
    .given(twoAdmins)
    .when(remove('usr_admin2', 'usr_admin2'))
    .then([{ type: 'member_removed', data: { user_id: 'usr_admin2', removed_at: at(120) } }], 'an admin may leave')
  spec(t)
    .given(twoAdmins)
    .when(changeRole('usr_owner', 'usr_admin2', 'viewer'))
    .then(
      [{ type: 'member_role_changed', data: { user_id: 'usr_admin2', role: 'viewer', previous_role: 'admin', changed_at: at(120) } }],
      'the owner manages admins',
    )
})

t.test('set billing state: a provider event id is applied once, even after a later event moved the state on', async (t) => {
  const setState = (state: BillingState, id: string | null, seconds: number) =>
    command('set_billing_state', { state, provider_event_id: id }, seconds)
  const pastDue: ProjectEvent = {
    type: 'billing_state_changed',
    data: { state: 'past_due', previous_state: 'active', provider_event_id: 'evt_a', changed_at: at(60) },
  }
  const backToActive: ProjectEvent = {
    type: 'billing_state_changed',
    data: { state: 'active', previous_state: 'past_due', provider_event_id: 'evt_b', changed_at: at(120) },
  }
  spec(t)
    .given(createdEvents())
    .when(setState('past_due', 'evt_a', 60))
    .then([pastDue])
  const after = spec(t)
    .given([...createdEvents(), pastDue])
    .when(setState('active', 'evt_b', 120))
    .then([backToActive])
  t.strictSame(
    after?.provider_events,
    [
      { id: 'evt_a', at: at(60) },
      { id: 'evt_b', at: at(120) },
    ],
    'both ids are remembered',
  )
  spec(t)
    .given([...createdEvents(), pastDue, backToActive])
    .when(setState('past_due', 'evt_a', 180))
    .then([], 'a replay of evt_a changes nothing')
  const confirmed = spec(t)
    .given([...createdEvents(), pastDue, backToActive])
    .when(setState('active', 'evt_c', 180))
    .then(
      [{ type: 'billing_state_confirmed', data: { state: 'active', provider_event_id: 'evt_c', confirmed_at: at(180) } }],
      'the current state, reported: recorded as a confirmation',
    )
  t.ok(
    confirmed?.provider_events?.some((e) => e.id === 'evt_c'),
    'so its replay is known too',
  )
  spec(t)
    .given([...createdEvents(), pastDue])
    .when(setState('past_due', null, 180))
    .then([], 'without an event id, the same state is a no-op')
})

t.test('set billing state: provider event ids are remembered for a day, a hundred at most', async (t) => {
  const confirmations = Array.from({ length: 105 }, (_, i): ProjectEvent => ({
    type: 'billing_state_confirmed',
    data: { state: 'active', provider_event_id: `evt_${i}`, confirmed_at: at(60 + i) },
  }))
  const project = projectOf([...createdEvents(), ...confirmations])
  t.equal(project.provider_events?.length, 100, 'the newest 100')
  t.equal(project.provider_events?.[0]?.id, 'evt_5', 'the oldest dropped first')
  const dayLater: ProjectEvent = {
    type: 'billing_state_confirmed',
    data: { state: 'active', provider_event_id: 'evt_late', confirmed_at: at(60 + 104 + day) },
  }
  t.strictSame(
    projectOf([...createdEvents(), ...confirmations, dayLater]).provider_events,
    [{ id: 'evt_late', at: at(60 + 104 + day) }],
    'a day later the earlier ones are forgotten',
  )
})

t.test('evolve on a missing state: project_created builds it, any other event throws', async (t) => {
  const [created, keyIssued, memberJoined] = team
  evolveOnMissingState(t, projectDecider, created!, [
    keyIssued!,
    memberJoined!,
    rotated(2, 60),
    { type: 'api_key_revoked', data: { revoked_at: at(60) } },
    { type: 'project_renamed', data: { name: 'Acme 2', previous_name: 'Acme', renamed_at: at(60) } },
    { type: 'member_removed', data: { user_id: 'usr_member', removed_at: at(120) } },
    { type: 'billing_state_confirmed', data: { state: 'active', provider_event_id: 'evt_c', confirmed_at: at(180) } },
    { type: 'project_deleted', data: { deleted_at: at(300) } },
  ])
})

t.test('staff override the request limit above the plan, until it expires', async (t) => {
  const project = fold(projectDecider, null, [
    ...projectDecider.decide(
      {
        type: 'create_project',
        data: { project_id: 'prj_o', name: 'o', plan: 'free', owner_email: null, key: { prefix: 'p', key_hash: 'h' } },
        meta: { now: '2025-03-01T00:00:00.000Z' },
      },
      null,
    ),
  ])
  const override = (requests_per_hour: number, expires_at: string) =>
    projectDecider.decide(
      {
        type: 'override_rate_limit',
        data: { staff_user_id: 'usr_staff', requests_per_hour, plan_requests_per_hour: 1000, expires_at, reason: 'launch' },
        meta: { now: '2025-03-01T00:00:00.000Z' },
      },
      project,
    )
  t.throws(() => override(1000, '2025-03-02T00:00:00.000Z'), InvalidRateLimitOverride, 'not above the plan')
  t.throws(() => override(5000, '2025-03-01T00:00:00.000Z'), InvalidRateLimitOverride, 'not in the future')
  t.throws(() => override(5000, '2026-03-03T00:00:00.000Z'), InvalidRateLimitOverride, 'over a year ahead')
  const overridden = fold(projectDecider, project, override(5000, '2025-03-02T00:00:00.000Z'))!
  t.equal(requestsPerHourOf(overridden, 1000, new Date('2025-03-01T12:00:00.000Z')), 5000, 'while it lasts')
  t.equal(requestsPerHourOf(overridden, 1000, new Date('2025-03-02T00:00:00.000Z')), 1000, 'from its expiry on')
  t.equal(requestsPerHourOf(overridden, 50_000, new Date('2025-03-01T12:00:00.000Z')), 50_000, 'a larger plan wins')
})

t.test('promotions count in their periods: bonuses add up, the largest discount applies', async (t) => {
  const project = {
    promotions: [
      { code: 'A', kind: 'allowance_bonus' as const, amount: 100, first_period: '2025-11-01', periods: 3 },
      { code: 'B', kind: 'allowance_bonus' as const, amount: 10, first_period: '2026-01-01', periods: 1 },
      { code: 'C', kind: 'overage_discount' as const, amount: 20, first_period: '2025-12-01', periods: 1 },
      { code: 'D', kind: 'overage_discount' as const, amount: 50, first_period: '2025-12-01', periods: 1 },
    ],
  } as Project
  t.same(promotionTermsOf(project, '2025-10-01'), { bonusJobs: 0, discountPercent: 0 }, 'before')
  t.same(promotionTermsOf(project, '2025-12-01'), { bonusJobs: 100, discountPercent: 50 })
  t.same(promotionTermsOf(project, '2026-01-01'), { bonusJobs: 110, discountPercent: 0 }, 'across the year')
  t.same(promotionTermsOf(project, '2026-02-01'), { bonusJobs: 0, discountPercent: 0 }, 'after')
  t.equal(lastPeriodOf(project.promotions![0]!), '2026-01-01')
})

t.test("retention's expiry moves the project's history horizon forward only, deleted project included", async (t) => {
  const created = fold(projectDecider, null, createdEvents())
  const expire = (through: number): ProjectCommand => ({ type: 'record_history_expired', data: { through_seq: through, jobs: 3 }, meta: { now } })
  const first = projectDecider.decide(expire(40), created)
  t.same(first, [{ type: 'history_expired', data: { through_seq: 40, jobs: 3, expired_at: now } }])
  const after = fold(projectDecider, created, first)
  t.equal(after!.history_expired_through, 40)
  t.same(projectDecider.decide(expire(40), after), [], 'the same horizon again decides nothing')
  t.same(projectDecider.decide(expire(12), after), [], 'an older one neither')
  const deleted = fold(projectDecider, after, [{ type: 'project_deleted', data: { deleted_at: now } }])
  t.equal(projectDecider.decide(expire(90), deleted).length, 1, "a deleted project's jobs expire too")
  t.same(projectDecider.decide(expire(90), null), [], 'no project, nothing to record')
})
