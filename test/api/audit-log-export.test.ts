import http from 'node:http'
import t, { type Test } from 'tap'
import type { AuditRow } from '../../projections/activity.ts'
import { eventually, httpRequest, type HttpResponse } from '../support/harness.ts'
import { joinProject, newVerifiedUser, startPlatformHarness, type VerifiedUser } from '../support/platform.ts'
import { parseCsv } from '../support/rfc4180.ts'

// GET /jobsvc/v1/projects/{projectId}/audit-log/export over HTTP against the whole service
// (spec, Endpoints and Limits/Exports; docs/api-notes.md, "Audit-log export" for the row fields).
const h = await startPlatformHarness(t, import.meta.filename)

const realClock = h.runtime.now
let shiftMs = 0
/** Each export that must pass the cooldown moves the service clock one cooldown further on. */
const nextMinute = () => {
  shiftMs += 61_000
  h.runtime.now = () => new Date(Date.now() + shiftMs)
}
t.teardown(() => void (h.runtime.now = realClock))

const exportPath = (projectId: string, query: string) => `/jobsvc/v1/projects/${projectId}/audit-log/export?${query}`
const asUser = (user: { jwt: string }) => ({ jwt: user.jwt })
const jsonlFields = ['id', 'created_at', 'kind', 'target_type', 'target_id', 'summary', 'actor_user_id', 'metadata']
const csvHeader = ['Id', 'CreatedAt', 'Kind', 'TargetType', 'TargetId', 'Summary', 'ActorUserId', 'Metadata']

function isError(t: Test, res: HttpResponse, status: number, code: string, what: string): void {
  t.equal(res.status, status, `${what}: status ${status} (got ${res.status} ${JSON.stringify(res.body)})`)
  t.equal(res.body?.error?.code, code, `${what}: code ${code}`)
}

const join = (owner: VerifiedUser, projectId: string, role: string) => joinProject(h, owner, projectId, role)

interface DbRow extends AuditRow {
  seq: string
}

/** The project's activity rows as the database holds them, oldest first. */
const activityOf = (projectId: string) =>
  h.runtime.sql<
    DbRow[]
  >`SELECT id, created_at, kind, target_type, target_id, summary, user_id, metadata, seq FROM activity WHERE project_id = ${projectId} ORDER BY created_at, id`

/** The `audit_log_exported` rows in the order the exports were recorded. */
async function exportRows(projectId: string, count: number): Promise<DbRow[]> {
  return eventually(
    async () => {
      const rows = (await activityOf(projectId)).filter((r) => r.kind === 'audit_log_exported').sort((a, b) => Number(a.seq) - Number(b.seq))
      return rows.length === count ? rows : null
    },
    15_000,
    `${count} audit_log_exported rows`,
  )
}

const ndjson = (res: HttpResponse) =>
  String(res.body)
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>)

const owner = await newVerifiedUser(h)
const projectId = owner.projectId
const admin = await join(owner, projectId, 'admin')
const member = await join(owner, projectId, 'member')
const viewer = await join(owner, projectId, 'viewer')
const outsider = await newVerifiedUser(h)
// An awkward name, so that the summary and metadata need RFC 4180 quoting in the CSV.
const renamed = await h.platform('PATCH', `/platform/v1/projects/${projectId}`, { name: 'audited, "quoted"\r\nname' }, asUser(owner))
if (renamed.status !== 200) throw new Error(`rename: ${renamed.status} ${JSON.stringify(renamed.body)}`)
for (let i = 0; i < 3; i++) {
  const created = await httpRequest(h.url, owner.apiKey, 'POST', '/jobsvc/v1/jobs', { job_type: 'audit', queue: 'q', payload: { i } })
  if (created.status !== 201) throw new Error(`create: ${created.status} ${JSON.stringify(created.body)}`)
}
await eventually(async () => (await activityOf(projectId)).filter((r) => r.kind === 'job_created').length === 3, 15_000, 'job_created rows')

const from = new Date(Date.now() - 3_600_000).toISOString()
const until = new Date(Date.now() + 3_600_000).toISOString()
const fullWindow = `from=${from}&until=${until}`

t.test('no session, a bad one or an API key: 401', async (t) => {
  isError(t, await h.platform('GET', exportPath(projectId, fullWindow)), 401, 'unauthorized', 'no session')
  isError(t, await h.platform('GET', exportPath(projectId, fullWindow), undefined, { jwt: 'not-a-jwt' }), 401, 'unauthorized', 'a malformed session')
  isError(
    t,
    await h.platform('GET', exportPath(projectId, fullWindow), undefined, { jwt: owner.apiKey }),
    401,
    'unauthorized',
    'the API key is not a session',
  )
})

t.test("another project's id, or one that does not exist: 404", async (t) => {
  isError(
    t,
    await h.platform('GET', exportPath(outsider.projectId, fullWindow), undefined, asUser(owner)),
    404,
    'project_not_found',
    "another user's project",
  )
  isError(t, await h.platform('GET', exportPath(projectId, fullWindow), undefined, asUser(outsider)), 404, 'project_not_found', 'a non-member')
  isError(
    t,
    await h.platform('GET', exportPath(`prj_${'0'.repeat(26)}`, fullWindow), undefined, asUser(owner)),
    404,
    'project_not_found',
    'an unknown id',
  )
})

t.test('member and viewer: 403 forbidden, before the window is looked at', async (t) => {
  for (const [role, user] of [
    ['member', member],
    ['viewer', viewer],
  ] as const) {
    isError(t, await h.platform('GET', exportPath(projectId, fullWindow), undefined, asUser(user)), 403, 'forbidden', role)
    isError(t, await h.platform('GET', exportPath(projectId, 'format=xml'), undefined, asUser(user)), 403, 'forbidden', `${role} with a bad window`)
  }
})

t.test('every window code, in the spec order, without spending the cooldown', async (t) => {
  const cases: Array<[string, string]> = [
    [`until=${until}`, 'invalid_from'],
    [`from=yesterday&until=${until}`, 'invalid_from'],
    ['from=nope&until=nope&format=xml', 'invalid_from'],
    [`from=${from}`, 'invalid_until'],
    [`from=${from}&until=nope&format=xml`, 'invalid_until'],
    [`from=${until}&until=${from}`, 'invalid_range'],
    [`from=${from}&until=${from}`, 'invalid_range'],
    [`from=${until}&until=${from}&format=xml`, 'invalid_range'],
    ['from=2026-01-01T00:00:00Z&until=2026-04-02T00:00:00Z', 'range_too_large'],
    ['from=2026-01-01T00:00:00Z&until=2026-04-02T00:00:00Z&format=xml', 'range_too_large'],
    [`${fullWindow}&format=xml`, 'invalid_format'],
    [`${fullWindow}&format=JSONL`, 'invalid_format'],
  ]
  for (const [query, code] of cases) isError(t, await h.platform('GET', exportPath(projectId, query), undefined, asUser(owner)), 400, code, query)
  const ninetyDays = `from=2026-01-01T00:00:00Z&until=2026-04-01T00:00:00Z`
  t.equal(
    (await h.platform('GET', exportPath(projectId, ninetyDays), undefined, asUser(admin))).status,
    200,
    'exactly 90 days is allowed, and no code above took the cooldown',
  )
})

t.test('JSONL: headers, fields, order, metadata as raw JSON, its own row left out; the cooldown', async (t) => {
  nextMinute()
  const jobsExport = await httpRequest(h.url, owner.apiKey, 'GET', `/jobsvc/v1/jobs/export?${fullWindow}`)
  t.equal(jobsExport.status, 200, "the jobs export's cooldown is its own")
  const res: HttpResponse<string> = await h.platform('GET', exportPath(projectId, fullWindow), undefined, asUser(owner))
  t.equal(res.status, 200, String(res.body).slice(0, 300))
  t.match(res.headers.get('content-type'), /^application\/x-ndjson/)
  t.equal(res.headers.get('content-length'), null, 'chunked')
  t.match(res.headers.get('content-disposition'), new RegExp(`^attachment; filename="svc-audit-log-${projectId}-\\d{4}-\\d{2}-\\d{2}\\.jsonl"$`))
  // Under /jobsvc/v1, so it counts against the project's hourly limit like every route there.
  t.match(res.headers.get('x-ratelimit-limit'), /^\d+$/, 'X-RateLimit-Limit')
  t.equal(
    Number(res.headers.get('x-ratelimit-remaining')),
    Number(jobsExport.headers.get('x-ratelimit-remaining')) - 1,
    'counted with the API-key calls',
  )
  const lines = ndjson(res)
  for (const line of lines) t.same(Object.keys(line), jsonlFields, `fields of ${String(line.kind)}`)

  const recorded = (await exportRows(projectId, 2)).at(-1)!
  const expected = (await activityOf(projectId)).filter((r) => Number(r.seq) < Number(recorded.seq))
  t.same(
    lines.map((l) => l.id),
    expected.map((r) => r.id),
    'every row logged before the export, by created_at then id, and not its own',
  )
  t.notOk(
    lines.some((l) => l.id === recorded.id),
    "the export's own row is not in it",
  )
  const sorted = [...lines].sort((a, b) => String(a.created_at).localeCompare(String(b.created_at)) || String(a.id).localeCompare(String(b.id)))
  t.same(lines, sorted, 'created_at ascending, then id ascending')
  t.ok(
    lines.some((l, i) => i > 0 && l.created_at === lines[i - 1]!.created_at),
    'a tie on created_at was broken by id (invite accepted and member joined)',
  )
  const kinds = lines.map((l) => l.kind)
  for (const kind of [
    'member_invited',
    'team_invite_accepted',
    'member_joined',
    'project_renamed',
    'job_created',
    'jobs_exported',
    'audit_log_exported',
  ])
    t.ok(kinds.includes(kind), `holds ${kind}`)
  t.equal(kinds.filter((k) => k === 'audit_log_exported').length, 1, "the 90-day test export's row is in; this one's is not")

  const rename = lines.find((l) => l.kind === 'project_renamed')!
  t.match(rename.metadata, { name: 'audited, "quoted"\r\nname', previous_name: String }, 'metadata is raw JSON')
  t.same(rename.metadata, JSON.parse(expected.find((r) => r.kind === 'project_renamed')!.metadata!))
  t.equal(rename.target_type, 'project')
  t.equal(rename.target_id, projectId)
  const earlier = lines.find((l) => l.kind === 'audit_log_exported')!
  t.equal(earlier.actor_user_id, admin.userId, 'the exporter is the actor')
  t.same(earlier.metadata, { from: '2026-01-01T00:00:00.000Z', until: '2026-04-01T00:00:00.000Z', format: 'jsonl', exported_by: admin.userId })
  t.equal(lines.find((l) => l.kind === 'job_created')!.actor_user_id, null, 'no actor where the log names none')
  for (const line of lines) t.equal(new Date(String(line.created_at)).toISOString(), line.created_at, 'ISO 8601 UTC')

  const again = await h.platform('GET', exportPath(projectId, fullWindow), undefined, asUser(admin))
  isError(t, again, 429, 'rate_limit_exceeded', 'a second export of the project inside 60 s, by another admin')
  const retryAfter = Number(again.headers.get('retry-after'))
  t.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After in seconds (${retryAfter})`)
  t.equal(
    (await h.platform('GET', exportPath(outsider.projectId, fullWindow), undefined, asUser(outsider))).status,
    200,
    'another project has its own cooldown',
  )
  isError(
    t,
    await httpRequest(h.url, owner.apiKey, 'GET', `/jobsvc/v1/jobs/export?${fullWindow}`),
    429,
    'rate_limit_exceeded',
    'the jobs export keeps its own cooldown',
  )
})

t.test('CSV: RFC 4180 rows equal to the JSONL ones, by cookie session', async (t) => {
  nextMinute()
  const res: HttpResponse<string> = await h.platform('GET', exportPath(projectId, `${fullWindow}&format=csv`), undefined, {
    cookie: `sv_jwt=${admin.jwt}`,
  })
  t.equal(res.status, 200, String(res.body).slice(0, 300))
  t.match(res.headers.get('content-type'), /^text\/csv/)
  t.equal(res.headers.get('content-length'), null, 'chunked')
  t.match(res.headers.get('content-disposition'), new RegExp(`^attachment; filename="svc-audit-log-${projectId}-\\d{4}-\\d{2}-\\d{2}\\.csv"$`))
  const table = parseCsv(String(res.body))
  t.same(table[0], csvHeader)
  const recorded = (await exportRows(projectId, 3)).at(-1)!
  const expected = (await activityOf(projectId)).filter((r) => Number(r.seq) < Number(recorded.seq))
  t.equal(table.length, expected.length + 1)
  t.same(
    table.slice(1).map((r) => r[0]),
    expected.map((r) => r.id),
    'same rows and order as the database',
  )
  for (const [i, row] of table.slice(1).entries()) {
    const db = expected[i]!
    t.same(
      row,
      [db.id, db.created_at.toISOString(), db.kind, db.target_type, db.target_id ?? '', db.summary, db.user_id ?? '', db.metadata ?? ''],
      `row ${db.kind}`,
    )
  }
  const rename = table.find((r) => r[2] === 'project_renamed')!
  t.match(JSON.parse(rename[7]!), { name: 'audited, "quoted"\r\nname' }, 'metadata as JSON text survives RFC 4180 quoting')
  t.match(rename[5], /audited, "quoted"\r\nname/, 'the summary too')
  const previous = table.filter((r) => r[2] === 'audit_log_exported')
  t.same(
    previous.map((r) => r[6]),
    [admin.userId, owner.userId],
    'both earlier exports, with their actors',
  )
})

t.test('the window bounds are inclusive', async (t) => {
  const all = await activityOf(projectId)
  const first = all.find((r) => r.kind === 'project_renamed')!
  const last = all.filter((r) => r.kind === 'job_created').at(-1)!
  const exact = `from=${first.created_at.toISOString()}&until=${last.created_at.toISOString()}`
  nextMinute()
  const res = await h.platform('GET', exportPath(projectId, exact), undefined, asUser(owner))
  t.equal(res.status, 200)
  const ids = ndjson(res).map((l) => l.id)
  const inside = all.filter((r) => r.created_at.getTime() >= first.created_at.getTime() && r.created_at.getTime() <= last.created_at.getTime())
  t.same(
    ids,
    inside.map((r) => r.id),
    'rows at exactly from and exactly until are in',
  )
  t.ok(ids.includes(first.id) && ids.includes(last.id))

  const narrower = `from=${new Date(first.created_at.getTime() + 1).toISOString()}&until=${new Date(last.created_at.getTime() - 1).toISOString()}&format=csv`
  nextMinute()
  const csv = await h.platform('GET', exportPath(projectId, narrower), undefined, asUser(owner))
  t.equal(csv.status, 200)
  const csvIds = parseCsv(String(csv.body))
    .slice(1)
    .map((r) => r[0])
  t.notOk(csvIds.includes(first.id), 'a millisecond after a row leaves it out')
  t.notOk(csvIds.includes(last.id), 'a millisecond before a row leaves it out')
  const strictlyInside = all.filter((r) => r.created_at.getTime() > first.created_at.getTime() && r.created_at.getTime() < last.created_at.getTime())
  t.same(
    csvIds,
    strictlyInside.map((r) => r.id),
  )

  nextMinute()
  const empty = await h.platform(
    'GET',
    exportPath(projectId, 'from=2020-01-01T00:00:00Z&until=2020-01-02T00:00:00Z&format=csv'),
    undefined,
    asUser(owner),
  )
  t.equal(empty.status, 200)
  t.same(parseCsv(String(empty.body)), [csvHeader], 'an empty window is the header alone')
})

t.test('each export writes audit_log_exported activity naming its exporter', async (t) => {
  const rows = await exportRows(projectId, 6)
  t.same(
    rows.map((r) => r.user_id),
    [admin.userId, owner.userId, admin.userId, owner.userId, owner.userId, owner.userId],
  )
  t.same(
    rows.map((r) => JSON.parse(r.metadata!).format),
    ['jsonl', 'jsonl', 'csv', 'jsonl', 'csv', 'csv'],
  )
  t.same(
    rows.map((r) => [r.target_type, r.target_id]),
    rows.map(() => ['project', projectId]),
  )
  t.match(rows[1]!.summary, /^Audit log exported \(jsonl, .+ to .+\)$/)
  const listed = await httpRequest(h.url, owner.apiKey, 'GET', '/jobsvc/v1/activity?limit=100')
  t.ok(
    listed.body.data.some((a: { kind: string }) => a.kind === 'audit_log_exported'),
    'the activity feed lists it too',
  )
})

t.test('a client that hangs up mid-export closes the cursor and frees its connection', async (t) => {
  // Straight into the read model: enough rows that the export is still streaming when the client
  // goes, which creating them through the service would take minutes to reach.
  await h.runtime.sql`
    INSERT INTO activity (id, project_id, user_id, kind, target_type, target_id, summary, metadata, created_at, seq)
    SELECT 'seeded' || lpad(i::text, 6, '0'), ${outsider.projectId}, NULL, 'job_created', 'job', 'job_' || i, 'Job seeded created in queue q',
      '{"job_type":"seeded","queue":"q"}', now() - interval '10 minutes' + i * interval '1 ms', 0
    FROM generate_series(1, 40000) AS i`
  const exportQueries = () =>
    h.runtime
      .sql`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle' AND query LIKE '%FROM activity%'`
  for (const format of ['jsonl', 'csv']) {
    nextMinute()
    const received = await new Promise<number>((resolve, reject) => {
      const req = http.get(
        new URL(exportPath(outsider.projectId, `${fullWindow}&format=${format}`), h.url),
        { headers: { authorization: `Bearer ${outsider.jwt}` } },
        (res) => {
          res.once('data', (chunk: Buffer) => {
            req.destroy()
            resolve(chunk.length)
          })
        },
      )
      req.on('error', reject)
    })
    t.ok(received > 0, `${format}: the export had begun`)
    await eventually(async () => (await exportQueries()).length === 0, 10_000, `${format}: the export query to end`)
    t.pass(`${format}: no export query left running`)
  }
})
