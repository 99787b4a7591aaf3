import { randomBytes } from 'node:crypto'
import t from 'tap'
import { connectNats } from '../../streams/connection.ts'

const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222'

/** Counts the socket writes of a connection (nats.js's transport, one `send` per write). */
function countWrites(nc: object): { count: () => number } {
  const transport = (nc as { protocol: { transport: { send(frame: Uint8Array): void } } }).protocol.transport
  const send = transport.send.bind(transport)
  let writes = 0
  transport.send = (frame) => {
    writes++
    send(frame)
  }
  return { count: () => writes }
}

t.test('the commands of one event-loop turn go out in one socket write, and all arrive', async (t) => {
  const nats = await connectNats(natsUrl, 'connection-test')
  t.teardown(() => nats.nc.close())
  const subject = `test.flush.${randomBytes(6).toString('hex')}`
  const received: string[] = []
  const all = new Promise<void>((resolve) => {
    nats.nc.subscribe(subject, {
      callback: (_err, msg) => {
        received.push(msg.string())
        if (received.length === 60) resolve()
      },
    })
  })
  await nats.nc.flush()
  const writes = countWrites(nats.nc)
  // Fifty publishes in one go, ten more from microtasks of the same turn (as request handlers
  // that each await something resolved do).
  for (let i = 0; i < 50; i++) nats.nc.publish(subject, String(i))
  for (let i = 50; i < 60; i++) void Promise.resolve().then(() => nats.nc.publish(subject, String(i)))
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(writes.count(), 1, 'sixty publishes of one turn: one write')
  await all
  t.strictSame(
    received,
    Array.from({ length: 60 }, (_, i) => String(i)),
    'every message arrives, in order',
  )
})

t.test('a request answered by another connection still round-trips promptly', async (t) => {
  const server = await connectNats(natsUrl, 'connection-test-server')
  const client = await connectNats(natsUrl, 'connection-test-client')
  t.teardown(async () => {
    await client.nc.close()
    await server.nc.close()
  })
  const subject = `test.echo.${randomBytes(6).toString('hex')}`
  server.nc.subscribe(subject, {
    callback: (_err, msg) => {
      msg.respond(msg.data)
    },
  })
  await server.nc.flush()
  for (let i = 0; i < 20; i++) {
    const reply = await client.nc.request(subject, `ping ${i}`, { timeout: 2000 })
    t.equal(reply.string(), `ping ${i}`)
  }
})

t.test('a buffer past the threshold is written at once, without waiting for the turn to end', async (t) => {
  const nats = await connectNats(natsUrl, 'connection-test-large')
  t.teardown(() => nats.nc.close())
  await nats.nc.flush()
  const writes = countWrites(nats.nc)
  const large = new Uint8Array(128 * 1024)
  nats.nc.publish(`test.large.${randomBytes(6).toString('hex')}`, large)
  t.equal(writes.count(), 1, 'written synchronously')
})
