import t from 'tap'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'

interface Frame {
  event: string
  data: { state: string; progress: number | null; attempt: number; max_attempts: number }
  at: number
}

/** Opens the stream and collects its frames until it closes (or `disconnect` drops it). */
function openStream(url: string, apiKey: string, jobId: string) {
  const frames: Frame[] = []
  let status = 0
  let contentType = ''
  let retryAfter: string | null = null
  let errorCode: string | null = null
  const gone = new AbortController()
  const done = (async () => {
    const res = await fetch(`${url}/jobsvc/v1/jobs/${jobId}/events`, { headers: { authorization: `Bearer ${apiKey}` }, signal: gone.signal })
    status = res.status
    contentType = res.headers.get('content-type') ?? ''
    retryAfter = res.headers.get('retry-after')
    if (status !== 200) {
      errorCode = ((await res.json()) as { error: { code: string } }).error.code
      return
    }
    if (!res.body) return
    const decoder = new TextDecoder()
    let buffer = ''
    for await (const chunk of res.body) {
      buffer += decoder.decode(chunk as Uint8Array, { stream: true })
      let end
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        const event = /^event: (.*)$/m.exec(block)?.[1] ?? ''
        const data = /^data: (.*)$/m.exec(block)?.[1]
        if (data) frames.push({ event, data: JSON.parse(data), at: performance.now() })
      }
    }
  })().catch((err: Error) => {
    if (err.name !== 'AbortError') throw err
  })
  return {
    frames,
    done,
    status: () => status,
    contentType: () => contentType,
    retryAfter: () => retryAfter,
    errorCode: () => errorCode,
    disconnect: () => gone.abort(),
  }
}

async function until(check: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not reached')
    await new Promise((r) => setTimeout(r, 10))
  }
}

/** Streams a project may hold open at once here: the tests below open one at a time, the last one more. */
const maxStreams = 2

t.test('the job progress stream', async (t) => {
  const h = await startHarness(t, import.meta.filename, { tunables: { max_event_streams_per_project: maxStreams } })

  await t.test('an unknown job is 404 job_not_found in the envelope', async (t) => {
    const res = await h.request('GET', '/jobsvc/v1/jobs/job_01aaaaaaaaaaaaaaaaaaaaaaaa/events')
    t.equal(res.status, 404)
    t.equal(res.body.error.code, 'job_not_found')
  })

  await t.test('snapshot at once, a frame per change of state or progress, closed on a terminal state', async (t) => {
    const created = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'sse', queue: 'sse', payload: {} })
    const stream = openStream(h.url, h.apiKey, created.body.id)
    await until(() => stream.frames.length === 1)
    t.equal(stream.status(), 200)
    t.match(stream.contentType(), /^text\/event-stream/)
    t.same(stream.frames[0], { event: 'snapshot', data: { state: 'pending', progress: null, attempt: 0, max_attempts: 3 }, at: stream.frames[0]!.at })

    const claimedAt = performance.now()
    const polled = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: ['sse'], wait_seconds: 1 })
    t.equal(polled.body.jobs.length, 1)
    await until(() => stream.frames.length === 2)
    t.match(stream.frames[1]!.data, { state: 'processing', attempt: 1 })
    t.comment(`claim frame ${Math.round(stream.frames[1]!.at - claimedAt)} ms after the poll was sent`)

    await h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: created.body.id, worker_id: 'w' })
    await h.request('POST', '/jobsvc/v1/workers/heartbeat', { job_id: created.body.id, worker_id: 'w', progress: 0.5 })
    await until(() => stream.frames.length === 3)
    t.match(stream.frames[2]!.data, { state: 'processing', progress: 0.5 }, 'a heartbeat without a new progress sends nothing')

    await h.request('POST', '/jobsvc/v1/workers/ack', { job_id: created.body.id, worker_id: 'w', status: 'succeeded' })
    await stream.done
    t.same(
      stream.frames.map((f) => f.data.state),
      ['pending', 'processing', 'processing', 'succeeded'],
    )
  })

  await t.test('a terminal job sends its snapshot and closes; a reconnect gets the current snapshot first', async (t) => {
    const created = await h.request('POST', '/jobsvc/v1/jobs', {
      job_type: 'sse2',
      payload: {},
      run_at: new Date(Date.now() + 3_600_000).toISOString(),
    })
    await h.request('POST', `/jobsvc/v1/jobs/${created.body.id}/cancel`)
    const stream = openStream(h.url, h.apiKey, created.body.id)
    await stream.done
    t.same(
      stream.frames.map((f) => f.data.state),
      ['cancelled'],
    )
  })

  await t.test('the stream closes after 120 seconds (clock injected)', async (t) => {
    const created = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'sse3', queue: 'idle', payload: {} })
    const stream = openStream(h.url, h.apiKey, created.body.id)
    await until(() => stream.frames.length === 1)
    const realNow = h.runtime.now
    t.teardown(() => void (h.runtime.now = realNow))
    h.runtime.now = () => new Date(Date.now() + 121_000)
    await stream.done
    t.equal(stream.frames.length, 1, 'only the first snapshot: nothing changed')
  })
  await t.test(
    'a project has at most max_event_streams_per_project streams open: 429 with Retry-After; every way a stream ends frees its slot',
    async (t) => {
      // The streams of the tests above all ended (terminal state, 120 s), so every slot is free now.
      const other = await h.newProject()
      const newJob = async (apiKey = h.apiKey) =>
        (await httpRequest(h.url, apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'sse-cap', queue: 'sse-cap', payload: {} })).body.id as string
      const jobs = [await newJob(), await newJob(), await newJob()]
      type Stream = ReturnType<typeof openStream>
      /** A stream once it is open (its first frame came) or refused. */
      const opened = async (id: string, apiKey = h.apiKey): Promise<Stream> => {
        const stream = openStream(h.url, apiKey, id)
        await until(() => stream.frames.length > 0 || (stream.status() !== 0 && stream.status() !== 200))
        if (stream.status() !== 200) await stream.done
        return stream
      }
      const drop = async (streams: Stream[]) => {
        for (const stream of streams) stream.disconnect()
        await Promise.all(streams.map((stream) => stream.done))
      }
      /**
       * Opens `maxStreams` streams at once and one more. The server frees a dropped stream's slot
       * when it sees the close, so until it has, one of the first streams may be refused: then all
       * are dropped and tried again. Once all of them are open, the project holds every slot.
       */
      async function fill(what: string): Promise<{ open: Stream[]; extra: Stream }> {
        return eventually(
          async () => {
            const open: Stream[] = []
            for (const id of jobs.slice(0, maxStreams)) {
              open.push(await opened(id))
              if (open.at(-1)!.status() !== 200) return void (await drop(open))
            }
            return { open, extra: await opened(jobs[maxStreams]!) }
          },
          15_000,
          `${maxStreams} streams open ${what}`,
        )
      }
      const isRefused = (extra: Stream, what: string) => {
        t.equal(extra.status(), 429, `${what}: stream number ${maxStreams + 1} is refused`)
        t.equal(extra.errorCode(), 'rate_limit_exceeded', `${what}: rate_limit_exceeded`)
        t.equal(extra.retryAfter(), '5', `${what}: with Retry-After`)
      }

      for (let i = 0; i < maxStreams + 2; i++) {
        const missing = await h.request('GET', '/jobsvc/v1/jobs/job_01aaaaaaaaaaaaaaaaaaaaaaaa/events')
        t.equal(missing.status, 404, `unknown job ${i + 1}: 404, and no slot kept`)
      }
      const first = await fill('after not-found answers')
      isRefused(first.extra, 'at first')
      const theirs = await opened(await newJob(other.apiKey), other.apiKey)
      t.equal(theirs.status(), 200, "another project's stream opens meanwhile")
      await drop([theirs])

      await drop(first.open)
      const second = await fill('after a disconnect')
      isRefused(second.extra, 'after a disconnect')

      t.equal((await h.request('POST', `/jobsvc/v1/jobs/${jobs[0]}/cancel`)).status, 200)
      await second.open[0]!.done
      t.equal(second.open[0]!.frames.at(-1)!.data.state, 'cancelled', 'the first stream closed on its terminal state')
      await drop([second.open[1]!])
      jobs[0] = await newJob()
      const third = await fill('after a terminal state')
      isRefused(third.extra, 'after a terminal state')
      await drop(third.open)
    },
  )
})
