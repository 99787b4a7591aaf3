import t from 'tap'
import { headers } from '@nats-io/transport-node'
import { encode } from '../../streams/codec.ts'
import { JetStreamPublishError, JetStreamPublisher } from '../../streams/publisher.ts'
import { openIsolatedStore } from '../support/isolated-store.ts'

const { names, nats } = await openIsolatedStore(t, import.meta.filename, { database: false })
const subject = (id: string) => `${names.namespace}.evt.prj_pub.job.${id}`

t.test('an acknowledged publish resolves to its stream sequence', async (t) => {
  const publisher = new JetStreamPublisher(nats.nc)
  t.teardown(() => publisher.close())
  const first = await publisher.publish(subject('a'), encode({ n: 1 }), headers())
  const second = await publisher.publish(subject('a'), encode({ n: 2 }), headers())
  t.equal(second.seq, first.seq + 1)
  t.equal(first.duplicate, false)
})

t.test('JetStream refusals carry their error code', async (t) => {
  const publisher = new JetStreamPublisher(nats.nc)
  t.teardown(() => publisher.close())
  const h = headers()
  h.set('Nats-Expected-Last-Subject-Sequence', '999999')
  const refused = await publisher.publish(subject('b'), encode({}), h).catch((err) => err)
  t.type(refused, JetStreamPublishError)
  t.equal(refused.errCode, 10071, 'wrong last sequence')
})

t.test('a subject no stream holds is refused at once, not after the timeout', async (t) => {
  const publisher = new JetStreamPublisher(nats.nc, 60_000)
  t.teardown(() => publisher.close())
  const refused = await publisher.publish(`${names.namespace}.nowhere.x`, encode({}), headers()).catch((err) => err)
  t.type(refused, JetStreamPublishError)
  t.equal(refused.status, 503, 'no responders')
})

t.test('a publish nobody acknowledges fails after the timeout', async (t) => {
  const silent = nats.nc.subscribe(`${names.namespace}.silent`)
  t.teardown(() => silent.unsubscribe())
  const publisher = new JetStreamPublisher(nats.nc, 200)
  t.teardown(() => publisher.close())
  await t.rejects(publisher.publish(`${names.namespace}.silent`, encode({}), headers()), /did not acknowledge/)
})

t.test('closing fails the publishes still waiting', async (t) => {
  const silent = nats.nc.subscribe(`${names.namespace}.silent2`)
  t.teardown(() => silent.unsubscribe())
  const publisher = new JetStreamPublisher(nats.nc, 60_000)
  const waiting = publisher.publish(`${names.namespace}.silent2`, encode({}), headers())
  publisher.close()
  await t.rejects(waiting, /closed/)
})
