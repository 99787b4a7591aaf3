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

/**
 * Follows a job's progress stream (server-sent events). EventSource cannot send the project
 * header, so the stream is read with fetch and its frames parsed here. Resolves when the
 * stream ends (the job reached a final state, the 120 s limit, or `signal` aborted).
 */
export async function followJob(project, jobId, onSnapshot, signal) {
  const res = await fetch(`/jobsvc/v1/jobs/${encodeURIComponent(jobId)}/events`, {
    headers: { accept: 'text/event-stream', 'x-jobsvc-project': project },
    credentials: 'same-origin',
    signal,
  })
  if (!res.ok) throw await errorOf(res)
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffered = ''
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return
    buffered += value
    let end
    while ((end = buffered.indexOf('\n\n')) !== -1) {
      const frame = buffered.slice(0, end)
      buffered = buffered.slice(end + 2)
      const data = frame
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trim())
        .join('\n')
      if (data !== '') onSnapshot(JSON.parse(data))
    }
  }
}
