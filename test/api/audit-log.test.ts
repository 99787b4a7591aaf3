import { verify as verifySignature, createPublicKey, randomBytes } from 'node:crypto'
import http from 'node:http'
import t from 'tap'
import type { Checkpoint } from '../../domain/audit-checkpoint.ts'
import { auditLog } from '../../projections/audit-log.ts'
import { projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import { rebuildReadModels } from '../../services/roles/projector/rebuild.ts'
import { AuditCheckpoints } from '../../services/use-cases/audit/checkpoints.ts'
import { purgeExpiredJobs } from '../../services/roles/scheduler/retention.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'
import { readModels } from '../support/read-models.ts'
import { hex, jcs, leafHash, mth, unhex, verifyConsistency, verifyInclusion } from '../support/rfc9162.ts'

/**
 * The project's Merkle log over HTTP (issue 27, docs/audit.md): leaves recomputed here from the
 * event feed with an independent RFC 6962 / 8785 implementation (test/support/rfc9162.ts), signed
 * checkpoints checked with the published keys, inclusion and consistency proofs by RFC 9162.
 */

interface FeedEvent {
  id: string
  type: string
  occurred_at: string
  project_id: string
  aggregate: string
  aggregate_id: string
  data: unknown
  leaf_index: number | null
}

const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'], config: { webhookAllowLoopback: true } })

async function feed(apiKey = h.apiKey): Promise<FeedEvent[]> {
  const events: FeedEvent[] = []
  let after = ''
  for (;;) {
    const res = await httpRequest(h.url, apiKey, 'GET', `/jobsvc/v1/events?limit=1000${after === '' ? '' : `&after=${after}`}`)
    if (res.status !== 200) throw new Error(`feed: ${res.status} ${JSON.stringify(res.body)}`)
    events.push(...res.body.data)
    after = res.body.next_cursor
    if (!res.body.has_more) return events
  }
}

const leafOf = (e: FeedEvent) =>
  leafHash(
    Buffer.from(
      jcs({
        aggregate: e.aggregate,
        aggregate_id: e.aggregate_id,
        data: e.data,
        id: e.id,
        occurred_at: e.occurred_at,
        project_id: e.project_id,
        type: e.type,
      }),
    ),
  )

function signedText(c: Checkpoint): string {
  const { issued_at, key_id, project_id, root_hash, tree_size } = c
  return 'jobsvc-audit-checkpoint-v1\n' + jcs({ issued_at, key_id, project_id, root_hash, tree_size })
}

async function checkSignature(c: Checkpoint): Promise<boolean> {
  const keys = await httpRequest(h.url, null, 'GET', '/jobsvc/v1/audit/keys')
  const key = keys.body.data.find((k: { key_id: string }) => k.key_id === c.key_id)
  if (key === undefined) return false
  const spki = Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), Buffer.from(key.public_key, 'base64')])
  return verifySignature(
    null,
    Buffer.from(signedText(c)),
    createPublicKey({ key: spki, format: 'der', type: 'spki' }),
    Buffer.from(c.signature, 'base64'),
  )
}

async function workSomeJobs(n: number): Promise<void> {
  for (let i = 0; i < n; i++)
    await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'audit.job', queue: 'audit', payload: { i, pi: 3.25, nested: { z: 1, a: [true, null] } } })
  const poll = await h.request('POST', '/jobsvc/v1/workers/poll', {
    worker_id: 'w1',
    queues: ['audit'],
    job_types: ['audit.job'],
    capacity: n,
    wait_seconds: 0,
  })
  for (const [i, job] of (poll.body.jobs ?? []).entries()) {
    const ack = await h.request('POST', '/jobsvc/v1/workers/ack', {
      job_id: job.id,
      worker_id: 'w1',
      status: i % 3 === 0 ? 'failed' : 'succeeded',
      error: i % 3 === 0 ? { type: 'E', message: 'no', stack_trace: '' } : undefined,
    })
    if (ack.status !== 200) throw new Error(`ack: ${ack.status} ${JSON.stringify(ack.body)}`)
  }
}

t.test('every event of the feed is a leaf in log order; a checkpoint signs their root', async (t) => {
  await workSomeJobs(12)
  const first = await h.request<Checkpoint>('POST', '/jobsvc/v1/audit/checkpoints')
  t.equal(first.status, 201, JSON.stringify(first.body))
  const events = await eventually(async () => {
    const all = await feed()
    // The checkpoint's own event is the next leaf: wait until the feed holds it with its index.
    return all.some((e) => e.type === 'checkpoint_issued') && all.every((e) => e.leaf_index !== null) ? all : undefined
  })
  t.same(
    events.map((e) => e.leaf_index),
    events.map((_, i) => i),
    'the feed numbers its events 0, 1, 2, … in its order',
  )
  const cp = first.body
  t.equal(
    cp.tree_size,
    events.findIndex((e) => e.type === 'checkpoint_issued'),
    'the checkpoint covers every event before its own',
  )
  t.equal(cp.root_hash, hex(mth(events.slice(0, cp.tree_size).map(leafOf))), 'its root is RFC 6962 MTH of the leaves recomputed from the feed')
  t.ok(await checkSignature(cp), 'its signature verifies with the published key')
  t.same(events.find((e) => e.type === 'checkpoint_issued')!.data, cp, 'the checkpoint is an event of the log')

  const leaves = events.map(leafOf)
  for (const index of [0, 1, cp.tree_size >> 1, cp.tree_size - 1]) {
    const proof = await h.request('GET', `/jobsvc/v1/audit/proofs/inclusion?leaf_index=${index}&tree_size=${cp.tree_size}`)
    t.equal(proof.status, 200)
    t.ok(
      verifyInclusion(index, cp.tree_size, leaves[index]!, proof.body.inclusion_path.map(unhex), unhex(cp.root_hash)),
      `leaf ${index} is in the signed tree`,
    )
  }

  await workSomeJobs(5)
  const second = await eventually(async () => {
    const res = await h.request<Checkpoint>('POST', '/jobsvc/v1/audit/checkpoints')
    return res.status === 201 && res.body.tree_size > cp.tree_size + 1 ? res : undefined
  })
  t.ok(await checkSignature(second.body))
  const consistency = await h.request('GET', `/jobsvc/v1/audit/proofs/consistency?first=${cp.tree_size}&second=${second.body.tree_size}`)
  t.equal(consistency.status, 200)
  t.ok(
    verifyConsistency(
      cp.tree_size,
      second.body.tree_size,
      unhex(cp.root_hash),
      unhex(second.body.root_hash),
      consistency.body.consistency_path.map(unhex),
    ),
    'the second checkpoint extends the first',
  )
  const listed = await h.request('GET', '/jobsvc/v1/audit/checkpoints')
  t.same(
    listed.body.data.map((c: Checkpoint) => c.tree_size),
    [cp.tree_size, second.body.tree_size],
  )
})

t.test('proof requests outside the tree are 400s; keys need no credentials; another project has its own tree', async (t) => {
  for (const q of ['leaf_index=5&tree_size=5', 'leaf_index=x&tree_size=5', 'leaf_index=0&tree_size=99999999', 'tree_size=3']) {
    const res = await h.request('GET', `/jobsvc/v1/audit/proofs/inclusion?${q}`)
    t.equal(res.status, 400, q)
    t.equal(res.body.error.code, 'invalid_request')
  }
  for (const q of ['first=0&second=3', 'first=4&second=3', 'first=1&second=99999999']) {
    const res = await h.request('GET', `/jobsvc/v1/audit/proofs/consistency?${q}`)
    t.equal(res.status, 400, q)
  }
  const keys = await httpRequest(h.url, null, 'GET', '/jobsvc/v1/audit/keys')
  t.equal(keys.status, 200)
  t.equal(keys.body.data.length, 1)
  t.equal(keys.body.data[0].valid_until, null)
  t.equal((await httpRequest(h.url, null, 'GET', '/jobsvc/v1/audit/checkpoints')).status, 401)

  const other = await h.newProject()
  const cp = await httpRequest<Checkpoint>(h.url, other.apiKey, 'POST', '/jobsvc/v1/audit/checkpoints')
  t.equal(cp.status, 201)
  t.equal(cp.body.project_id, other.projectId)
  const events = await feed(other.apiKey)
  t.equal(cp.body.root_hash, hex(mth(events.slice(0, cp.body.tree_size).map(leafOf))))
})

t.test('retention removes jobs but not their leaves: old checkpoints and proofs hold, and a replay rebuilds the same tree', async (t) => {
  const p = await h.newProject()
  const as = (method: string, path: string, body?: unknown) => httpRequest(h.url, p.apiKey, method, path, body)
  for (let i = 0; i < 4; i++) await as('POST', '/jobsvc/v1/jobs', { job_type: 'old.job', queue: 'old', payload: { i } })
  for (let done = 0; done < 4;) {
    const polled = await as('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w', queues: ['old'], capacity: 4, wait_seconds: 1 })
    for (const job of polled.body.jobs as Array<{ id: string }>) {
      await as('POST', '/jobsvc/v1/workers/heartbeat', { job_id: job.id, worker_id: 'w', progress: 0.5 })
      await as('POST', '/jobsvc/v1/workers/ack', { job_id: job.id, worker_id: 'w', status: 'succeeded' })
      done++
    }
  }
  await as('POST', '/jobsvc/v1/jobs', { job_type: 'kept.job', queue: 'kept', payload: {} })
  await eventually(
    async () => (await h.runtime.sql`SELECT count(*)::int AS n FROM jobs WHERE project_id = ${p.projectId} AND state = 'succeeded'`)[0]!.n === 4,
  )
  const before = (await as('POST', '/jobsvc/v1/audit/checkpoints')).body as Checkpoint
  const kept = (await eventually(async () => {
    const all = await feed(p.apiKey)
    return all.every((e) => e.leaf_index !== null) && all.some((e) => e.type === 'checkpoint_issued') ? all : undefined
  })) as FeedEvent[]

  const realNow = h.runtime.now
  t.teardown(() => void (h.runtime.now = realNow))
  h.runtime.now = () => new Date(Date.now() + 31 * 24 * 3_600_000)
  t.equal(await purgeExpiredJobs(h.runtime), 4, 'the four finished jobs are past their retention')
  h.runtime.now = realNow
  const after = await eventually(async () => {
    const res = await as('POST', '/jobsvc/v1/audit/checkpoints')
    return res.status === 201 && res.body.tree_size > before.tree_size + 1 ? (res.body as Checkpoint) : undefined
  })

  const remaining = await feed(p.apiKey)
  t.ok(remaining.length < kept.length, `the feed lost the removed jobs' events (${kept.length} → ${remaining.length})`)
  t.ok(
    remaining.some((e) => e.type === 'history_expired'),
    'the removal itself is an event of the log',
  )
  const wasAt = new Map(kept.map((e) => [e.id, e.leaf_index]))
  t.ok(
    remaining.filter((e) => wasAt.has(e.id)).every((e) => e.leaf_index === wasAt.get(e.id)),
    'every remaining event keeps its leaf index',
  )
  t.equal(
    await auditLog.root(h.runtime.sql, p.projectId, before.tree_size),
    before.root_hash,
    'the tree still has the root signed before the removal',
  )
  const consistency = await as('GET', `/jobsvc/v1/audit/proofs/consistency?first=${before.tree_size}&second=${after.tree_size}`)
  t.ok(
    verifyConsistency(
      before.tree_size,
      after.tree_size,
      unhex(before.root_hash),
      unhex(after.root_hash),
      consistency.body.consistency_path.map(unhex),
    ),
    'the checkpoint after the removal extends the one before it',
  )
  const keptEvent = remaining.find((e) => e.type === 'job_created' && (e.data as { job_type: string }).job_type === 'kept.job')!
  const inclusion = await as('GET', `/jobsvc/v1/audit/proofs/inclusion?leaf_index=${keptEvent.leaf_index}&tree_size=${after.tree_size}`)
  t.ok(
    verifyInclusion(keptEvent.leaf_index!, after.tree_size, leafOf(keptEvent), inclusion.body.inclusion_path.map(unhex), unhex(after.root_hash)),
    'an event that remains is proven in the tree after the removal',
  )

  await eventually(async () => (await projectedThrough(h.runtime.sql, projections)) === (await h.runtime.store.lastSequence()))
  const live = await readModels(h.runtime.sql)
  await h.runtime.sql`DELETE FROM audit_tiles WHERE project_id = ${p.projectId}`
  await rebuildReadModels(h.runtime, () => undefined)
  const rebuilt = await readModels(h.runtime.sql)
  for (const table of ['audit_trees', 'audit_tiles', 'audit_positions', 'audit_checkpoints', 'audit_expired_leaves'] as const) {
    t.same(rebuilt[table], live[table], `${table}: the replay rebuilds it row by row`)
  }
  for (const c of [before, after])
    t.equal(await auditLog.root(h.runtime.sql, p.projectId, c.tree_size), c.root_hash, `the replayed tree has the root of ${c.tree_size} leaves`)
})

t.test('a checkpoint is delivered to the webhooks that name audit.checkpoint, and to no other', async (t) => {
  const bodies: Array<{ path: string; body: { event_type: string; data: Record<string, unknown> } }> = []
  const server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      bodies.push({ path: req.url ?? '', body: JSON.parse(body) })
      res.writeHead(200).end('ok')
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`
  const p = await h.newProject()
  const as = (method: string, path: string, body?: unknown) => httpRequest(h.url, p.apiKey, method, path, body)
  t.equal((await as('POST', '/jobsvc/v1/webhooks', { url: `${base}/audit`, events: ['audit.checkpoint'] })).status, 201)
  t.equal((await as('POST', '/jobsvc/v1/webhooks', { url: `${base}/all`, events: '*' })).status, 201)
  await h.startRole('dispatcher')
  t.teardown(() => h.stopRole('dispatcher'))
  await as('POST', '/jobsvc/v1/jobs', { job_type: 'hooked', payload: {} })
  const issued = (await as('POST', '/jobsvc/v1/audit/checkpoints')).body as Checkpoint
  const delivered = await eventually(async () => bodies.find((b) => b.path === '/audit'))
  t.equal(delivered.body.event_type, 'audit.checkpoint')
  t.same(delivered.body.data, { schema_version: 1, ...issued }, 'the signed checkpoint as it is, to keep elsewhere')
  t.ok(await checkSignature(delivered.body.data as unknown as Checkpoint), 'it verifies from the webhook alone and the published keys')
  await eventually(async () => bodies.some((b) => b.path === '/all' && b.body.event_type === 'job.created'))
  t.notOk(
    bodies.some((b) => b.path === '/all' && b.body.event_type === 'audit.checkpoint'),
    '`*` means the types it meant before: no checkpoint',
  )
})

t.test('a key rotation closes the old key’s window; what it signed stays verifiable, and a process left on it signs nothing more', async (t) => {
  const p = await h.newProject()
  const as = (method: string, path: string, body?: unknown) => httpRequest(h.url, p.apiKey, method, path, body)
  const old = await eventually(async () => {
    const res = await as('POST', '/jobsvc/v1/audit/checkpoints')
    return res.body.tree_size > 0 ? (res.body as Checkpoint) : undefined
  })
  // Another process of the install, started with a new key.
  const rotated = new AuditCheckpoints({ ...h.runtime, config: { ...h.config, auditSigningKey: randomBytes(32).toString('base64') } })
  await as('POST', '/jobsvc/v1/jobs', { job_type: 'after.rotation', payload: {} })
  const renewed = await eventually(async () => {
    const issued = await rotated.issue(p.projectId)
    return issued.issued ? issued.checkpoint : undefined
  })
  t.not(renewed.key_id, old.key_id)
  const keys = (await eventually(async () => {
    const res = await httpRequest(h.url, null, 'GET', '/jobsvc/v1/audit/keys')
    return res.body.data.length === 2 && res.body.data.every((k: { valid_until: string | null }, i: number) => (i === 0) === (k.valid_until !== null))
      ? res.body
      : undefined
  })) as { data: Array<{ key_id: string; valid_from: string; valid_until: string | null }> }
  t.equal(keys.data[0]!.key_id, old.key_id, 'the old key stays published')
  t.equal(keys.data[0]!.valid_until, keys.data[1]!.valid_from, 'its window closes where the new one opens')
  t.ok(await checkSignature(old), 'a checkpoint of the old key still verifies')
  t.ok(await checkSignature(renewed), 'one of the new key verifies')
  const consistency = await as('GET', `/jobsvc/v1/audit/proofs/consistency?first=${old.tree_size}&second=${renewed.tree_size}`)
  t.ok(
    verifyConsistency(old.tree_size, renewed.tree_size, unhex(old.root_hash), unhex(renewed.root_hash), consistency.body.consistency_path.map(unhex)),
    'the log signed by the new key extends the one signed by the old',
  )
  await as('POST', '/jobsvc/v1/jobs', { job_type: 'after.rotation', payload: {} })
  const refused = await eventually(async () => {
    const res = await as('POST', '/jobsvc/v1/audit/checkpoints')
    return res.status !== 200 ? res : undefined
  })
  t.equal(refused.status, 409, 'the process still on the retired key refuses to sign')
  t.equal(refused.body.error.code, 'invalid_state')
})
