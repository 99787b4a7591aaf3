import {
  JobsvcClient,
  JobsvcError,
  toLeafObject,
  verifyCheckpoint,
  verifyConsistency,
  verifyExport,
  verifyInclusion,
  type AuditCheckpoint,
  type FeedEvent,
} from '@jobsvc/sdk'
import t from 'tap'
import { eventually, startHarness } from '../support/harness.ts'
import { flipBit } from './audit-support.ts'

// client.audit against a real service (docs/audit.md): checkpoints issued and listed, proofs
// fetched and checked with the SDK's own verifiers, feed events proven end to end by verifyEvent
// and an altered one refused, and an attested jobs export read through jobs.export.
const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
const client = new JobsvcClient({ baseUrl: h.url, apiKey: h.apiKey })

const from = new Date(Date.now() - 3_600_000).toISOString()
const until = new Date(Date.now() + 3_600_000).toISOString()

/** Every event of the project's feed, once each carries its leaf index (the projector has taken it in). */
function leavesOfFeed(): Promise<FeedEvent[]> {
  return eventually(
    async () => {
      const events: FeedEvent[] = []
      let after: string | undefined
      for (;;) {
        const page = await client.eventsPage({ after, limit: 1000 })
        events.push(...page.data)
        if (!page.hasMore) break
        after = page.nextCursor
      }
      return events.every((e) => e.leaf_index !== null) ? events : null
    },
    15_000,
    'every feed event to carry its leaf_index',
  )
}

const created = await Promise.all(
  [1, 2, 3].map((n) => client.jobs.create({ job_type: 'audit.sdk', queue: 'audit-sdk', payload: { n, ratio: n / 4 } })),
)
const first = await client.audit.issueCheckpoint()
await client.jobs.create({ job_type: 'audit.sdk', queue: 'audit-sdk', payload: { n: 4 } })
const second = await client.audit.issueCheckpoint()
const keys = await client.audit.keys()

t.test('checkpoints are issued, signed by a published key and listed page by page', async (t) => {
  t.equal(verifyCheckpoint(first, keys).checkpoint.project_id, h.projectId, 'the first checkpoint verifies with the keys')
  t.ok(second.tree_size > first.tree_size, 'work after a checkpoint makes the next one a larger tree')

  const page = await client.audit.checkpoints({ from, until, limit: 1 })
  t.same(page.data, [first], 'the smallest tree first')
  t.ok(page.has_more)
  t.same((await client.audit.checkpoints({ after: page.next_cursor!, limit: 10 })).data, [second], 'after its next_cursor, the next')
  const all: AuditCheckpoint[] = []
  for await (const c of client.audit.allCheckpoints({ limit: 1 })) all.push(c)
  t.same(all, [first, second], 'allCheckpoints follows every page')
  t.same((await client.audit.checkpoints({ from: new Date(Date.now() + 60_000) })).data, [], 'from takes a Date')
})

t.test('proofs from the service verify with the SDK against the signed checkpoints', async (t) => {
  const events = await leavesOfFeed()
  const job = events.find((e) => e.type === 'job_created' && e.aggregate_id === created[1]!.id)!
  const proof = await client.audit.inclusionProof(job.leaf_index!, first.tree_size)
  t.same([proof.leaf_index, proof.tree_size], [job.leaf_index, first.tree_size])
  t.doesNotThrow(() => verifyInclusion(toLeafObject(job), proof, first), 'the job_created event is in the first tree')
  const consistency = await client.audit.consistencyProof(first.tree_size, second.tree_size)
  t.doesNotThrow(() => verifyConsistency(first, second, consistency), 'the second tree extends the first')
  const refused = await client.audit.consistencyProof(0, second.tree_size).catch((e: unknown) => e)
  t.type(refused, JobsvcError)
  t.match(refused, { status: 400, code: 'invalid_request' }, 'first = 0: nothing to prove')
})

t.test('verifyEvent proves a feed event end to end; an altered one is refused', async (t) => {
  const events = await leavesOfFeed()
  const job = events.find((e) => e.type === 'job_created' && e.aggregate_id === created[0]!.id)!
  const verdict = await client.audit.verifyEvent(job)
  t.match(
    verdict,
    { verified: true, leafIndex: job.leaf_index, checkpoint: first, key: { key_id: first.key_id } },
    'proven by the oldest checkpoint that holds it',
  )

  const altered = structuredClone(job)
  ;(altered.data as { payload: { n: number } }).payload.n = 99
  t.match(
    await client.audit.verifyEvent(altered),
    { verified: false, leafIndex: job.leaf_index, code: 'inclusion_failed', reason: /is not at index/ },
    'data changed: the leaf no longer leads to the signed root',
  )
  const moved = { ...job, leaf_index: job.leaf_index! + 1 }
  t.match(await client.audit.verifyEvent(moved), { verified: false, code: 'inclusion_failed' }, 'another leaf index: refused')

  const withOwn = await client.audit.verifyEvent(job, { keys, checkpoint: second })
  t.match(withOwn, { verified: true, checkpoint: second }, 'against a checkpoint and keys the caller kept')
  const forged = { ...second, root_hash: flipBit(second.root_hash, 3) }
  t.match(
    await client.audit.verifyEvent(job, { keys, checkpoint: forged }),
    { verified: false, code: 'invalid_signature' },
    'a checkpoint not as signed',
  )
  const other = { data: [] }
  t.match(await client.audit.verifyEvent(job, { keys: other }), { verified: false, code: 'unknown_key' }, 'keys that did not sign it')

  const newest = events.find((e) => e.type === 'job_created' && e.leaf_index! >= first.tree_size)!
  t.match(
    await client.audit.verifyEvent(newest, { checkpoint: first }),
    { verified: false, code: 'leaf_out_of_range' },
    'an event newer than the checkpoint given is not proven by it',
  )
  await t.rejects(client.audit.verifyEvent({ ...job, leaf_index: null }), TypeError, 'an event the log has not taken in yet is no verdict')
})

/** A client whose answers from `path` pass through `change` first: a service that lies about the log. */
function lyingClient(path: string, change: (body: any) => void): JobsvcClient {
  return new JobsvcClient({
    baseUrl: h.url,
    apiKey: h.apiKey,
    fetch: async (input, init) => {
      const res = await fetch(input, init)
      if (new URL(String(input)).pathname !== path) return res
      const body = await res.json()
      change(body)
      return new Response(JSON.stringify(body), { status: res.status, headers: res.headers })
    },
  })
}

t.test('verifyEvent trusts the service for nothing but the keys', async (t) => {
  const events = await leavesOfFeed()
  const job = events.find((e) => e.type === 'job_created' && e.aggregate_id === created[2]!.id)!
  const badPath = lyingClient('/jobsvc/v1/audit/proofs/inclusion', (proof) => (proof.inclusion_path[0] = flipBit(proof.inclusion_path[0], 0)))
  t.match(await badPath.audit.verifyEvent(job), { verified: false, code: 'inclusion_failed' }, 'an inclusion path altered in transit')
  const otherLeaf = lyingClient('/jobsvc/v1/audit/proofs/inclusion', (proof) => (proof.leaf_index += 1))
  t.match(
    await otherLeaf.audit.verifyEvent(job),
    { verified: false, code: 'inclusion_failed', reason: /a proof for leaf/ },
    'a proof for another leaf',
  )
  const badRoot = lyingClient('/jobsvc/v1/audit/checkpoints', (page) => (page.data[0].root_hash = flipBit(page.data[0].root_hash, 255)))
  t.match(await badRoot.audit.verifyEvent(job), { verified: false, code: 'invalid_signature' }, 'a checkpoint whose root is not the signed one')
})

t.test('verifyEvent issues a checkpoint when none holds the event yet', async (t) => {
  const job = await client.jobs.create({ job_type: 'audit.sdk', queue: 'audit-sdk', payload: { n: 5 } })
  const events = await leavesOfFeed()
  const event = events.find((e) => e.type === 'job_created' && e.aggregate_id === job.id)!
  t.ok(event.leaf_index! >= second.tree_size, 'no checkpoint holds it')
  const verdict = await client.audit.verifyEvent(event)
  t.equal(verdict.verified, true, verdict.verified ? 'verified' : verdict.reason)
  if (!verdict.verified) return
  t.ok(verdict.checkpoint.tree_size > event.leaf_index!, 'a new checkpoint holds it')
  t.same((await client.audit.checkpoints({ after: second.tree_size })).data, [verdict.checkpoint], 'and is listed')
})

t.test('jobs.export with attest: true ends with a manifest verifyExport accepts', async (t) => {
  const download = await client.jobs.export({ from, until, attest: true })
  const text = await download.text()
  const lines = text.split('\n').filter((l) => l !== '')
  t.ok('manifest' in JSON.parse(lines.at(-1)!), 'the last line is the manifest')
  const result = await verifyExport(text, keys)
  t.match(result, { projectId: h.projectId, kind: 'jobs', lines: lines.length - 1 })
  t.equal(result.lines, created.length + 2, 'every job of the window')
})
