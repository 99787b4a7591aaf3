import { setTimeout as sleep } from 'node:timers/promises'
import { eventually, httpRequest, type HttpResponse } from './harness.ts'

/** What a drill's clients saw: every answer by route and status, and what no answer may be. */
export interface DrillLoad {
  /** Jobs answered 201. */
  created: Set<string>
  /** Claims by `<job id>#<attempt>`: more than one is an attempt handed out twice. */
  claims: Map<string, number>
  /** Answers by `<method> <path> <status>`. */
  statuses: Map<string, number>
  /** Answers that must not be: a 5xx other than 503, a 503 without Retry-After, an ack refused. */
  wrong: string[]
  /** Stops the creators (the workers go on). */
  stopCreates(): Promise<void>
  /** Stops the workers. */
  stopWork(): Promise<void>
  /**
   * After the outage: waits for 30 more jobs accepted, stops the creators, waits until the list
   * shows every accepted job (and each of `also`) succeeded and nothing else left to do, and stops
   * the workers.
   */
  settle(also?: string[]): Promise<void>
  /** Attempts handed out more than once. */
  claimedTwice(): string[]
}

/**
 * A workload of creates, claims and acks on `queue` against the API at `url`, run until stopped:
 * three creators, three workers polling up to five jobs each and acking each job `succeeded`. A
 * 503 or a refused connection is retried after 100 ms, as a client with backoff does; an ack is
 * retried until it is answered 200.
 */
export function startDrillLoad(url: string, apiKey: string, queue: string): DrillLoad {
  const load = { created: new Set<string>(), claims: new Map<string, number>(), statuses: new Map<string, number>(), wrong: [] as string[] }
  let creating = true
  let working = true
  const call = async (method: string, path: string, body: unknown): Promise<HttpResponse | null> => {
    let res: HttpResponse
    try {
      res = await httpRequest(url, apiKey, method, path, body)
    } catch {
      return null
    }
    const key = `${method} ${path} ${res.status}`
    load.statuses.set(key, (load.statuses.get(key) ?? 0) + 1)
    if (res.status >= 500 && res.status !== 503) load.wrong.push(`${key} ${JSON.stringify(res.body)}`)
    if (res.status === 503 && !/^\d+$/.test(res.headers.get('retry-after') ?? '')) load.wrong.push(`${key} without Retry-After`)
    return res
  }
  const creator = async () => {
    while (creating) {
      const res = await call('POST', '/jobsvc/v1/jobs', { job_type: 'drill', queue, payload: {} })
      if (res?.status === 201) load.created.add(res.body.id)
      else await sleep(100)
    }
  }
  const worker = async (workerId: string) => {
    while (working) {
      const res = await call('POST', '/jobsvc/v1/workers/poll', { worker_id: workerId, queues: [queue], capacity: 5, wait_seconds: 1 })
      if (res?.status !== 200) {
        await sleep(100)
        continue
      }
      for (const job of res.body.jobs as Array<{ id: string; attempt: number }>) {
        const attempt = `${job.id}#${job.attempt}`
        load.claims.set(attempt, (load.claims.get(attempt) ?? 0) + 1)
        while (working) {
          const ack = await call('POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: workerId, status: 'succeeded' })
          if (ack?.status === 200) break
          if (ack !== null && ack.status !== 503) {
            load.wrong.push(`ack of ${attempt}: ${ack.status} ${JSON.stringify(ack.body)}`)
            break
          }
          await sleep(100)
        }
      }
    }
  }
  const creators = Array.from({ length: 3 }, creator)
  const workers = Array.from({ length: 3 }, (_, i) => worker(`drill-${i}`))
  const stopCreates = async () => {
    creating = false
    await Promise.all(creators)
  }
  const stopWork = async () => {
    creating = working = false
    await Promise.all([...creators, ...workers])
  }
  return {
    ...load,
    stopCreates,
    stopWork,
    async settle(also = []) {
      const before = load.created.size
      await eventually(async () => load.created.size >= before + 30, 30_000, 'jobs accepted again')
      await stopCreates()
      await eventually(
        async () => {
          const listed = await listedStates(url, apiKey, queue)
          return (
            listed !== null && firstNotSucceeded(listed, [...load.created, ...also]) === null && [...listed.values()].every((s) => s === 'succeeded')
          )
        },
        60_000,
        'every accepted job succeeded, and the list shows nothing left to do',
      )
      await stopWork()
    },
    claimedTwice: () => [...load.claims].filter(([, n]) => n > 1).map(([attempt]) => attempt),
  }
}

/**
 * The jobs of `queue` as the list route shows them (every page), by id → state; null while the
 * list is not answered 200.
 */
async function listedStates(url: string, apiKey: string, queue: string): Promise<Map<string, string> | null> {
  const states = new Map<string, string>()
  let cursor: string | null = null
  do {
    const res: HttpResponse = await httpRequest(url, apiKey, 'GET', `/jobsvc/v1/jobs?queue=${queue}&limit=100${cursor ? `&cursor=${cursor}` : ''}`)
    if (res.status !== 200) return null
    for (const job of res.body.data as Array<{ id: string; state: string }>) states.set(job.id, job.state)
    cursor = res.body.has_more ? res.body.next_cursor : null
  } while (cursor !== null)
  return states
}

/** The first of `ids` the list does not show `succeeded`, with what it shows instead; null when every one is. */
function firstNotSucceeded(listed: Map<string, string>, ids: Iterable<string>): string | null {
  for (const id of ids) if (listed.get(id) !== 'succeeded') return `${id} is ${listed.get(id) ?? 'not listed'}`
  return null
}
