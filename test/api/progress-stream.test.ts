import t from 'tap'
import { startHarness } from '../support/harness.ts'

interface Frame {
  event: string
  data: { state: string; progress: number | null; attempt: number; max_attempts: number }
  at: number
}

/** Opens the stream and collects its frames until it closes. */
function openStream(url: string, apiKey: string, jobId: string) {
  const frames: Frame[] = []
  let status = 0
  let contentType = ''
  const done = (async () => {
    const res = await fetch(`${url}/jobsvc/v1/jobs/${jobId}/events`, { headers: { authorization: `Bearer ${apiKey}` } })
    status = res.status
    contentType = res.headers.get('content-type') ?? ''
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
  })()
  return { frames, done, status: () => status, contentType: () => contentType }
}

async function until(check: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not reached')
    await new Promise((r) => setTimeout(r, 10))
  }
}

t.test('the job progress stream', async (t) => {
  const h = await startHarness(t, import.meta.filename)

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
    t.same(stream.frames.map((f) => f.data.state), ['pending', 'processing', 'processing', 'succeeded'])
  })

  await t.test('a terminal job sends its snapshot and closes; a reconnect gets the current snapshot first', async (t) => {
    const created = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'sse2', payload: {}, run_at: new Date(Date.now() + 3_600_000).toISOString() })
    await h.request('POST', `/jobsvc/v1/jobs/${created.body.id}/cancel`)
    const stream = openStream(h.url, h.apiKey, created.body.id)
    await stream.done
    t.same(stream.frames.map((f) => f.data.state), ['cancelled'])
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
})
