// Every call the dashboard makes goes through here: same-origin, with the session cookie the
// login set, never an API key. Project data names its project in X-Jobsvc-Project and the
// service applies the member's role.

export class ApiError extends Error {
  constructor(status, code, message, requestId) {
    super(message)
    this.status = status
    this.code = code
    this.requestId = requestId
  }
}

function toQuery(query) {
  const params = new URLSearchParams()
  for (const [key, value] of Object.entries(query ?? {})) if (value !== undefined && value !== null && value !== '') params.set(key, String(value))
  const text = params.toString()
  return text === '' ? '' : `?${text}`
}

function headersFor(project, hasBody) {
  const headers = { accept: 'application/json' }
  if (hasBody) headers['content-type'] = 'application/json'
  if (project) headers['x-jobsvc-project'] = project
  return headers
}

async function errorOf(res) {
  const text = await res.text()
  let envelope = null
  try {
    envelope = JSON.parse(text).error ?? null
  } catch {
    // not the envelope: a proxy's page or a dropped connection
  }
  return new ApiError(
    res.status,
    envelope?.code ?? `http_${res.status}`,
    envelope?.message ?? (res.statusText || 'the request failed'),
    envelope?.request_id ?? res.headers.get('x-request-id'),
  )
}

/** One JSON call; refusals throw ApiError carrying the envelope's code, message and request id. */
export async function call(method, path, { body, project, query } = {}) {
  let res
  try {
    res = await fetch(path + toQuery(query), {
      method,
      headers: headersFor(project, body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
    })
  } catch {
    throw new ApiError(0, 'network_error', 'the service could not be reached', null)
  }
  if (!res.ok) throw await errorOf(res)
  if (res.status === 204) return null
  return res.json()
}

/** One server-sent event frame: `id` null when the frame named none, `event` "message" unless named. */
function toFrame(text) {
  const frame = { id: null, event: 'message', data: '' }
  const data = []
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith(':')) continue
    const colon = line.indexOf(':')
    const field = colon === -1 ? line : line.slice(0, colon)
    const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '')
    if (field === 'data') data.push(value)
    else if (field === 'id') frame.id = value
    else if (field === 'event') frame.event = value
  }
  frame.data = data.join('\n')
  return frame
}

/**
 * Reads a server-sent event stream answered to fetch, handing `onFrames` the frames of each chunk
 * received (so that a burst renders once); resolves when the stream ends.
 */
async function readFrames(res, onFrames) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffered = ''
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return
    buffered += value
    const frames = []
    let end
    while ((end = buffered.indexOf('\n\n')) !== -1) {
      frames.push(toFrame(buffered.slice(0, end)))
      buffered = buffered.slice(end + 2)
    }
    if (frames.length > 0) onFrames(frames)
  }
}

/** Opens a stream of server-sent events; a refusal throws ApiError, a lost connection `network_error`. */
async function openStream(path, headers, signal) {
  let res
  try {
    res = await fetch(path, { headers: { accept: 'text/event-stream', ...headers }, credentials: 'same-origin', signal })
  } catch (err) {
    if (signal?.aborted) throw err
    throw new ApiError(0, 'network_error', 'the service could not be reached', null)
  }
  if (!res.ok) throw await errorOf(res)
  return res
}

/**
 * Follows a job's progress stream (server-sent events). EventSource cannot send the project
 * header, so the stream is read with fetch and its frames parsed here. Resolves when the
 * stream ends (the job reached a final state, the 120 s limit, or `signal` aborted).
 */
export async function followJob(project, jobId, onSnapshot, signal) {
  const res = await openStream(`/jobsvc/v1/jobs/${encodeURIComponent(jobId)}/events`, { 'x-jobsvc-project': project }, signal)
  await readFrames(res, (frames) => {
    for (const frame of frames) if (frame.data !== '') onSnapshot(JSON.parse(frame.data))
  })
}

/**
 * Follows the project's event feed live (`GET /jobsvc/v1/events` as server-sent events), read
 * with fetch for the project header. It starts after the cursor `after` (sent as
 * `Last-Event-ID`), or where `query` says (`from_time`, else the oldest event kept). `onOpen`
 * runs once the service accepted; `onEvents` receives each chunk's events, oldest first;
 * `onCursor` every position the stream names, keep-alives included, so that a resume skips what
 * the filters already passed over. Resolves with the service's last frame (`{next_cursor,
 * has_more, reason}`), or null when the connection closed without one; a connection lost while
 * reading rejects.
 */
export async function followFeed(project, { query, after, signal, onOpen, onEvents, onCursor }) {
  const headers = { 'x-jobsvc-project': project }
  if (after) headers['last-event-id'] = after
  const res = await openStream(`/jobsvc/v1/events${toQuery(query)}`, headers, signal)
  onOpen()
  let last = null
  await readFrames(res, (frames) => {
    const events = []
    let cursor = null
    for (const frame of frames) {
      if (frame.event === 'end') {
        last = JSON.parse(frame.data)
        cursor = last.next_cursor
        continue
      }
      if (frame.data !== '') events.push(JSON.parse(frame.data))
      if (frame.id !== null) cursor = frame.id
    }
    if (events.length > 0) onEvents(events)
    if (cursor !== null) onCursor(cursor)
  })
  return last
}
