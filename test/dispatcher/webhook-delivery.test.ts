import { createHmac, timingSafeEqual } from 'node:crypto'
import http from 'node:http'
import { pino } from 'pino'
import t from 'tap'
import { evaluateAlerts } from '../../services/use-cases/alerts/alert-service.ts'
import * as api from '../../services/roles/api/index.ts'
import * as dispatcher from '../../services/roles/dispatcher/index.ts'
import { deliveriesStreamName, deliveriesSubjectFilter } from '../../streams/names.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'

interface Received {
  path: string
  headers: http.IncomingHttpHeaders
  body: string
  at: number
}

/** A real receiver on loopback that verifies nothing itself: the test does, with its own HMAC. */
async function startReceiver(t: { teardown(fn: () => unknown): void }) {
  const received: Received[] = []
  const counts = new Map<string, number>()
  const server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      const path = req.url ?? ''
      received.push({ path, headers: req.headers, body, at: Date.now() })
      const n = (counts.get(path) ?? 0) + 1
      counts.set(path, n)
      if (path.startsWith('/bad')) return res.writeHead(400).end()
      if (path.startsWith('/flaky') && n <= 2) return res.writeHead(503).end()
      if (path.startsWith('/down')) return res.writeHead(500).end()
      if (path.startsWith('/slow')) return void setTimeout(() => res.writeHead(200).end(), 1_500)
      res.writeHead(200).end('ok')
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const port = (server.address() as { port: number }).port
  return { received, port, base: `http://127.0.0.1:${port}` }
}

function verifies(header: string, secret: string, body: string): boolean {
  const parts = header.split(',')
  const ts = parts.find((p) => p.startsWith('t='))!.slice(2)
  const expected = createHmac('sha256', secret).update(`${ts}.${body}`).digest()
  return parts
    .filter((p) => p.startsWith('v1='))
    .some((p) => {
      const given = Buffer.from(p.slice(3), 'hex')
      return given.length === expected.length && timingSafeEqual(given, expected)
    })
}

t.test('webhook delivery', async (t) => {
  const receiver = await startReceiver(t)
  const h = await startHarness(t, import.meta.filename, {
    roles: ['api', 'projector', 'dispatcher'],
    config: { webhookAllowHosts: [`127.0.0.1:${receiver.port}`] },
    tunables: { webhook_retry_delays_ms: [100, 200, 300, 400], webhook_timeout_ms: 2_000 },
  })
  const subscribe = async (path: string, events: unknown = '*') => {
    const res = await h.request('POST', '/jobsvc/v1/webhooks', { url: `${receiver.base}${path}`, events })
    t.equal(res.status, 201, JSON.stringify(res.body))
    return res.body as { id: string; secret: string }
  }
  const deliveriesOf = async (id: string) => (await h.request('GET', `/jobsvc/v1/webhooks/${id}/deliveries`)).body

  await t.test('job.created and job.succeeded arrive signed, with the spec headers and data', async (t) => {
    const sub = await subscribe('/ok')
    const job = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'hooked', queue: 'wh', payload: {} })
    const created = await eventually(async () => receiver.received.find((r) => r.path === '/ok' && JSON.parse(r.body).event_type === 'job.created'))
    t.equal(created.headers['user-agent'], 'Service-Webhooks/1.0')
    t.equal(created.headers['content-type'], 'application/json')
    t.ok(verifies(String(created.headers['x-service-signature']), sub.secret, created.body), 'the signature verifies with the secret')
    const envelope = JSON.parse(created.body)
    t.match(envelope, { event_id: /^evt_/, event_type: 'job.created', created_at: /Z$/ })
    t.same(envelope.data, { schema_version: 1, job_id: job.body.id, queue: 'wh' })
    t.equal(created.headers['x-service-event-id'], envelope.event_id)
    t.equal(created.headers['x-service-event-type'], 'job.created')

    const polled = await eventually(async () => {
      const p = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: ['wh'], wait_seconds: 1 })
      return p.body.jobs?.length ? p : null
    })
    await h.request('POST', '/jobsvc/v1/workers/ack', { job_id: polled.body.jobs[0].id, worker_id: 'w', status: 'succeeded', duration_ms: 12 })
    const succeeded = await eventually(async () =>
      receiver.received.find((r) => r.path === '/ok' && JSON.parse(r.body).event_type === 'job.succeeded'),
    )
    t.match(JSON.parse(succeeded.body).data, {
      schema_version: 1,
      job_id: job.body.id,
      job_type: 'hooked',
      queue: 'wh',
      state: 'succeeded',
      duration_ms: 12,
      completed_at: /Z$/,
    })
    const list = await eventually(async () => {
      const l = await deliveriesOf(sub.id)
      return l.data.length === 2 && l.data.every((d: { status: string }) => d.status === 'delivered') ? l : null
    })
    t.match(list.data[0], { id: /^del_/, event_type: 'job.succeeded', status: 'delivered', response_status: 200, attempt: 1, attempted_at: /Z$/ })
    t.equal(list.has_more, false)
    t.notOk('next_cursor' in list, 'next_cursor is omitted when has_more is false')
  })

  await t.test('5xx is retried at the policy waits with the same event id; 4xx fails at once; 5 attempts at most', async (t) => {
    const flaky = await subscribe('/flaky', ['job.created'])
    const bad = await subscribe('/bad', ['job.created'])
    const down = await subscribe('/down', ['job.created'])
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'retry-me', queue: 'other', payload: {} })
    const settled = await eventually(async () => {
      const [f, b, d] = await Promise.all([deliveriesOf(flaky.id), deliveriesOf(bad.id), deliveriesOf(down.id)])
      const done = f.data[0]?.status === 'delivered' && b.data[0]?.status === 'failed' && d.data[0]?.status === 'failed'
      return done ? { f: f.data[0], b: b.data[0], d: d.data[0] } : null
    }, 20_000)
    t.match(settled.f, { status: 'delivered', response_status: 200, attempt: 3 })
    t.match(settled.b, { status: 'failed', response_status: 400, attempt: 1 })
    t.match(settled.d, { status: 'failed', response_status: 500, attempt: 5 })
    const flakyHits = receiver.received.filter((r) => r.path === '/flaky')
    t.equal(flakyHits.length, 3)
    t.equal(new Set(flakyHits.map((r) => r.headers['x-service-event-id'])).size, 1, 'the same event id on every retry')
    t.ok(flakyHits[1]!.at - flakyHits[0]!.at >= 90, 'the first wait is the policy’s first delay')
    t.equal(receiver.received.filter((r) => r.path === '/bad').length, 1, 'a 4xx is not retried')
    t.equal(receiver.received.filter((r) => r.path === '/down').length, 5)
  })

  await t.test('after a rotation the header carries both digests, new first', async (t) => {
    const sub = await subscribe('/rotated', ['job.created'])
    const rotated = await h.request('POST', `/jobsvc/v1/webhooks/${sub.id}/rotate-secret`)
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'after-rotation', queue: 'other', payload: {} })
    const hit = await eventually(async () => receiver.received.find((r) => r.path === '/rotated'))
    const header = String(hit.headers['x-service-signature'])
    const v1 = header.split(',').filter((p) => p.startsWith('v1='))
    t.equal(v1.length, 2)
    const ts = header.split(',')[0]!.slice(2)
    t.equal(v1[0]!.slice(3), createHmac('sha256', rotated.body.secret).update(`${ts}.${hit.body}`).digest('hex'), 'new secret first')
    t.equal(v1[1]!.slice(3), createHmac('sha256', sub.secret).update(`${ts}.${hit.body}`).digest('hex'), 'then the previous one')
  })

  await t.test('a pending retry survives a dispatcher restart', async (t) => {
    const sub = await subscribe('/flaky-restart', ['job.created'])
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'restart', queue: 'other', payload: {} })
    await eventually(async () => receiver.received.some((r) => r.path === '/flaky-restart'))
    await h.stopRole('dispatcher')
    await h.startRole('dispatcher')
    const done = await eventually(async () => {
      const l = await deliveriesOf(sub.id)
      return l.data[0]?.status === 'delivered' ? l.data[0] : null
    }, 20_000)
    t.match(done, { status: 'delivered', attempt: 3 })
  })

  await t.test('an alert with webhook: true is delivered as alert.triggered and alert.resolved', async (t) => {
    const sub = await subscribe('/alerts', ['alert.triggered', 'alert.resolved'])
    const alert = await h.request('POST', '/jobsvc/v1/alerts', { name: 'depth', kind: 'queue_depth', queue: 'deep', threshold: 0, webhook: true })
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'deep', queue: 'deep', payload: {} })
    await eventually(async () => (await h.runtime.sql`SELECT 1 FROM jobs WHERE queue = 'deep' AND state = 'pending'`).length === 1)
    await evaluateAlerts(h.runtime)
    const triggered = await eventually(async () => receiver.received.find((r) => r.path === '/alerts'))
    t.ok(verifies(String(triggered.headers['x-service-signature']), sub.secret, triggered.body))
    t.match(JSON.parse(triggered.body), {
      event_type: 'alert.triggered',
      data: { schema_version: 1, alert_id: alert.body.id, name: 'depth', kind: 'queue_depth', threshold: 0, value: 1, status: 'firing' },
    })
    await h.request('PUT', `/jobsvc/v1/alerts/${alert.body.id}`, { name: 'depth', kind: 'queue_depth', queue: 'deep', threshold: 5, webhook: true })
    await evaluateAlerts(h.runtime)
    const resolved = await eventually(async () => receiver.received.filter((r) => r.path === '/alerts')[1])
    t.match(JSON.parse(resolved.body), { event_type: 'alert.resolved', data: { alert_id: alert.body.id, status: 'ok', threshold: 5 } })
  })

  await t.test('a name that resolves to a blocked address at delivery is refused there (DNS rebinding)', async (t) => {
    const blockedForms = ['127.0.0.1', '10.1.2.3', '169.254.169.254', '100.64.0.1', '::1', '::ffff:127.0.0.1', 'fe80::1', '0.0.0.0']
    const calls = new Map<string, number>()
    const realResolve = h.runtime.resolveHost
    t.teardown(() => void (h.runtime.resolveHost = realResolve))
    // The first lookup of each name (the create-time check) answers a public address, every later one a blocked form.
    h.runtime.resolveHost = async (host) => {
      const n = (calls.get(host) ?? 0) + 1
      calls.set(host, n)
      const i = Number(/^rebind(\d+)\./.exec(host)?.[1] ?? -1)
      if (i < 0) return realResolve(host)
      return n === 1 ? ['93.184.216.34'] : [blockedForms[i]!]
    }
    const subs = []
    for (let i = 0; i < blockedForms.length; i++) {
      const res = await h.request('POST', '/jobsvc/v1/webhooks', {
        url: `http://rebind${i}.example.test:${receiver.port}/rebound`,
        events: ['job.created'],
      })
      t.equal(res.status, 201, `create-time check passed for rebind${i}`)
      subs.push(res.body.id as string)
    }
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'rebind', queue: 'other', payload: {} })
    for (const [i, id] of subs.entries()) {
      const settled = await eventually(async () => {
        const d = (await deliveriesOf(id)).data[0]
        return d?.status === 'failed' ? d : null
      }, 20_000)
      t.match(settled, { status: 'failed', response_status: null, attempt: 5 }, `${blockedForms[i]} refused at delivery`)
    }
    t.equal(receiver.received.filter((r) => r.path === '/rebound').length, 0, 'nothing reached the receiver')
  })

  await t.test('deleting a subscription leaves its pending deliveries alone', async (t) => {
    const sub = await subscribe('/flaky-deleted', ['job.created'])
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'orphan', queue: 'other', payload: {} })
    await eventually(async () => receiver.received.some((r) => r.path === '/flaky-deleted'))
    t.equal((await h.request('DELETE', `/jobsvc/v1/webhooks/${sub.id}`)).status, 204)
    await eventually(async () => receiver.received.filter((r) => r.path === '/flaky-deleted').length === 3, 20_000, 'the retries went on')
    const settled = await eventually(async () => {
      const rows = await h.runtime.sql`SELECT status, attempt FROM deliveries WHERE webhook_id = ${sub.id}`
      return rows[0]?.status === 'delivered' ? rows[0] : null
    })
    t.match(settled, { status: 'delivered', attempt: 3 })
  })

  await t.test('a slow receiver does not delay the others', async (t) => {
    const slow = await subscribe('/slow', ['job.created'])
    const fast = await subscribe('/fast', ['job.created'])
    const ids: string[] = []
    for (let i = 0; i < 16; i++) ids.push((await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'busy', queue: 'other', payload: { i } })).body.id)
    await eventually(async () => receiver.received.filter((r) => r.path === '/fast').length === 16, 20_000, 'every fast delivery')
    const slowDone = receiver.received.filter((r) => r.path === '/slow').length
    t.ok(slowDone < 16, `the fast receiver had all 16 while the slow one had ${slowDone}`)
    await eventually(
      async () => (await deliveriesOf(slow.id)).data.filter((d: { status: string }) => d.status === 'delivered').length === 16,
      30_000,
      'every slow delivery',
    )
    void fast
  })

  await t.test(
    'a secret sealed under another JOBSVC_SECRET: its deliveries fail at once, logged once; an unopenable previous secret is left out',
    async (t) => {
      // A project of its own: this file's project is near its cap of subscriptions.
      const p = await h.newProject()
      const subscribeP = async (path: string) => {
        const res = await httpRequest(h.url, p.apiKey, 'POST', '/jobsvc/v1/webhooks', { url: `${receiver.base}${path}`, events: ['job.created'] })
        t.equal(res.status, 201, JSON.stringify(res.body))
        return res.body as { id: string; secret: string }
      }
      const deliveriesOfP = async (id: string) => (await httpRequest(h.url, p.apiKey, 'GET', `/jobsvc/v1/webhooks/${id}/deliveries`)).body
      const lost = await subscribeP('/lost-key')
      const kept = await subscribeP('/rotated-key')
      // The install restarts with another secret: the dispatcher and the API now hold another key.
      await h.stopRole('dispatcher')
      const lines: Array<{ level: number; msg: string; webhook_id?: string }> = []
      const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) })
      const deps = { ...h.runtime, config: { ...h.config, secret: 'another-secret-another-secret-another-secret' }, log }
      const otherApi = await api.start(deps)
      t.teardown(() => otherApi.stop())
      const rotated = await httpRequest(otherApi.address, p.apiKey, 'POST', `/jobsvc/v1/webhooks/${kept.id}/rotate-secret`)
      t.equal(rotated.status, 200, 'rotating works whatever key sealed the old secret')
      const stop = await dispatcher.start(deps)
      t.teardown(async () => {
        await stop()
        await h.startRole('dispatcher')
      })
      for (const i of [1, 2]) await httpRequest(h.url, p.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'rekeyed', queue: 'other', payload: { i } })
      const failed = await eventually(
        async () => {
          const l = (await deliveriesOfP(lost.id)).data
          return l.length === 2 && l.every((d: { status: string }) => d.status === 'failed') ? l : null
        },
        10_000,
        'both deliveries to the subscription whose secret cannot be opened to fail',
      )
      for (const d of failed) t.match(d, { status: 'failed', response_status: null, attempt: 1 }, 'failed at the first attempt, for good')
      t.equal(receiver.received.filter((r) => r.path === '/lost-key').length, 0, 'nothing was sent unsigned')
      // Settled means acked: nothing of it is left in the work queue to spin on.
      const subjects = await eventually(
        async () => {
          const info = await h.runtime.nats.jsm.streams.info(deliveriesStreamName(h.config.namespace), {
            subjects_filter: deliveriesSubjectFilter(h.config.namespace),
          })
          const left = Object.keys(info.state.subjects ?? {}).filter((s) => s.endsWith(lost.id))
          return left.length === 0 ? left : null
        },
        10_000,
        'the work queue to let go of the failed items',
      )
      t.same(subjects, [])
      const errors = lines.filter((l) => l.level === 50 && l.webhook_id === lost.id)
      t.equal(errors.length, 1, 'one error line for that secret, not one per delivery or per retry')
      t.match(errors[0]!.msg, /cannot be opened/)

      const hits = await eventually(
        async () => {
          const r = receiver.received.filter((x) => x.path === '/rotated-key')
          return r.length === 2 ? r : null
        },
        10_000,
        'the rotated subscription to receive both events',
      )
      for (const hit of hits) {
        const header = String(hit.headers['x-service-signature'])
        t.equal(header.split(',').filter((p) => p.startsWith('v1=')).length, 1, 'signed with the new secret only')
        t.ok(verifies(header, rotated.body.secret, hit.body), 'and that signature verifies')
      }
      t.equal(lines.filter((l) => l.level === 40 && l.webhook_id === kept.id).length, 1, 'the left-out previous secret is reported once')
    },
  )

  await t.test('an inactive subscription receives nothing; a filter lets only its types through', async (t) => {
    const quiet = await subscribe('/quiet', '*')
    await h.request('PATCH', `/jobsvc/v1/webhooks/${quiet.id}`, { is_active: false })
    const only = await subscribe('/only-failed', ['job.failed'])
    const job = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'dies', queue: 'dl', payload: {}, max_attempts: 1 })
    const polled = await eventually(async () => {
      const p = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: ['dl'], wait_seconds: 1 })
      return p.body.jobs?.length ? p : null
    })
    await h.request('POST', '/jobsvc/v1/workers/ack', {
      job_id: polled.body.jobs[0].id,
      worker_id: 'w',
      status: 'failed',
      error: { type: 'Boom', message: 'it broke' },
    })
    const failed = await eventually(async () => receiver.received.find((r) => r.path === '/only-failed'))
    t.match(JSON.parse(failed.body).data, {
      job_id: job.body.id,
      state: 'dead_letter',
      attempt_number: 1,
      max_attempts: 1,
      error_type: 'Boom',
      error_message: 'it broke',
    })
    t.equal(receiver.received.filter((r) => r.path === '/only-failed').length, 1, 'job.created was filtered out')
    t.equal(receiver.received.filter((r) => r.path === '/quiet').length, 0)
    await eventually(async () => (await deliveriesOf(only.id)).data.length === 1, 5_000, 'the delivery is listed')
  })
})
