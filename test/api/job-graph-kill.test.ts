import t from 'tap'
import { eventually, httpRequest, type SpawnedService } from '../support/harness.ts'
import { createProjectWithCli, spawnedInstall } from '../support/spawned-install.ts'
import { connectNats } from '../../streams/connection.ts'
import { parseEventSubject, projectKindFilter } from '../../streams/names.ts'

// Issue 30's Done-when, as a deployment meets it: a parent with 1,500 children succeeds, and the
// whole service (`npm start`, every role in one process) is killed with SIGKILL while the ack's
// cascade is moving the children. Started again, the scheduler's sweep finishes the cascade: every
// child activated exactly once, none cancelled, and the 200 children that also wait for a second
// parent Q stay waiting until Q succeeds.

const onlyP = 1_300
const withQ = 200

t.test("a kill between a parent's append and its children's moves is healed: each child activated exactly once", async (t) => {
  const install = await spawnedInstall(t, import.meta.filename, { config: { tunables: { cascade_sweep_interval_ms: 200 } } })
  let svc: SpawnedService = await install.start()
  const { projectId, apiKey } = await createProjectWithCli(install.env, 'graph-kill')
  const call = (method: string, path: string, body?: unknown) => httpRequest(svc.url, apiKey, method, path, body)
  const create = async (body: Record<string, unknown>) => {
    const res = await call('POST', '/jobsvc/v1/jobs', { job_type: 'drill', payload: {}, ...body })
    if (res.status !== 201) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`)
    return res.body as { id: string }
  }
  const createBatch = async (queue: string, dependsOn: string[], count: number) => {
    const res = await call('POST', '/jobsvc/v1/jobs/batch', {
      jobs: Array.from({ length: count }, () => ({ job_type: 'drill', payload: {}, queue, depends_on: dependsOn })),
    })
    if (res.body.created !== count) throw new Error(`batch answered ${res.status}: ${JSON.stringify(res.body).slice(0, 500)}`)
    return res.body.results.map((r: { body: { id: string } }) => r.body.id) as string[]
  }
  const claim = async (queue: string) => {
    const polled = await call('POST', '/jobsvc/v1/workers/poll', { worker_id: 'w-drill', queues: [queue], wait_seconds: 5 })
    if (polled.body?.jobs?.length !== 1) throw new Error(`poll on ${queue} answered ${JSON.stringify(polled.body)}`)
    return polled.body.jobs[0] as { id: string }
  }
  /** Every event of `types` on the jobs of `queue`, read from the log through the event feed. */
  const feed = async (queue: string, types: string) => {
    const events: Array<{ type: string; aggregate_id: string }> = []
    for (let after = ''; ;) {
      const page = (await call('GET', `/jobsvc/v1/events?types=${types}&queue=${queue}&limit=1000${after}`)).body
      events.push(...page.data)
      if (!page.has_more || page.data.length === 0) return events
      after = `&after=${encodeURIComponent(page.next_cursor)}`
    }
  }
  /** How many times each job of `ids` appears among `events`. */
  const timesEach = (ids: readonly string[], events: ReadonlyArray<{ aggregate_id: string }>) => {
    const times = new Map(ids.map((id) => [id, 0]))
    for (const e of events) times.set(e.aggregate_id, (times.get(e.aggregate_id) ?? 0) + 1)
    return [...times.values()]
  }
  /** Waits until the feed holds a `type` event for as many jobs of `queue` as `ids`, then asserts each of `ids` has exactly one. */
  const onceEach = async (queue: string, type: string, ids: readonly string[], what: string, timeoutMs = 30_000) => {
    const events = await eventually(
      async () => {
        const found = await feed(queue, type)
        return found.length >= ids.length ? found : null
      },
      timeoutMs,
      what,
    )
    t.same(
      timesEach(ids, events).filter((n) => n !== 1),
      [],
      what,
    )
  }

  const p = await create({ queue: 'drill-p' })
  const q = await create({ queue: 'drill-q' })
  // Batches of at most 1,000 items; the two-parent children on a queue of their own.
  const children = [...(await createBatch('drill-kids', [p.id], 1_000)), ...(await createBatch('drill-kids', [p.id], onlyP - 1_000))]
  const fanIns = await createBatch('drill-fan', [p.id, q.id], withQ)
  const childIds = new Set([...children, ...fanIns])
  t.equal(childIds.size, onlyP + withQ)
  await claim('drill-p')

  // The ack answers only once its cascade has moved every child, so an answer cannot tell the
  // test when to kill, and neither can the read model (the projector lags the log by an unknown
  // amount). The log itself can: the test subscribes to the project's job subjects, and the
  // message that records a child's move reaches it as NATS stores it. On the 50th child moved
  // the process is killed from the message callback itself, with about 1,450 moves (some 20
  // rounds of a load and an append on each of the cascade's 64 lanes) still to go: the kill
  // lands mid-cascade however loaded the machine, and the test checks afterwards that it did.
  const nats = await connectNats(process.env.NATS_URL ?? 'nats://127.0.0.1:4222', 'jobsvc-test-graph-kill')
  t.teardown(() => nats.nc.close())
  const movedBeforeKill = new Set<string>()
  const killAt = 50
  const ns = install.env.JOBSVC_NAMESPACE!
  nats.nc.subscribe(projectKindFilter(ns, projectId, 'job'), {
    callback: (err, msg) => {
      const id = err === null ? parseEventSubject(ns, msg.subject)?.aggregateId : undefined
      if (id === undefined || !childIds.has(id)) return
      movedBeforeKill.add(id)
      if (movedBeforeKill.size === killAt) svc.process.kill('SIGKILL')
    },
  })
  await nats.nc.flush()

  const answer = await call('POST', '/jobsvc/v1/workers/ack', { job_id: p.id, worker_id: 'w-drill', status: 'succeeded' }).then(
    (res) => res.status,
    () => 'no answer' as const,
  )
  await svc.stop('SIGKILL')
  // The count may still miss the last messages the dead process sent; the missing answer is the
  // proof that the cascade was cut short (the ack answers only after its last child's move).
  await nats.nc.flush()
  t.equal(answer, 'no answer', 'the process died before its ack could answer: the cascade was cut short')
  t.ok(
    movedBeforeKill.size >= killAt && movedBeforeKill.size < onlyP + withQ,
    `some children moved before the kill (${movedBeforeKill.size}), not all`,
  )

  svc = await install.start()
  t.equal((await call('GET', `/jobsvc/v1/jobs/${p.id}`)).body.state, 'succeeded', "P's success stands")
  await onceEach('drill-kids', 'job_activated', children, 'each child of P alone activated exactly once', 45_000)
  await eventually(
    async () => (await call('GET', '/jobsvc/v1/jobs?queue=drill-kids&state=scheduled&limit=1')).body.data.length === 0,
    30_000,
    'the read model to show none still waiting',
  )
  const cancelled = async () => [...(await feed('drill-kids', 'job_cancelled')), ...(await feed('drill-fan', 'job_cancelled'))]
  t.same(await cancelled(), [], 'no child cancelled')

  await onceEach('drill-fan', 'job_parent_settled', fanIns, 'each two-parent child settled P once')
  t.same(await feed('drill-fan', 'job_activated'), [], 'and none activated while Q runs')
  const fanIn = (await call('GET', `/jobsvc/v1/jobs/${fanIns[0]}`)).body
  t.same([fanIn.state, fanIn.waiting_for], ['scheduled', [q.id]], 'a two-parent child waits for Q only')

  await claim('drill-q')
  const ackQ = await call('POST', '/jobsvc/v1/workers/ack', { job_id: q.id, worker_id: 'w-drill', status: 'succeeded' })
  t.equal(ackQ.status, 200)
  await onceEach('drill-fan', 'job_activated', fanIns, 'each two-parent child activated exactly once, after Q')
  t.same(await cancelled(), [], 'still none cancelled')
  t.equal(await install.stop(svc), 0, 'the restarted process shuts down cleanly')
})
