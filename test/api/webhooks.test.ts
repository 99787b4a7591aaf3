import t from 'tap'
import { BillingService } from '../../services/use-cases/metering/billing-service.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'

t.test('webhook subscriptions', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'], config: { webhookAllowHosts: ['localhost:9999'] } })

  await t.test('create shows the secret once; reads never do', async (t) => {
    const created = await h.request('POST', '/jobsvc/v1/webhooks', {
      url: 'https://8.8.8.8/hook',
      events: ['job.created', 'job.failed', 'job.created'],
    })
    t.equal(created.status, 201, JSON.stringify(created.body))
    t.match(created.body, {
      id: /^whk_[0-9a-z]{26}$/,
      url: 'https://8.8.8.8/hook',
      events: ['job.created', 'job.failed'],
      secret: /^whsec_/,
      is_active: true,
      created_at: /Z$/,
    })
    const one = await h.request('GET', `/jobsvc/v1/webhooks/${created.body.id}`)
    t.same(one.body, {
      id: created.body.id,
      url: 'https://8.8.8.8/hook',
      events: ['job.created', 'job.failed'],
      is_active: true,
      created_at: created.body.created_at,
      updated_at: null,
    })
    const list = await h.request('GET', '/jobsvc/v1/webhooks')
    t.same(list.body.data, [one.body])
    const star = await h.request('POST', '/jobsvc/v1/webhooks', { url: 'http://localhost:9999/dev', events: '*' })
    t.equal(star.status, 201, 'WEBHOOK_ALLOW_HOSTS exempts a listed host:port')
    t.equal(star.body.events, '*')

    const patched = await h.request('PATCH', `/jobsvc/v1/webhooks/${created.body.id}`, { is_active: false, events: '*' })
    t.match(patched.body, { is_active: false, events: '*', updated_at: /Z$/ }, JSON.stringify(patched.body))
    t.notOk('secret' in patched.body)

    const rotated = await h.request('POST', `/jobsvc/v1/webhooks/${created.body.id}/rotate-secret`)
    t.equal(rotated.status, 200)
    t.not(rotated.body.secret, created.body.secret)
    t.equal(Date.parse(rotated.body.previous_secret_expires_at) - Date.parse(rotated.body.rotated_at), 24 * 3600 * 1000)

    // The secrets appear nowhere in plaintext: not in Postgres, not in the log.
    const dump = (await h.runtime.sql`SELECT string_agg(w::text, ' ') AS t FROM webhooks w`)[0]!.t as string
    const stream = eventsStreamName(h.config.namespace)
    const info = await h.runtime.nats.jsm.streams.info(stream)
    let log = ''
    for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
      const m = await h.runtime.nats.jsm.streams.getMessage(stream, { seq }).catch(() => null)
      if (m) log += Buffer.from(m.data).toString('latin1')
    }
    for (const secret of [created.body.secret, rotated.body.secret, star.body.secret]) {
      t.notOk(dump.includes(secret) || log.includes(secret), 'no secret in plaintext')
    }
    t.ok(log.includes('8.8.8.8'), 'the search would find what is there')

    t.equal((await h.request('DELETE', `/jobsvc/v1/webhooks/${created.body.id}`)).status, 204)
    for (const [method, path] of [
      ['GET', ''],
      ['PATCH', ''],
      ['DELETE', ''],
      ['POST', '/rotate-secret'],
    ] as const) {
      const res = await h.request(method, `/jobsvc/v1/webhooks/${created.body.id}${path}`, method === 'PATCH' ? { is_active: true } : undefined)
      t.equal(res.body.error?.code, 'webhook_not_found', `${method} after delete`)
    }
    t.equal((await h.request('GET', '/jobsvc/v1/webhooks/whk_nope')).status, 404)
    const kinds = await eventually(async () => {
      const rows = await h.runtime.sql`SELECT kind FROM activity WHERE target_type = 'webhook' ORDER BY id`
      return rows.length >= 5 ? rows.map((r) => r.kind) : null
    })
    t.same(kinds, ['webhook_created', 'webhook_created', 'webhook_updated', 'webhook_secret_rotated', 'webhook_deleted'])
  })

  await t.test('unsafe or malformed URLs and filters are 400 invalid_request', async (t) => {
    const bad: Array<[unknown, unknown]> = [
      ['http://127.0.0.1/x', ['job.created']],
      ['http://2130706433/', ['job.created']],
      ['http://0x7f.0.0.1/', ['job.created']],
      ['http://0177.0.0.1/', ['job.created']],
      ['http://127.1/', ['job.created']],
      ['http://10.0.0.5/', ['job.created']],
      ['http://172.16.3.4/', ['job.created']],
      ['http://192.168.1.1/', ['job.created']],
      ['http://169.254.169.254/latest/meta-data', ['job.created']],
      ['http://100.64.0.1/', ['job.created']],
      ['http://224.0.0.1/', ['job.created']],
      ['http://0.0.0.0/', ['job.created']],
      ['http://[::1]/', ['job.created']],
      ['http://[::ffff:127.0.0.1]/', ['job.created']],
      ['http://[fe80::1]/', ['job.created']],
      ['http://[fc00::1]/', ['job.created']],
      ['http://localhost/', ['job.created']],
      ['ftp://8.8.8.8/', ['job.created']],
      ['/relative', ['job.created']],
      [`https://8.8.8.8/${'a'.repeat(2040)}`, ['job.created']],
      ['https://8.8.8.8/', ['job.nope']],
      ['https://8.8.8.8/', []],
      ['https://8.8.8.8/', 'all'],
      [42, ['job.created']],
    ]
    for (const [url, events] of bad) {
      const res = await h.request('POST', '/jobsvc/v1/webhooks', { url, events })
      t.equal(res.status, 400, `${String(url).slice(0, 60)} ${JSON.stringify(events)}`)
      t.equal(res.body.error?.code, 'invalid_request')
    }
  })

  await t.test('the events limit is measured on the value as sent, duplicates included', async (t) => {
    // As compact JSON: 61 × `"job.created",` and 13 × `"job.failed",` less the last comma, plus the brackets.
    const atLimit = [...Array<string>(61).fill('job.created'), ...Array<string>(13).fill('job.failed')]
    t.equal(JSON.stringify(atLimit).length, 1024)
    const ok = await h.request('POST', '/jobsvc/v1/webhooks', { url: 'https://8.8.8.8/at-limit', events: atLimit })
    t.equal(ok.status, 201, 'exactly 1024 characters is accepted')
    t.same(ok.body.events, ['job.created', 'job.failed'], 'and the duplicates are then dropped')
    const over = [...atLimit, 'job.failed']
    for (const events of [over, Array<string>(100).fill('job.created')]) {
      const res = await h.request('POST', '/jobsvc/v1/webhooks', { url: 'https://8.8.8.8/over', events })
      t.equal(res.status, 400, `${JSON.stringify(events).length} characters as sent, ${new Set(events).size} after dropping duplicates`)
      t.equal(res.body.error.code, 'invalid_request')
      t.match(res.body.error.message, /^body\.events: at most 1024 characters/)
      const patched = await h.request('PATCH', `/jobsvc/v1/webhooks/${ok.body.id}`, { events })
      t.equal(patched.status, 400, 'PATCH measures the same way')
    }
    t.equal((await h.request('DELETE', `/jobsvc/v1/webhooks/${ok.body.id}`)).status, 204)
  })

  await t.test('string fields are bounded first and must be storable', async (t) => {
    const nul = await h.request('POST', '/jobsvc/v1/webhooks', { url: 'https://8.8.8.8/a\u0000b', events: '*' })
    t.equal(nul.status, 400, 'a URL with U+0000 (which the URL parser would accept) is refused, not a 500')
    t.equal(nul.body.error.code, 'invalid_request')
    const long = await h.request('POST', '/jobsvc/v1/webhooks', { url: `https://8.8.8.8/${'a'.repeat(1_000_000)}`, events: '*' })
    t.equal(long.status, 400)
    t.match(long.body.error.message, /^body\.url: .*2048/, 'the length bound is what refuses it')
    const list = await h.request('GET', `/jobsvc/v1/webhooks/whk_nope/deliveries?cursor=${'x'.repeat(1100)}`)
    t.equal(list.status, 400, 'an over-long cursor is refused before it is decoded')
  })

  await t.test('a project has at most 20 subscriptions, active or not: 409 webhook_limit_reached past that', async (t) => {
    const c = await h.newProject()
    const create = (i: number | string) =>
      httpRequest(h.url, c.apiKey, 'POST', '/jobsvc/v1/webhooks', { url: `https://8.8.8.8/cap/${i}`, events: '*' })
    const ids: string[] = []
    for (let i = 0; i < 20; i++) {
      const res = await create(i)
      t.equal(res.status, 201, `subscription ${i + 1}`)
      ids.push(res.body.id)
    }
    t.equal((await httpRequest(h.url, c.apiKey, 'PATCH', `/jobsvc/v1/webhooks/${ids[0]}`, { is_active: false })).status, 200)
    const refused = await create('one-more')
    t.equal(refused.status, 409, 'the 21st, an inactive one still counting')
    t.equal(refused.body.error.code, 'webhook_limit_reached')
    t.equal(
      (await httpRequest(h.url, c.apiKey, 'PATCH', `/jobsvc/v1/webhooks/${ids[0]}`, { is_active: true })).status,
      200,
      're-activating changes no count',
    )
    t.equal((await httpRequest(h.url, c.apiKey, 'DELETE', `/jobsvc/v1/webhooks/${ids[1]}`)).status, 204)
    // One place left and five creates racing for it: exactly one gets it.
    const racing = await Promise.all([1, 2, 3, 4, 5].map((i) => create(`race-${i}`)))
    t.same(racing.map((r) => r.status).sort(), [201, 409, 409, 409, 409])
    const listed = await httpRequest(h.url, c.apiKey, 'GET', '/jobsvc/v1/webhooks')
    t.equal(listed.body.data.length, 20)
    t.equal(
      (await h.request('POST', '/jobsvc/v1/webhooks', { url: 'https://8.8.8.8/other-project', events: '*' })).status,
      201,
      'another project is not affected',
    )
  })

  await t.test('every webhook route answers 402 while billing is not active', async (t) => {
    const billing = new BillingService(h.runtime)
    await billing.setBillingState(h.projectId, 'past_due', 'evt_test')
    await eventually(async () => (await h.request('GET', '/jobsvc/v1/webhooks')).status === 402)
    const res = await h.request('POST', '/jobsvc/v1/webhooks', { url: 'https://8.8.8.8/', events: '*' })
    t.equal(res.status, 402)
    t.equal(res.body.error.code, 'billing_state_blocked')
    await billing.setBillingState(h.projectId, 'active', 'evt_test2')
    await eventually(async () => (await h.request('GET', '/jobsvc/v1/webhooks')).status === 200)
  })
})
