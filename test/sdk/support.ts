import { createServer as createHttpServer, type IncomingMessage } from 'node:http'
import { createServer, type AddressInfo } from 'node:net'
import { JobsvcClient, type Job, type Logger } from '@jobsvc/sdk'
import { eventually, type TestLike } from '../support/harness.ts'
import { createProjectWithCli } from '../support/spawned-install.ts'

export interface LogEntry {
  level: 'info' | 'warn' | 'error'
  message: string
  fields: Record<string, unknown>
}

/** A worker logger that keeps what it is told, for assertions. */
export function recordingLogger(): Logger & { entries: LogEntry[] } {
  const entries: LogEntry[] = []
  const record =
    (level: LogEntry['level']) =>
    (message: string, fields: object = {}) =>
      void entries.push({ level, message, fields: { ...fields } })
  return { entries, info: record('info'), warn: record('warn'), error: record('error') }
}

/** A promise the test opens when it chooses: handlers wait on it to stay running. */
export function gate(): { opened: Promise<void>; open(): void } {
  let open!: () => void
  const opened = new Promise<void>((resolve) => (open = resolve))
  return { opened, open }
}

/**
 * A client whose requests are counted by method and path (`POST /jobsvc/v1/workers/ack/batch`),
 * through the SDK's own `fetch` option, so a test can tell which routes a worker used.
 */
export function countingClient(url: string, apiKey: string): { client: JobsvcClient; requests: Map<string, number>; bodies: unknown[] } {
  const requests = new Map<string, number>()
  const bodies: unknown[] = []
  const client = new JobsvcClient({
    baseUrl: url,
    apiKey,
    fetch: (input, init) => {
      const key = `${init?.method ?? 'GET'} ${new URL(String(input)).pathname}`
      requests.set(key, (requests.get(key) ?? 0) + 1)
      if (typeof init?.body === 'string') bodies.push(JSON.parse(init.body))
      return fetch(input, init)
    },
  })
  return { client, requests, bodies }
}

/** Waits until the job reaches `state` (read from the log, so without projection lag). */
export function jobReaches(client: JobsvcClient, jobId: string, state: Job['state'], timeoutMs = 30_000): Promise<Job> {
  return eventually(
    async () => {
      const job = await client.jobs.get(jobId)
      return job.state === state ? job : null
    },
    timeoutMs,
    `${jobId} to be ${state}`,
  )
}

/** A TCP port free right now, so that a restarted service can listen where its clients point. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo
      server.close(() => resolve(port))
    })
  })
}

/** Creates a project with the operator CLI against the install `env` names; answers its API key. */
export async function cliProject(env: Record<string, string>): Promise<string> {
  return (await createProjectWithCli(env, 'sdk')).apiKey
}

export interface ProxiedRequest {
  method: string
  path: string
  idempotencyKey: string | undefined
  /** The request's JSON body, parsed; undefined without one. */
  body: unknown
}

/**
 * A proxy in front of the real service at `upstream` that lets `fault` spoil chosen exchanges: it
 * sees each request and the service's answer, and may cut the connection instead of passing the
 * answer on. `seen` keeps every request, for a test to tell what a client sent.
 */
export async function faultyProxy(
  t: TestLike,
  upstream: string,
  fault: (req: IncomingMessage, seen: number) => 'pass' | 'drop-answer' | 'bad-gateway',
) {
  const seen: ProxiedRequest[] = []
  const proxy = createHttpServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = chunks.length ? Buffer.concat(chunks) : undefined
    seen.push({
      method: req.method!,
      path: req.url!,
      idempotencyKey: req.headers['idempotency-key'] as string | undefined,
      body: body && req.headers['content-type']?.startsWith('application/json') ? JSON.parse(body.toString('utf8')) : undefined,
    })
    const verdict = fault(req, seen.length)
    if (verdict === 'bad-gateway') return void res.writeHead(502).end('upstream hiccup')
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !['host', 'content-length', 'connection'].includes(k))) as Record<
      string,
      string
    >
    // A client that hangs up (a worker's stop() cutting its long poll short) ends the upstream request too.
    const hungUp = new AbortController()
    res.once('close', () => hungUp.abort())
    let answer: Response
    let answerBody: Buffer
    try {
      answer = await fetch(upstream + req.url, { method: req.method, headers, body, signal: hungUp.signal })
      answerBody = Buffer.from(await answer.arrayBuffer())
    } catch (err) {
      if (hungUp.signal.aborted) return
      throw err
    }
    if (verdict === 'drop-answer') return void req.socket.destroy()
    res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' }).end(answerBody)
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => proxy.close(() => resolve())))
  return { url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, seen }
}
