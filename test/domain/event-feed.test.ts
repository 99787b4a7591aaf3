import t from 'tap'
import {
  feedAggregates,
  feedEventTypes,
  feedSecretFields,
  isFeedEventType,
  keepsWork,
  readableByTenant,
  singleAggregateOf,
  workOf,
} from '../../domain/event-feed.ts'

t.test('the catalogue: every type belongs to one aggregate of the feed', async (t) => {
  const all = feedAggregates.flatMap((a) => feedEventTypes[a])
  t.equal(new Set(all).size, all.length, 'no type in two aggregates')
  for (const type of ['job_created', 'job_progressed', 'project_created', 'history_expired', 'delivery_attempted', 'webhook_deleted'])
    t.ok(isFeedEventType(type), type)
  for (const type of ['user_signed_up', 'email_claimed', 'promo_code_created', 'job.created'])
    t.notOk(isFeedEventType(type), `${type}: not a feed type`)
})

t.test('one aggregate is asked of the log when every type asked is its own', async (t) => {
  t.equal(singleAggregateOf(new Set(['job_created', 'job_succeeded'])), 'job')
  t.equal(singleAggregateOf(new Set(['job_progressed'])), 'progress')
  t.equal(singleAggregateOf(new Set(['job_created', 'alert_triggered'])), null)
  t.equal(singleAggregateOf(null), null)
})

t.test('queue and job type filters keep work with them, and drop what has none', async (t) => {
  const job = workOf('job', { queue: 'emails', job_type: 'send' })
  t.ok(keepsWork({ queue: 'emails', jobType: null }, job))
  t.ok(keepsWork({ queue: 'emails', jobType: 'send' }, job))
  t.notOk(keepsWork({ queue: 'other', jobType: null }, job))
  t.notOk(keepsWork({ queue: null, jobType: 'other' }, job))
  t.ok(keepsWork({ queue: null, jobType: null }, null), 'no filter keeps everything')
  t.notOk(keepsWork({ queue: 'emails', jobType: null }, workOf('project', { id: 'prj_1' })), 'a project has no queue')
  t.same(workOf('alert', { queue: 'emails' }), { queue: 'emails', job_type: null })
})

t.test('no secret field at any depth of a project or webhook event; tenant payloads pass as they are', async (t) => {
  const sealed = Object.fromEntries(feedSecretFields.map((f) => [f, 'SECRET']))
  const project = {
    keys: [{ prefix: 'jsk_x', ...sealed }],
    invites: [{ email: 'a@b', ...sealed }],
    nested: { deeper: [{ ...sealed, kept: 1 }] },
    ...sealed,
  }
  for (const aggregate of ['project', 'webhook'] as const) {
    const shown = JSON.stringify(readableByTenant(aggregate, project))
    t.notMatch(shown, /SECRET/, `${aggregate}: none left`)
    t.match(shown, /"kept":1/, `${aggregate}: the rest kept`)
  }
  const payload = { password_hash: 'the tenant’s own field', nested: { key_hash: 'theirs' } }
  t.same(readableByTenant('job', payload), payload, "a job's data is the tenant's own: untouched")
})
