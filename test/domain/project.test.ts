import t from 'tap'
import { ProjectAlreadyExists } from '../../domain/errors.ts'
import { projectDecider, type ProjectCommand, type ProjectEvent } from '../../domain/project.ts'
import { deciderSpec } from '../support/decider-spec.ts'

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
    { type: 'project_created', data: { project_id: 'prj_1', name: 'Acme', plan: 'starter', owner_email: ownerEmail, owner_user_id: null, created_at: now } },
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
  })
})

t.test('create project without an owner email', async (t) => {
  const command: ProjectCommand = { ...createProject, data: { ...createProject.data, owner_email: null } }
  const project = deciderSpec(t, projectDecider)
    .given([])
    .when(command)
    .then(createdEvents(null))
  t.equal(project?.owner_email, null)
})

t.test('create project refuses an existing project', async (t) => {
  deciderSpec(t, projectDecider).given(createdEvents()).when(createProject).thenThrows(ProjectAlreadyExists, 'invalid_state')
})
