import t from 'tap'
import { loadConfig } from '../../services/infrastructure/config.ts'
import { checkWebhookUrl, isLoopbackAddress } from '../../services/infrastructure/url-safety.ts'

// Issue 26, item 6: a webhook to a receiver on this machine, in development, worked only after a
// restart with a variable the refusal did not name. `--dev` now allows loopback targets, and the
// refusal outside it names WEBHOOK_ALLOW_HOSTS.

const resolveTo = (address: string) => async () => [address]

t.test('outside development a loopback target is refused, and the refusal says how to allow it', async (t) => {
  const verdict = await checkWebhookUrl('http://127.0.0.1:4000/hooks', [], resolveTo('127.0.0.1'))
  t.equal(verdict.ok, false)
  t.match(!verdict.ok && verdict.reason, /add 127\.0\.0\.1:4000 to WEBHOOK_ALLOW_HOSTS/)
  t.match(!verdict.ok && verdict.reason, /--dev/)
  t.ok((await checkWebhookUrl('http://127.0.0.1:4000/hooks', ['127.0.0.1:4000'], resolveTo('127.0.0.1'))).ok, 'allowed by name')
})

t.test('in development loopback targets are allowed, and nothing else private', async (t) => {
  for (const [url, address] of [
    ['http://127.0.0.1:4000/h', '127.0.0.1'],
    ['http://localhost:4000/h', '127.0.0.1'],
    ['http://[::1]:4000/h', '::1'],
  ] as const) {
    t.ok((await checkWebhookUrl(url, [], resolveTo(address), undefined, true)).ok, url)
  }
  for (const address of ['10.1.2.3', '192.168.1.1', '169.254.169.254']) {
    t.notOk((await checkWebhookUrl('http://internal.example/h', [], resolveTo(address), undefined, true)).ok, `${address} stays refused`)
  }
  t.ok(isLoopbackAddress('127.8.9.10') && !isLoopbackAddress('::ffff:10.0.0.1'))
})

t.test('--dev turns it on in the configuration; without it, it is off', async (t) => {
  const env = { JOBSVC_SECRET: 'webhook-targets-secret-webhook-targets' }
  t.equal(loadConfig(env).webhookAllowLoopback, false)
  t.equal(loadConfig(env, { dev: true }).webhookAllowLoopback, true)
})
