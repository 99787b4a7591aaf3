import { createServer, type AddressInfo } from 'node:net'
import { JobsvcClient, type Job, type Logger } from '@jobsvc/sdk'
import { eventually } from '../support/harness.ts'
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
