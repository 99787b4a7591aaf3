import { connect } from 'node:net'
import t, { type Test } from 'tap'
import { startHarness } from '../support/harness.ts'

// Issue 13, item 11: requests refused before a route sees them (by Node's HTTP parser, or by
// Fastify's router) answer in the envelope with X-Request-Id, like every other answer.
const h = await startHarness(t, import.meta.filename, { roles: ['api'] })
const { hostname, port } = new URL(h.url)

interface RawAnswer {
  status: number
  headers: Record<string, string>
  body: string
}

/** Writes `request` as raw bytes and reads the whole answer (the server closes, or sends Content-Length). */
function raw(request: string): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    let data = ''
    const finish = () => {
      const head = data.slice(0, data.indexOf('\r\n\r\n'))
      const [statusLine, ...lines] = head.split('\r\n')
      const headers: Record<string, string> = {}
      for (const line of lines) {
        const at = line.indexOf(':')
        headers[line.slice(0, at).trim().toLowerCase()] = line.slice(at + 1).trim()
      }
      resolve({ status: Number(statusLine?.split(' ')[1]), headers, body: data.slice(head.length + 4) })
      socket.destroy()
    }
    socket.setEncoding('latin1')
    socket.on('data', (chunk) => {
      data += chunk
      const end = data.indexOf('\r\n\r\n')
      const length = /content-length:\s*(\d+)/i.exec(data.slice(0, end))
      if (end >= 0 && length && data.length >= end + 4 + Number(length[1])) finish()
    })
    socket.on('end', finish)
    socket.on('error', reject)
    socket.write(request)
  })
}

function isEnvelope(t: Test, answer: RawAnswer, status: number, what: string): void {
  t.equal(answer.status, status, `${what}: status`)
  t.match(answer.headers['x-request-id'] ?? '', /^[0-9A-HJKMNP-TV-Z]{26}$/, `${what}: X-Request-Id`)
  t.match(answer.headers['content-type'] ?? '', /^application\/json/, `${what}: JSON`)
  const body = JSON.parse(answer.body) as { error: { code: string; message: string; request_id: string } }
  t.equal(body.error.code, 'invalid_request', `${what}: code`)
  t.type(body.error.message, 'string')
  t.equal(body.error.request_id, answer.headers['x-request-id'], `${what}: the same request id`)
}

t.test('an unknown HTTP method: 400 in the envelope', async (t) => {
  isEnvelope(t, await raw(`FROBNICATE /jobsvc/v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n`), 400, 'unknown method')
})

t.test('a malformed request line: 400 in the envelope', async (t) => {
  isEnvelope(t, await raw(`GET /jobsvc/v1/jobs HTTP/9.9.9\r\nHost: x\r\n\r\n`), 400, 'bad version')
  isEnvelope(t, await raw(`GET /jobsvc/v1/jobs HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n`), 400, 'header without a colon')
})

t.test('request headers over the limit: 431 in the envelope', async (t) => {
  isEnvelope(t, await raw(`GET /jobsvc/v1/jobs HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`), 431, 'headers over 16 KiB')
})

t.test('a URI over the limit: 414 in the envelope', async (t) => {
  isEnvelope(t, await raw(`GET /jobsvc/v1/jobs?q=${'a'.repeat(9_000)} HTTP/1.1\r\nHost: x\r\n\r\n`), 414, 'URI over 8,192 characters')
  isEnvelope(t, await raw(`GET /jobsvc/v1/jobs/${'a'.repeat(3_000)} HTTP/1.1\r\nHost: x\r\n\r\n`), 414, 'a path parameter over 2,048 characters')
})

t.test('a URL Fastify cannot decode: 400 in the envelope', async (t) => {
  isEnvelope(t, await raw(`GET /jobsvc/v1/jobs/%zz HTTP/1.1\r\nHost: x\r\n\r\n`), 400, 'bad percent-encoding')
  isEnvelope(t, await raw(`GET /jobsvc/v1/jobs/%ED%A0%80 HTTP/1.1\r\nHost: x\r\n\r\n`), 400, 'an encoded lone surrogate')
})

t.test('an answer the routes give still carries its own codes', async (t) => {
  const answer = await raw(`GET /jobsvc/v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)
  t.equal(answer.status, 401)
  t.equal(JSON.parse(answer.body).error.code, 'unauthorized')
})
