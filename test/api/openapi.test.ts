import { Validator } from '@seriousme/openapi-schema-validator'
import { Ajv2020 } from 'ajv/dist/2020.js'
import addFormats from 'ajv-formats'
import t, { type Test } from 'tap'
import { z } from 'zod'
import { buildApp } from '../../services/roles/api/app.ts'
import { mailedPaths } from '../../services/roles/api/dashboard-assets.ts'
import { errorCatalogue } from '../../services/roles/api/errors.ts'
import { errorResponses, serializeResponses } from '../../services/roles/api/openapi.ts'
import { isRemovedWrapperPath } from '../../services/roles/api/routes/removed-wrappers.ts'
import { httpRequest, startHarness, type Harness } from '../support/harness.ts'

// The API description (spec, Versioning 1): generated from the routes' zod schemas, public, and
// a valid OpenAPI 3.1 document that lists every route and every error code.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })

interface Operation {
  security?: Array<Record<string, string[]>>
  responses: Record<string, { content?: Record<string, { schema: object }> }>
}
interface Document {
  openapi: string
  info: { title: string; version: string }
  paths: Record<string, Record<string, Operation>>
  components: { schemas: Record<string, object>; responses: Record<string, { content: Record<string, { schema: object }> }> }
}

const described = await httpRequest<Document>(h.url, null, 'GET', '/jobsvc/v1/openapi.json')
const publicDoc = described.body
// The whole description, staff routes included (served to staff at /platform/v1/admin/openapi.json):
// what the checks below hold every route to.
const built = await buildApp(h.runtime, new AbortController().signal)
t.teardown(() => built.app.close())
await built.app.ready()
const doc = built.app.swagger() as unknown as Document
const methods = ['get', 'put', 'post', 'delete', 'patch']
const operations = Object.entries(doc.paths).flatMap(([path, item]) =>
  Object.entries(item)
    .filter(([method]) => methods.includes(method))
    .map(([method, op]) => ({ path, method, op })),
)

t.test('GET /jobsvc/v1/openapi.json answers without a key, with a request id', async (t) => {
  t.equal(described.status, 200)
  t.match(described.headers.get('content-type') ?? '', /application\/json/)
  t.match(described.headers.get('x-request-id') ?? '', /^[0-9A-HJKMNP-TV-Z]{26}$/)
  t.equal(doc.openapi, '3.1.0')
  t.strictSame(doc.info.title, 'jobsvc')
  t.equal(doc.info.version, 'v1', 'labelled v1')
})

t.test('the document is valid OpenAPI 3.1 for a standard validator', async (t) => {
  const validator = new Validator()
  const result = await validator.validate(structuredClone(doc) as never)
  t.equal(validator.version, '3.1')
  t.ok(result.valid, `valid OpenAPI${result.valid ? '' : `: ${JSON.stringify(result.errors, null, 2)}`}`)
})

/**
 * The real app's routes, from Fastify's own route tree (`printRoutes` with full paths): each line
 * is a node, nested by four columns, whose path continues its parent's.
 */
function registeredRoutes(tree: string): Array<{ method: string; path: string }> {
  const routes: Array<{ method: string; path: string }> = []
  const stack: string[] = []
  for (const line of tree.split('\n')) {
    const node = /^([│ ]*)[├└]── (.+?)(?: \(([A-Z, ]+)\))?$/u.exec(line)
    if (node === null) continue
    const depth = [...node[1]!].length / 4
    stack.length = depth
    stack.push(node[2]!)
    for (const method of node[3]?.split(', ') ?? []) routes.push({ method, path: stack.join('') })
  }
  return routes
}

t.test('the public document is the whole one without the staff routes', async (t) => {
  const staffPaths = Object.keys(doc.paths).filter((p) => p.startsWith('/platform/v1/admin'))
  t.ok(staffPaths.length >= 5, `the whole one has the staff routes (${staffPaths.length})`)
  t.same(
    Object.keys(publicDoc.paths).filter((p) => p.startsWith('/platform/v1/admin')),
    [],
    'the public one has none',
  )
  t.same(
    Object.keys(publicDoc.paths).sort(),
    Object.keys(doc.paths)
      .filter((p) => !staffPaths.includes(p))
      .sort(),
    'and every other route',
  )
  t.notOk(JSON.stringify(publicDoc).includes('StaffProject'), "nor the staff routes' own schemas")
  const page = await httpRequest<Document>(h.url, null, 'GET', '/docs/json')
  t.same(Object.keys(page.body.paths).sort(), Object.keys(publicDoc.paths).sort(), 'the reference page at /docs shows the public one')
})

t.test('every operation has an example of its JSON request body and of each JSON answer, valid against its schema', async (t) => {
  const ajv = new Ajv2020({ strict: false, allErrors: true })
  addFormats.default(ajv)
  type Media = { schema: object; example?: unknown }
  let checked = 0
  for (const { path, method, op } of operations) {
    const media: Array<[string, Media | undefined]> = [
      ['request', (op as { requestBody?: { content?: Record<string, Media> } }).requestBody?.content?.['application/json']],
      ...Object.entries(op.responses).map(
        ([status, r]) => [status, r.content?.['application/json'] as Media | undefined] as [string, Media | undefined],
      ),
    ]
    for (const [what, m] of media) {
      if (m === undefined) continue
      const where = `${method.toUpperCase()} ${path} ${what}`
      if (m.example === undefined) {
        t.fail(`${where} has no example`)
        continue
      }
      const validate = ajv.compile({ ...m.schema, components: doc.components })
      if (!validate(m.example)) t.fail(`${where}: ${ajv.errorsText(validate.errors)}`)
      checked++
    }
  }
  t.ok(checked > 300, `${checked} examples, each valid`)
  t.ok(JSON.stringify(publicDoc).includes('"example"'), 'the public document carries them too')
})

t.test('every registered route is in the document', async (t) => {
  const app = built.app
  const routes = registeredRoutes(app.printRoutes({ commonPrefix: false }))
  t.ok(routes.length > 100, `${routes.length} method and path pairs registered`)
  t.ok(
    routes.some((r) => r.method === 'POST' && r.path === '/jobsvc/v1/workers/poll'),
    'the parser reads plain routes',
  )
  t.ok(
    routes.some((r) => r.method === 'POST' && r.path === '/platform/v1/projects/:projectId/members'),
    'the parser reads nested routes',
  )
  const documented = new Set(operations.map((o) => `${o.method.toUpperCase()} ${o.path}`))
  const checked = routes.filter(
    (r) =>
      // HEAD is Fastify's automatic mirror of each GET; OPTIONS * is the CORS preflight.
      r.method !== 'HEAD' &&
      r.method !== 'OPTIONS' &&
      // The reference page and its assets are not part of the API.
      r.path !== '/docs' &&
      !r.path.startsWith('/docs/') &&
      // So are the dashboard's pages and files, and the e-mailed links that lead to them.
      !r.path.startsWith('/dashboard') &&
      !(mailedPaths as readonly string[]).includes(r.path) &&
      // Removed routes answer 410 and are described once, as the RouteRemoved response.
      !isRemovedWrapperPath(r.path),
  )
  for (const route of checked) {
    // A plugin's root route answers with and without a trailing slash: one operation.
    const path = route.path.replace(/(.)\/$/, '$1').replace(/:(\w+)/g, '{$1}')
    t.ok(documented.has(`${route.method} ${path}`), `${route.method} ${path} is documented`)
  }
  t.ok(documented.has('GET /jobsvc/v1/openapi.json'), 'the description describes itself')
})

function documentedCodes(responses: Operation['responses']): Array<{ status: number; code: string }> {
  return Object.entries(responses).flatMap(([status, response]) => {
    const schema = response.content?.['application/json']?.schema as
      { properties?: { error?: { properties?: { code?: { enum?: string[] } } } } } | undefined
    return (schema?.properties?.error?.properties?.code?.enum ?? []).map((code) => ({ status: Number(status), code }))
  })
}

/** The codes of the document's shared responses (no route, the version's sunset, a removed route), with their statuses. */
function sharedResponseCodes(): Array<{ status: number; code: string }> {
  const statuses = { RouteNotFound: 404, VersionSunset: 410, RouteRemoved: 410 }
  return Object.entries(statuses).flatMap(([name, status]) => documentedCodes({ [status]: doc.components.responses[name]! }))
}

/**
 * Codes a batch item may answer with, as its error object's description lists them ("`code`
 * (status)", services/roles/api/openapi.ts, itemErrorObject): some exist only there (a graph
 * batch's `graph_not_created`).
 */
function itemErrorCodes(): Array<{ status: number; code: string }> {
  return [...JSON.stringify(doc).matchAll(/machine-readable and stable: ([^"]*)/g)].flatMap((m) =>
    [...m[1]!.matchAll(/\\?`([a-z_]+)\\?` \((\d{3})\)/g)].map((c) => ({ status: Number(c[2]), code: c[1]! })),
  )
}

t.test('every status and code of the error catalogue is documented', async (t) => {
  const found = new Set(
    [...operations.flatMap((o) => documentedCodes(o.op.responses)), ...sharedResponseCodes(), ...itemErrorCodes()].map(
      (e) => `${e.status} ${e.code}`,
    ),
  )
  for (const { status, code } of errorCatalogue) t.ok(found.has(`${status} ${code}`), `${status} ${code}`)
})

t.test('every operation names its credentials, and the common codes of its surface', async (t) => {
  for (const { path, method, op } of operations) {
    const name = `${method.toUpperCase()} ${path}`
    const codes = new Set(documentedCodes(op.responses).map((e) => `${e.status} ${e.code}`))
    t.ok(op.security !== undefined, `${name}: security`)
    t.ok(codes.has('500 internal_error'), `${name}: 500 internal_error`)
    if (op.security?.some((s) => 'apiKey' in s)) {
      for (const common of ['401 unauthorized', '429 rate_limit_exceeded', '400 invalid_request']) t.ok(codes.has(common), `${name}: ${common}`)
      if (method !== 'get')
        t.ok(codes.has('400 invalid_idempotency_key') && codes.has('409 idempotency_key_reuse'), `${name}: the Idempotency-Key codes`)
    }
    if (op.security?.some((s) => 'sessionBearer' in s) && !op.security.some((s) => Object.keys(s).length === 0)) {
      t.ok(codes.has('401 unauthorized'), `${name}: 401 unauthorized`)
    }
  }
})

t.test('the reference page is served at /docs, from local files, without a key', async (t) => {
  const page = await httpRequest<string>(h.url, null, 'GET', '/docs')
  t.equal(page.status, 200)
  t.match(page.headers.get('content-type') ?? '', /text\/html/)
  t.match(page.body, /swagger-ui/i)
  t.match(page.headers.get('x-request-id') ?? '', /^[0-9A-HJKMNP-TV-Z]{26}$/)
  const bundle = await fetch(`${h.url}/docs/static/swagger-ui-bundle.js`)
  t.equal(bundle.status, 200, 'the UI script is served by the service itself')
  await bundle.arrayBuffer()
  const missing = await httpRequest(h.url, null, 'GET', '/docs/static/no-such-file.js')
  t.equal(missing.status, 404)
  t.equal(missing.body.error.code, 'route_not_found', 'unknown paths keep the envelope')
})

/** Sends a request of each kind to `h` and checks every answer against the document. */
async function answersMatchTheDocument(t: Test, h: Harness): Promise<void> {
  const ajv = new Ajv2020({ strict: false, allErrors: true })
  addFormats.default(ajv)
  const check = (method: string, path: string, status: number, body: unknown) => {
    const schema = doc.paths[path]?.[method]?.responses[String(status)]?.content?.['application/json']?.schema
    if (schema === undefined) return t.fail(`${method.toUpperCase()} ${path} documents no JSON ${status}`)
    // References point at #/components/schemas: give the schema the components to resolve them in.
    const validate = ajv.compile({ ...schema, components: doc.components })
    t.ok(validate(body), `${method.toUpperCase()} ${path} ${status}${validate.errors ? `: ${ajv.errorsText(validate.errors)}` : ''}`)
  }

  const created = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'openapi.check', payload: { n: 1 }, tags: { team: 'docs' } })
  check('post', '/jobsvc/v1/jobs', created.status, created.body)
  const read = await h.request('GET', `/jobsvc/v1/jobs/${created.body.id}`)
  check('get', '/jobsvc/v1/jobs/{jobId}', read.status, read.body)
  const listed = await h.request('GET', `/jobsvc/v1/jobs?min_seq=${created.headers.get('x-event-seq')}`)
  check('get', '/jobsvc/v1/jobs', listed.status, listed.body)
  const polled = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_docs', queues: ['default'], wait_seconds: 0 })
  check('post', '/jobsvc/v1/workers/poll', polled.status, polled.body)
  t.equal(polled.body.jobs.length, 1, 'the poll claimed the job')
  const acked = await h.request('POST', '/jobsvc/v1/workers/ack', {
    job_id: created.body.id,
    worker_id: 'wrk_docs',
    status: 'failed',
    error: { message: 'boom' },
  })
  check('post', '/jobsvc/v1/workers/ack', acked.status, acked.body)
  const batch = await h.request('POST', '/jobsvc/v1/jobs/batch', {
    jobs: [
      { job_type: 'openapi.batch', payload: {} },
      { job_type: '' },
      { job_type: 'x', payload: {}, parent_job_id: 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV' },
    ],
  })
  check('post', '/jobsvc/v1/jobs/batch', batch.status, batch.body)
  t.same(
    batch.body.results.map((r: { status: number }) => r.status),
    [201, 400, 422],
    'the batch answer has a created and two failed items to check',
  )
  const batchPoll = await h.request('POST', '/jobsvc/v1/workers/poll', { worker_id: 'wrk_docs', queues: ['default'], wait_seconds: 5 })
  const acks = await h.request('POST', '/jobsvc/v1/workers/ack/batch', {
    acks: [
      { job_id: batchPoll.body.jobs[0]?.id, worker_id: 'wrk_docs', status: 'succeeded' },
      { job_id: created.body.id, worker_id: 'wrk_docs', status: 'succeeded' },
      {},
    ],
  })
  check('post', '/jobsvc/v1/workers/ack/batch', acks.status, acks.body)
  t.same(
    acks.body.results.map((r: { status: number }) => r.status),
    [200, 409, 400],
    'the ack batch answer has an acked and two failed items to check',
  )
  const history = await h.request('GET', `/jobsvc/v1/jobs/${created.body.id}/history`)
  check('get', '/jobsvc/v1/jobs/{jobId}/history', history.status, history.body)
  const asOf = await h.request('GET', `/jobsvc/v1/jobs/${created.body.id}?as_of=${encodeURIComponent(history.body.data[1].cursor)}`)
  check('get', '/jobsvc/v1/jobs/{jobId}', asOf.status, asOf.body)
  t.match(asOf.body, { state: 'processing', as_of: { sequence: history.body.data[1].sequence } }, 'the job as of its claim, with its as_of to check')
  const byTime = await h.request('GET', `/jobsvc/v1/jobs/${created.body.id}?as_of=${encodeURIComponent(history.body.data[0].time)}`)
  check('get', '/jobsvc/v1/jobs/{jobId}', byTime.status, byTime.body)
  const filtered = await h.request(
    'GET',
    `/jobsvc/v1/jobs/${created.body.id}/history?types=job_claimed&since=${encodeURIComponent(history.body.data[0].time)}`,
  )
  check('get', '/jobsvc/v1/jobs/{jobId}/history', filtered.status, filtered.body)
  const activity = await h.request('GET', `/jobsvc/v1/activity?min_seq=${created.headers.get('x-event-seq')}`)
  check('get', '/jobsvc/v1/activity', activity.status, activity.body)
  t.ok(activity.body.data.length > 0, 'the activity page has items to check')

  const missing = await h.request('GET', '/jobsvc/v1/jobs/job_01ARZ3NDEKTSV4RRFFQ69G5FAV')
  check('get', '/jobsvc/v1/jobs/{jobId}', missing.status, missing.body)
  const unauthenticated = await httpRequest(h.url, null, 'GET', '/jobsvc/v1/jobs')
  check('get', '/jobsvc/v1/jobs', unauthenticated.status, unauthenticated.body)
  const live = await httpRequest(h.url, null, 'GET', '/jobsvc/health/live')
  check('get', '/jobsvc/health/live', live.status, live.body)
}

t.test('answers match the schemas the document gives for them', (t) => answersMatchTheDocument(t, h))

t.test('with compiled serializers (production: validate_responses off), answers still match the document', async (t) => {
  const compiled = await startHarness(t, import.meta.filename, {
    roles: ['api', 'projector'],
    suffix: '_compiled',
    tunables: { validate_responses: false },
  })
  await answersMatchTheDocument(t, compiled)
})

t.test('error bodies are written as they are; success bodies must match their schema', async (t) => {
  const compile = (status: string, schema: z.ZodType) =>
    serializeResponses({ schema, method: 'GET', url: '/jobsvc/v1/jobs/:jobId', httpStatus: status })
  // A code the route does not list must not turn the refusal into a 500.
  const notFound = compile('404', errorResponses('job_not_found')[404]!)
  const undocumented = { error: { code: 'route_not_found', message: 'no route', request_id: '01ARZ3NDEKTSV4RRFFQ69G5FAV' } }
  t.equal(notFound(undocumented), JSON.stringify(undocumented), 'an undocumented code is written unchanged')
  const ok = compile('200', z.strictObject({ id: z.string() }))
  t.equal(ok({ id: 'job_1' }), '{"id":"job_1"}', 'a matching success body is written')
  t.throws(() => ok({ id: 'job_1', secret: 'x' }), 'a field the schema does not list fails loudly')
  t.throws(() => ok({ id: 1 }), 'a field of another type fails loudly')
})
