import { createHmac } from 'node:crypto'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import { JobsvcClient, verifyWebhook, WebhookVerificationError } from '@jobsvc/sdk'
import t from 'tap'
import { eventually, startHarness } from '../support/harness.ts'

// verifyWebhook against deliveries the service's dispatcher really signs and sends.
interface Delivery {
  rawBody: Buffer
  headers: IncomingHttpHeaders
}
const received: Delivery[] = []
const receiver = createServer((req, res) => {
  const chunks: Buffer[] = []
  req.on('data', (c: Buffer) => chunks.push(c))
  req.on('end', () => {
    received.push({ rawBody: Buffer.concat(chunks), headers: req.headers })
    res.writeHead(204).end()
  })
})
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
t.teardown(() => new Promise((resolve) => receiver.close(resolve)))
const receiverHost = `127.0.0.1:${(receiver.address() as AddressInfo).port}`

const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'scheduler', 'dispatcher'],
  config: { webhookAllowHosts: [receiverHost] },
})
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })

const subscription = await client.webhooks.create({ url: `http://${receiverHost}/hooks`, events: ['job.created'] })

/** Creates a job and answers the delivery of its job.created event. */
async function deliveryOfNewJob(): Promise<{ jobId: string; delivery: Delivery }> {
  const job = await client.jobs.create({ job_type: 'hooked', payload: {} })
  const delivery = await eventually(async () => received.find((d) => JSON.parse(d.rawBody.toString()).data.job_id === job.id), 20_000, 'the delivery')
  return { jobId: job.id, delivery }
}
const signatureOf = (d: Delivery) => d.headers['x-service-signature'] as string

t.test('a delivery verifies with the subscription’s secret and answers the parsed event', async (t) => {
  const { jobId, delivery } = await deliveryOfNewJob()
  const event = verifyWebhook({ rawBody: delivery.rawBody, signatureHeader: signatureOf(delivery), secrets: subscription.secret })
  t.match(event, { event_type: 'job.created', event_id: /^evt_/, data: { job_id: jobId, schema_version: 1 } })
  t.equal(event.event_id, delivery.headers['x-service-event-id'])
  const deliveries = await eventually(
    async () => {
      const page = await client.webhooks.deliveries(subscription.id)
      return page.data.some((d) => d.status === 'delivered') ? page : null
    },
    10_000,
    'the delivery recorded',
  )
  t.equal(deliveries.data[0]?.event_type, 'job.created')
})

t.test('during a rotation both signatures verify; a tampered body, an old timestamp or a wrong secret do not', async (t) => {
  const rotated = await client.webhooks.rotateSecret(subscription.id)
  const { delivery } = await deliveryOfNewJob()
  const header = signatureOf(delivery)
  t.equal(header.match(/v1=/g)?.length, 2, 'the header carries the new and the previous secret’s digests')
  t.ok(verifyWebhook({ rawBody: delivery.rawBody, signatureHeader: header, secrets: rotated.secret }), 'the new secret verifies')
  t.ok(verifyWebhook({ rawBody: delivery.rawBody, signatureHeader: header, secrets: subscription.secret }), 'the previous secret verifies')
  t.ok(
    verifyWebhook({ rawBody: delivery.rawBody.toString(), signatureHeader: header, secrets: ['whsec_unrelated', rotated.secret] }),
    'any of several secrets',
  )

  const refusal = (options: Partial<Parameters<typeof verifyWebhook>[0]>) => {
    try {
      verifyWebhook({ rawBody: delivery.rawBody, signatureHeader: header, secrets: rotated.secret, ...options })
      return null
    } catch (err) {
      return err instanceof WebhookVerificationError ? err.code : err
    }
  }
  const tampered = Buffer.from(delivery.rawBody.toString().replace('"job.created"', '"job.succeeded"'))
  t.equal(refusal({ rawBody: tampered }), 'invalid_signature', 'a tampered body is refused')
  const signedAt = Number(/t=(\d+)/.exec(header)![1])
  t.equal(refusal({ now: new Date((signedAt + 301) * 1000) }), 'timestamp_out_of_tolerance', 'a timestamp over 300 s old is refused')
  t.equal(refusal({ now: new Date((signedAt + 299) * 1000) }), null, 'within the tolerance it verifies')
  t.equal(refusal({ now: new Date((signedAt + 60) * 1000), toleranceSeconds: 30 }), 'timestamp_out_of_tolerance', 'the tolerance is the caller’s')
  t.equal(refusal({ secrets: ['whsec_wrong'] }), 'invalid_signature', 'a wrong secret is refused')
  t.equal(
    refusal({ signatureHeader: header.replace(/t=\d+/, `t=${signedAt + 1}`) }),
    'invalid_signature',
    'a replayed body under a new timestamp is refused',
  )
  t.equal(refusal({ signatureHeader: undefined }), 'missing_signature')
  t.equal(refusal({ signatureHeader: 'v1=abc' }), 'malformed_signature')
})

t.test('an empty secret is refused, so a delivery signed with the empty key never verifies', async (t) => {
  const { delivery } = await deliveryOfNewJob()
  const signedAt = /t=(\d+)/.exec(signatureOf(delivery))![1]!
  // What anyone can compute: the empty key needs no secret.
  const forged = `t=${signedAt},v1=${createHmac('sha256', '').update(`${signedAt}.`).update(delivery.rawBody).digest('hex')}`
  for (const secrets of ['', [''], [], [subscription.secret, '']]) {
    t.throws(
      () => verifyWebhook({ rawBody: delivery.rawBody, signatureHeader: forged, secrets }),
      TypeError,
      `secrets ${JSON.stringify(secrets)} is refused before anything is checked`,
    )
  }
  t.throws(() => verifyWebhook({ rawBody: delivery.rawBody, signatureHeader: forged, secrets: subscription.secret }), WebhookVerificationError)
})
