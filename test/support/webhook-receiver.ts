import http from 'node:http'
import type { TestLike } from './harness.ts'

/** A webhook delivery as received: the path it was sent to and its JSON body. */
export interface ReceivedWebhook {
  path: string
  body: { event_type: string; data: Record<string, unknown> }
}

/** A local endpoint that answers 200 to every delivery and keeps what it got; closed by the teardown. */
export async function startWebhookReceiver(t: TestLike): Promise<{ base: string; received: ReceivedWebhook[]; at(path: string): ReceivedWebhook[] }> {
  const received: ReceivedWebhook[] = []
  const server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      received.push({ path: req.url ?? '', body: JSON.parse(body) })
      res.writeHead(200).end('ok')
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`
  return { base, received, at: (path) => received.filter((r) => r.path === path) }
}
