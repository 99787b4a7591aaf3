import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { dispatcherConsumerName, eventsStreamName } from '../../streams/names.ts'
import { eventually, startHarness } from '../support/harness.ts'

// Issue 14, item 4: the dispatcher skips the job events of a project without webhook
// subscriptions by subject, without decoding them or looking the project up again: one lookup
// while nothing changes (it was one a second).
t.test('a project without subscriptions is looked up once, however long its jobs keep coming', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
  const lookups: string[] = []
  const sql = h.runtime.sql
  // Counts the dispatcher's reads of the webhooks read model (the only query it makes per project).
  h.runtime.sql = new Proxy(sql, {
    apply(target, thisArg, args: [TemplateStringsArray, ...unknown[]]) {
      if (Array.isArray(args[0]) && args[0].join('?').includes('FROM webhooks')) lookups.push(String(args[1]))
      return Reflect.apply(target, thisArg, args)
    },
  })
  t.teardown(() => void (h.runtime.sql = sql))
  await h.startRole('dispatcher')
  const ns = h.config.namespace
  const consumed = async () => {
    const stream = await h.runtime.nats.jsm.streams.info(eventsStreamName(ns))
    const consumer = await h.runtime.nats.jsm.consumers.info(eventsStreamName(ns), dispatcherConsumerName(ns))
    return consumer.ack_floor.stream_seq >= stream.state.last_seq
  }
  for (let i = 0; i < 4; i++) {
    t.equal((await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'no-hooks', payload: { i } })).status, 201)
    await eventually(consumed, 15_000, 'the dispatcher consumed the job event')
    // Spread over seconds: a cache that lasts a second would look the project up again each time.
    await sleep(1_100)
  }
  t.equal(lookups.filter((projectId) => projectId === h.projectId).length, 1, 'one lookup of the project')
})
