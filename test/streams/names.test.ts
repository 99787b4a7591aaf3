import t from 'tap'
import {
  deliverySubject,
  eventSubject,
  parseDeliverySubject,
  parseEventSubject,
  parseReplySubject,
  replySubject,
  replySubjectsFilter,
  subjectMatcher,
  subscriptionDelivererConsumerName,
} from '../../streams/names.ts'

t.test('an event subject splits back into the parts it was built from', async (t) => {
  const subject = eventSubject('ns1', 'prj_1', 'job', 'job_2')
  t.equal(subject, 'ns1.evt.prj_1.job.job_2')
  t.strictSame(parseEventSubject('ns1', subject), { projectId: 'prj_1', aggregate: 'job', aggregateId: 'job_2' })
  t.equal(parseEventSubject('ns2', subject), null, 'another namespace')
  t.equal(parseEventSubject('ns1', 'ns1.dlv.prj_1.whk_1'), null, 'another shape')
})

t.test('a delivery subject splits back into project and subscription', async (t) => {
  const subject = deliverySubject('ns1', 'prj_1', 'whk_1')
  t.strictSame(parseDeliverySubject('ns1', subject), { projectId: 'prj_1', webhookId: 'whk_1' })
  t.equal(parseDeliverySubject('ns1', 'ns1.ctl.deliveries'), null)
  t.equal(subscriptionDelivererConsumerName('ns1', 'prj_1', 'whk_1'), 'ns1_deliverer_prj_1_whk_1')
})

t.test('a reply subject gives back its token, and only its inbox’s', async (t) => {
  t.equal(parseReplySubject('_INBOX.abc', replySubject('_INBOX.abc', '1z')), '1z')
  t.equal(replySubjectsFilter('_INBOX.abc'), '_INBOX.abc.*')
  t.equal(parseReplySubject('_INBOX.abc', '_INBOX.abd.1z'), null)
})

t.test('ids that are not one subject token are refused', async (t) => {
  t.throws(() => eventSubject('ns1', 'prj.1', 'job', 'job_2'))
  t.throws(() => deliverySubject('ns1', 'prj_1', 'whk>'))
})

t.test('a subject matcher applies a filter as JetStream does: `*` one token, `>` one or more at the end', async (t) => {
  const cases: [string, string, boolean][] = [
    ['ns.evt.prj_1.>', 'ns.evt.prj_1.job.job_2', true],
    ['ns.evt.prj_1.>', 'ns.evt.prj_1', false],
    ['ns.evt.prj_1.>', 'ns.evt.prj_12.job.job_2', false],
    ['ns.evt.prj_1.job.*', 'ns.evt.prj_1.job.job_2', true],
    ['ns.evt.prj_1.job.*', 'ns.evt.prj_1.progress.job_2', false],
    ['ns.evt.prj_1.job.*', 'ns.evt.prj_1.job.job_2.x', false],
    ['ns.evt.prj_1.*.job_2', 'ns.evt.prj_1.progress.job_2', true],
    ['ns.evt.prj_1.*.job_2', 'ns.evt.prj_1.progress.job_3', false],
    ['ns.evt.prj_1.job.job_2', 'ns.evt.prj_1.job.job_2', true],
  ]
  for (const [filter, subject, matches] of cases) t.equal(subjectMatcher(filter)(subject), matches, `${filter} ${subject}`)
})
