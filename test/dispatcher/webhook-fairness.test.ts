import http from 'node:http'
import net from 'node:net'
import t from 'tap'
import type { WebhookCommand } from '../../domain/webhook.ts'
import { applyWebhookRows } from '../../projections/webhooks.ts'
import { webhookHandler } from '../../streams/aggregates.ts'
import { deliveriesStreamName, dispatcherConsumerName, eventsStreamName, subscriptionDelivererConsumerName } from '../../streams/names.ts'
import * as dispatcher from '../../services/roles/dispatcher/index.ts'
import { deriveKey, encryptAtRest } from '../../services/infrastructure/secrets.ts'
import { eventually, httpRequest, startHarness, type TestLike } from '../support/harness.ts'

/** How long a trickling receiver keeps going if nobody cuts it off (far past any deadline here). */
const trickleForMs = 20_000

interface Hit {
  path: string
  at: number
  /** Attempts of the other project in flight when this request arrived. */
  openTrickles: number
  /** True when the client closed the connection before the receiver finished its answer. */
  cutOff: boolean
}

/**
 * One loopback receiver: `/trickle…` answers 200 and then one body byte every 100 ms for 20 s,
 * `/endless…` streams 16 KiB chunks for 20 s, anything else answers 200 at once.
 */
async function startReceiver(t: TestLike) {
  const hits: Hit[] = []
  let openTrickles = 0
  let maxOpenTrickles = 0
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const path = req.url ?? ''
      const hit: Hit = { path, at: Date.now(), openTrickles, cutOff: false }
      hits.push(hit)
      if (path.startsWith('/down')) return void res.writeHead(500).end()
      if (!path.startsWith('/trickle') && !path.startsWith('/endless')) return void res.writeHead(200).end('ok')
      const trickle = path.startsWith('/trickle')
      if (trickle) maxOpenTrickles = Math.max(maxOpenTrickles, ++openTrickles)
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.flushHeaders()
      const timer = setInterval(() => res.write(trickle ? '.' : Buffer.alloc(16 * 1024, 'x')), trickle ? 100 : 10)
      const finish = setTimeout(() => res.end(), trickleForMs)
      res.on('close', () => {
        clearInterval(timer)
        clearTimeout(finish)
        hit.cutOff = !res.writableFinished
        if (trickle) openTrickles--
      })
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections()
        server.close(() => r())
      }),
  )
  const port = (server.address() as { port: number }).port
  return { hits, port, base: `http://127.0.0.1:${port}`, maxOpenTrickles: () => maxOpenTrickles, openTrickles: () => openTrickles }
}

/** A raw TCP receiver that sends its status line and headers one byte every 100 ms, for 20 s. */
async function startHeaderTrickler(t: TestLike) {
  const connections: Array<{ cutOff: boolean }> = []
  const server = net.createServer((socket) => {
    const record = { cutOff: false }
    connections.push(record)
    const head = Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n' + 'X-Pad: ' + 'p'.repeat(400) + '\r\n\r\n')
    let at = 0
    socket.on('data', () => undefined)
    socket.on('error', () => undefined)
    const timer = setInterval(() => {
      if (at < head.length) socket.write(head.subarray(at, ++at))
    }, 100)
    const finish = setTimeout(() => socket.end(), trickleForMs)
    socket.on('close', () => {
      clearInterval(timer)
      clearTimeout(finish)
      record.cutOff = at < head.length
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const sockets = new Set<net.Socket>()
  server.on('connection', (s) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })
  t.teardown(
    () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy()
        server.close(() => r())
      }),
  )
  const port = (server.address() as { port: number }).port
  return { connections, port, base: `http://127.0.0.1:${port}` }
}

t.test('webhook delivery under slow and flooding receivers', async (t) => {
  const receiver = await startReceiver(t)
  const headers = await startHeaderTrickler(t)
  const h = await startHarness(t, import.meta.filename, {
    roles: ['api', 'projector', 'dispatcher'],
    config: { webhookAllowHosts: [`127.0.0.1:${receiver.port}`, `127.0.0.1:${headers.port}`] },
    tunables: { webhook_retry_delays_ms: [200, 200, 200, 200], webhook_timeout_ms: 1_000 },
  })
  const deliveriesOf = async (key: string, id: string) => (await httpRequest(h.url, key, 'GET', `/jobsvc/v1/webhooks/${id}/deliveries`)).body
  /** The subscription's first delivery, once it is delivered. */
  const firstDelivered = (key: string, id: string, what: string) =>
    eventually(
      async () => {
        const d = (await deliveriesOf(key, id)).data[0]
        return d?.status === 'delivered' ? d : null
      },
      10_000,
      what,
    )
  const subscribe = async (key: string, url: string) => {
    const res = await httpRequest(h.url, key, 'POST', '/jobsvc/v1/webhooks', { url, events: ['job.created'] })
    t.equal(res.status, 201, JSON.stringify(res.body))
    return res.body.id as string
  }
  const failedForGood = (key: string, id: string) =>
    eventually(
      async () => {
        const d = (await deliveriesOf(key, id)).data[0]
        return d?.status === 'failed' ? d : null
      },
      15_000,
      `the delivery to ${id} to fail`,
    )

  await t.test('an attempt ends at the deadline in every phase: headers, body, DNS; it is a timeout, retried', async (t) => {
    const body = await subscribe(h.apiKey, `${receiver.base}/trickle-body`)
    const head = await subscribe(h.apiKey, `${headers.base}/`)
    const realResolve = h.runtime.resolveHost
    t.teardown(() => void (h.runtime.resolveHost = realResolve))
    // The create-time check gets an answer; every lookup at delivery never answers.
    let lookups = 0
    h.runtime.resolveHost = async (host) => {
      if (host !== 'hang.example.test') return realResolve(host)
      return ++lookups === 1 ? ['93.184.216.34'] : new Promise<string[]>(() => undefined)
    }
    const dns = await subscribe(h.apiKey, `http://hang.example.test:${receiver.port + 1}/never`)
    await httpRequest(h.url, h.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'trickled', queue: 'slow', payload: {} })
    for (const [name, id] of [
      ['body', body],
      ['headers', head],
      ['dns', dns],
    ] as const) {
      t.match(await failedForGood(h.apiKey, id), { status: 'failed', response_status: null, attempt: 5 }, `${name}: five timeouts, then failed`)
    }
    const bodyHits = receiver.hits.filter((x) => x.path === '/trickle-body')
    t.equal(bodyHits.length, 5, 'the body trickler was tried five times')
    await eventually(async () => bodyHits.every((x) => x.cutOff), 5_000, 'every body trickle cut off')
    t.ok(
      bodyHits.every((x) => x.cutOff),
      'each attempt was cut off while the body still trickled',
    )
    await eventually(
      async () => headers.connections.length === 5 && headers.connections.every((c) => c.cutOff),
      5_000,
      'every header trickle cut off',
    )
    t.equal(headers.connections.length, 5, 'the header trickler was tried five times, each cut off mid-headers')
    t.ok(lookups > 1, 'the delivery-time lookups hung and were given up')
  })

  await t.test('only the start of a long answer is read: its status settles the attempt', async (t) => {
    const id = await subscribe(h.apiKey, `${receiver.base}/endless`)
    await httpRequest(h.url, h.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'long-answer', queue: 'slow', payload: {} })
    const settled = await firstDelivered(h.apiKey, id, 'the delivery to the endless receiver')
    t.match(settled, { status: 'delivered', response_status: 200, attempt: 1 })
    const hit = receiver.hits.find((x) => x.path === '/endless')!
    await eventually(async () => hit.cutOff, 5_000, 'the endless answer cut off')
    t.ok(hit.cutOff, 'the connection was closed long before the receiver finished')
  })

  await t.test("one project's trickling receivers and backlog do not hold up another project's delivery", async (t) => {
    const a = await h.newProject()
    const hooksOfA: string[] = []
    for (let i = 0; i < 16; i++) hooksOfA.push(await subscribe(a.apiKey, `${receiver.base}/trickle-a/${i}`))
    // A backlog: 40 events to 16 trickling subscriptions, 640 deliveries queued ahead of B's.
    for (let i = 0; i < 40; i++) {
      const res = await httpRequest(h.url, a.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'flood', queue: 'a', payload: { i } })
      t.equal(res.status, 201)
    }
    await eventually(async () => receiver.openTrickles() >= 16, 10_000, "A's trickling attempts under way")
    const b = await subscribe(h.apiKey, `${receiver.base}/b`)
    await httpRequest(h.url, h.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'mine', queue: 'b', payload: {} })
    const delivered = await firstDelivered(h.apiKey, b, "B's delivery")
    t.match(delivered, { status: 'delivered', response_status: 200, attempt: 1 })
    const hitB = receiver.hits.find((x) => x.path === '/b')!
    t.ok(hitB.openTrickles > 0, `B's delivery arrived while ${hitB.openTrickles} of A's attempts were in flight`)
    const pendingOfA = await h.runtime.sql`SELECT count(*)::int AS n FROM deliveries WHERE project_id = ${a.projectId} AND status = 'pending'`
    t.ok(pendingOfA[0]!.n > 0, `A still had ${pendingOfA[0]!.n} deliveries pending`)
    t.ok(receiver.maxOpenTrickles() < 64, `A never held every slot (at most ${receiver.maxOpenTrickles()} at once)`)
    // A's own deliveries are not starved either: they go on timing out and being retried.
    await eventually(
      async () => (await deliveriesOf(a.apiKey, hooksOfA[0]!)).data.some((d: { attempt: number }) => d.attempt >= 2),
      15_000,
      "A's retries",
    )
  })

  await t.test('an item handed out again early (its consumer re-created) still waits out its retry wait', async (t) => {
    await h.stopRole('dispatcher')
    const stop = await dispatcher.start({
      ...h.runtime,
      config: { ...h.config, tunables: { ...h.config.tunables, webhook_retry_delays_ms: [2_000, 2_000, 2_000, 2_000] } },
    })
    t.teardown(async () => {
      await stop()
      await h.startRole('dispatcher')
    })
    const id = await subscribe(h.apiKey, `${receiver.base}/down-wait`)
    await httpRequest(h.url, h.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'waits', queue: 'w', payload: {} })
    await eventually(async () => (await deliveriesOf(h.apiKey, id)).data[0]?.attempt === 1, 10_000, 'the first attempt recorded')
    // As if every deliverer had been down past the consumer's inactivity limit: the server forgets the nak's delay.
    const stream = deliveriesStreamName(h.config.namespace)
    const consumer = subscriptionDelivererConsumerName(h.config.namespace, h.projectId, id)
    await h.runtime.nats.jsm.consumers.delete(stream, consumer)
    await eventually(
      async () => {
        const info = await h.runtime.nats.jsm.consumers.info(stream, consumer).catch(() => null)
        return info !== null && info.delivered.consumer_seq >= 1
      },
      10_000,
      'the item handed out again by a new consumer',
    )
    const hits = await eventually(
      async () => {
        const r = receiver.hits.filter((x) => x.path === '/down-wait')
        return r.length >= 2 ? r : null
      },
      10_000,
      'the second attempt',
    )
    t.ok(hits[1]!.at - hits[0]!.at >= 2_000, `the second attempt came ${hits[1]!.at - hits[0]!.at} ms after the first, not at once`)
    const second = await eventually(
      async () => {
        const d = (await deliveriesOf(h.apiKey, id)).data[0]
        return d?.attempt === 2 ? d : null
      },
      10_000,
      'the second attempt recorded',
    )
    t.match(second, { status: 'pending', response_status: 500, attempt: 2 })
  })

  await t.test('two dispatchers pull from the same consumers: every delivery is sent once', async (t) => {
    const second = await dispatcher.start(h.runtime)
    t.teardown(() => second())
    const d = await h.newProject()
    const ids = [await subscribe(d.apiKey, `${receiver.base}/two/a`), await subscribe(d.apiKey, `${receiver.base}/two/b`)]
    for (let i = 0; i < 30; i++) await httpRequest(h.url, d.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'twice', queue: 'd', payload: { i } })
    for (const id of ids) {
      await eventually(
        async () => {
          const rows = await h.runtime.sql`SELECT 1 FROM deliveries WHERE webhook_id = ${id} AND status = 'delivered'`
          return rows.length === 30
        },
        15_000,
        `the 30 deliveries to ${id}`,
      )
    }
    t.equal(receiver.hits.filter((x) => x.path === '/two/a').length, 30, 'each of the 30 events reached /two/a once')
    t.equal(receiver.hits.filter((x) => x.path === '/two/b').length, 30, 'and /two/b once')
  })

  await t.test('an event goes to 20 subscriptions at most, the oldest, even where more were made before the cap', async (t) => {
    const c = await h.newProject()
    // Subscriptions made before the cap existed: appended straight to the log, past the API's check.
    const ids: string[] = []
    const sealKey = deriveKey(h.config.secret, 'webhook-secret-at-rest')
    for (let i = 0; i < 22; i++) {
      const id = `whk_${h.runtime.newUlid().toLowerCase()}`
      const command: WebhookCommand = {
        type: 'create_webhook',
        data: {
          webhook_id: id,
          project_id: c.projectId,
          url: `${receiver.base}/legacy/${i}`,
          events: '*',
          secret_encrypted: encryptAtRest(sealKey, `whsec_legacy_${i}`),
        },
        meta: { now: new Date(Date.now() + i).toISOString() },
      }
      const result = await webhookHandler.decide(h.runtime, webhookHandler.ref(c.projectId, id), command)
      await applyWebhookRows(h.runtime.sql, [result.record])
      ids.push(id)
    }
    const job = await httpRequest(h.url, c.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'wide', queue: 'c', payload: {} })
    t.equal(job.status, 201)
    // The fan-out has handled every event once its consumer has nothing pending or unacked.
    await eventually(
      async () => {
        const info = await h.runtime.nats.jsm.consumers.info(eventsStreamName(h.config.namespace), dispatcherConsumerName(h.config.namespace))
        const rows = await h.runtime.sql`SELECT 1 FROM deliveries WHERE project_id = ${c.projectId}`
        return info.num_pending === 0 && info.num_ack_pending === 0 && rows.length >= 20
      },
      10_000,
      'the fan-out of the event',
    )
    const rows = await h.runtime.sql<{ webhook_id: string }[]>`SELECT webhook_id FROM deliveries WHERE project_id = ${c.projectId}`
    t.equal(rows.length, 20, 'twenty deliveries for one event')
    t.same(new Set(rows.map((r) => r.webhook_id)), new Set(ids.slice(0, 20)), 'to the twenty oldest subscriptions')
    await eventually(async () => receiver.hits.filter((x) => x.path.startsWith('/legacy/')).length === 20, 10_000, 'the twenty deliveries sent')
  })
})
