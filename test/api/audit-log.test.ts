import { verify as verifySignature, createPublicKey } from 'node:crypto'
import t from 'tap'
import type { Checkpoint } from '../../domain/audit-checkpoint.ts'
import { eventually, httpRequest, startHarness } from '../support/harness.ts'
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

const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })

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
    await h.request('POST', `/jobsvc/v1/workers/jobs/${job.id}/ack`, {
      worker_id: 'w1',
      status: i % 3 === 0 ? 'failed' : 'succeeded',
      error: i % 3 === 0 ? { type: 'E', message: 'no' } : undefined,
    })
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
