import t from 'tap'
import { auditTrailDecider, checkpointSignedText, type AuditTrailEvent, type Checkpoint } from '../../domain/audit-checkpoint.ts'
import { auditExpiryDecider, leavesOfRun } from '../../domain/audit-expiry.ts'
import { auditSigningKeyDecider, SigningKeyRetired } from '../../domain/audit-signing-key.ts'
import { InvalidState } from '../../domain/errors.ts'
import { deciderSpec } from '../support/decider-spec.ts'

const now = '2026-11-26T12:00:00.000Z'
const checkpoint = (tree_size: number, root_hash = `root-${tree_size}`): Checkpoint => ({
  project_id: 'prj_a',
  tree_size,
  root_hash,
  issued_at: now,
  key_id: 'k1',
  signature: 'sig',
})
const issue = (c: Checkpoint) => ({ type: 'issue_checkpoint' as const, data: c, meta: { now } })
const issued = (c: Checkpoint): AuditTrailEvent => ({ type: 'checkpoint_issued', data: c })

t.test('checkpoints only grow, and one size has one root', async (t) => {
  const spec = deciderSpec(t, auditTrailDecider)
  spec
    .given([])
    .when(issue(checkpoint(0)))
    .then([issued(checkpoint(0))])
  const state = spec
    .given([issued(checkpoint(5))])
    .when(issue(checkpoint(9)))
    .then([issued(checkpoint(9))])
  t.same(state, { project_id: 'prj_a', latest: checkpoint(9), issued: 2 })
  spec
    .given([issued(checkpoint(9))])
    .when(issue(checkpoint(9)))
    .then([], 'the same tree again: the newest stands')
  spec
    .given([issued(checkpoint(9))])
    .when(issue(checkpoint(5)))
    .thenThrows(InvalidState, 'invalid_state')
  spec
    .given([issued(checkpoint(9))])
    .when(issue(checkpoint(9, 'another')))
    .thenThrows(InvalidState, 'invalid_state')
})

t.test('the signed text is the prefix and the JCS of the five signed fields', async (t) => {
  t.equal(
    checkpointSignedText(checkpoint(3)),
    'jobsvc-audit-checkpoint-v1\n{"issued_at":"2026-11-26T12:00:00.000Z","key_id":"k1","project_id":"prj_a","root_hash":"root-3","tree_size":3}',
  )
})

t.test('a key is activated once, retired once, and refuses to be activated again once retired', async (t) => {
  const spec = deciderSpec(t, auditSigningKeyDecider)
  const activate = { type: 'activate_signing_key' as const, data: { key_id: 'k1', public_key: 'cHVi' }, meta: { now } }
  const activated = {
    type: 'signing_key_activated' as const,
    data: { key_id: 'k1', algorithm: 'Ed25519' as const, public_key: 'cHVi', valid_from: now },
  }
  spec.given([]).when(activate).then([activated])
  spec.given([activated]).when(activate).then([], 'activated already: nothing')
  const retire = (valid_until: string) => ({ type: 'retire_signing_key' as const, data: { valid_until }, meta: { now } })
  spec
    .given([activated])
    .when(retire('2026-11-27T00:00:00.000Z'))
    .then([{ type: 'signing_key_retired', data: { valid_until: '2026-11-27T00:00:00.000Z' } }])
  spec
    .given([activated])
    .when(retire('2026-01-01T00:00:00.000Z'))
    .then([{ type: 'signing_key_retired', data: { valid_until: now } }], 'never before it opened')
  const retired = { type: 'signing_key_retired' as const, data: { valid_until: '2026-11-27T00:00:00.000Z' } }
  spec.given([activated, retired]).when(retire('2026-12-01T00:00:00.000Z')).then([], 'a window closes once')
  spec.given([activated, retired]).when(activate).thenThrows(SigningKeyRetired, 'invalid_state')
})

t.test('expired leaves are recorded as runs, counted by their hashes', async (t) => {
  const spec = deciderSpec(t, auditExpiryDecider)
  const runs = [
    { from: 4, hashes: Buffer.alloc(96).toString('base64') },
    { from: 10, hashes: Buffer.alloc(32).toString('base64') },
  ]
  const state = spec
    .given([])
    .when({ type: 'record_expired_leaves', data: { project_id: 'prj_a', runs }, meta: { now } })
    .then([{ type: 'leaves_expired', data: { project_id: 'prj_a', runs, expired_at: now } }])
  t.same(state, { project_id: 'prj_a', leaves: 4 })
  t.equal(leavesOfRun(runs[0]!), 3)
  spec
    .given([])
    .when({ type: 'record_expired_leaves', data: { project_id: 'prj_a', runs: [] }, meta: { now } })
    .then([], 'nothing to record')
})
