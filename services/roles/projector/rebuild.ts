import { applyBatchIsolatingFailures, resetReadModels } from '../../../projections/checkpoints.ts'
import { auditLog } from '../../../projections/audit-log.ts'
import { keptProjections, replayLanes } from '../../../projections/index.ts'
import type { Projection } from '../../../projections/projection.ts'
import { decodeEventMessage, type EventRecord } from '../../../streams/event-store.ts'
import { aggregateKindFilter, eventsStreamName, eventsSubjectFilter, projectorConsumerName, projectorYieldSubject } from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { holdLeadership } from '../../infrastructure/leadership.ts'

const batchSize = 1000

/** What a rebuild did: the sequence it reached, the messages and events it projected, and how long it took once it held the lock. */
export interface Rebuilt {
  through: number
  messages: number
  events: number
  ms: number
}

/**
 * Rebuilds every read model from sequence 1 with the projector's own code (`applyBatch`). It
 * takes the projector's leadership lock first, so a running projector pauses (it stands by)
 * instead of racing the rebuild; its durable consumer is removed, so whichever projector leads
 * next resumes from the rebuilt checkpoint.
 */
export async function rebuildReadModels(deps: Deps, say: (message: string) => void): Promise<Rebuilt> {
  const ns = deps.config.namespace
  const controller = new AbortController()
  let result: Rebuilt | undefined
  let failure: unknown
  let waited = false
  const timer = setTimeout(() => {
    waited = true
    say('replay: waiting for the running projector to hand over its lock')
  }, 2000)
  // Queue for the lock first, then ask a leading projector to step down: Postgres grants a
  // released advisory lock to the waiting session, so the projector cannot take it back.
  const asking = setInterval(() => deps.nats.nc.publish(projectorYieldSubject(ns)), 250)
  await holdLeadership(
    deps.config.databaseUrl,
    'jobsvc.projector:' + ns,
    controller.signal,
    async (leadership) => {
      clearTimeout(timer)
      clearInterval(asking)
      const started = Date.now()
      try {
        await deps.nats.jsm.consumers.delete(eventsStreamName(ns), projectorConsumerName(ns)).catch(() => undefined)
        const kept = keptProjections({ auditLog: deps.config.tunables.audit_log_enabled })
        await resetReadModels(deps.sql, kept)
        if (kept.includes(auditLog)) await restoreExpiredLeaves(deps)
        const last = await deps.store.lastSequence()
        let messages = 0
        let events = 0
        const lanes = new ReplayLanes(replayLanes(kept), (projections, records) =>
          applyBatchIsolatingFailures(
            deps.sql,
            projections,
            records,
            ({ record, projection, projected }) =>
              say(`replay: ${projection} cannot hold message ${record.seq} (${record.subject}); ${projected}, recorded in projection_failures`),
            { assertLeader: leadership.assert },
          ),
        )
        await readStream(deps, last, async (records) => {
          messages += records.length
          for (const r of records) events += r.message.events.length
          await lanes.add(records)
        })
        const through = await lanes.finish()
        result = { through, messages, events, ms: Date.now() - started }
      } catch (err) {
        failure = err
      } finally {
        controller.abort()
      }
    },
    (err) => {
      failure = err
      controller.abort()
    },
    { blocking: true, applicationName: deps.name },
  )
  clearTimeout(timer)
  clearInterval(asking)
  if (failure !== undefined) throw failure
  if (waited) say('replay: lock acquired')
  return result!
}

/**
 * Before a Merkle log is built from sequence 1: retention's records of the leaves it removed
 * (`leaves_expired`, domain/audit-expiry.ts) come after those leaves' places in the log, so they
 * are read first, and the tree puts each back in its place as it is rebuilt. A few messages (one
 * per project and retention pass), read one direct get each.
 */
export async function restoreExpiredLeaves(deps: Deps): Promise<number> {
  const filter = aggregateKindFilter(deps.config.namespace, 'audit_expiry')
  let records = 0
  for (let r = await deps.store.nextOn(filter, 1); r !== null; r = await deps.store.nextOn(filter, r.seq + 1)) {
    await deps.sql.begin((tx) => auditLog.keepExpiredLeaves(tx, [r!]))
    records++
  }
  return records
}

/** Reads the log from sequence 1 to `last` with an ordered consumer, in batches. */
async function readStream(deps: Deps, last: number, handle: (records: EventRecord[]) => Promise<void>): Promise<void> {
  if (last === 0) return
  const consumer = await deps.nats.js.consumers.get(eventsStreamName(deps.config.namespace), {
    filter_subjects: eventsSubjectFilter(deps.config.namespace),
  })
  const messages = await consumer.consume({ max_messages: batchSize * 2 })
  let batch: EventRecord[] = []
  try {
    for await (const m of messages) {
      batch.push({ seq: m.seq, subject: m.subject, message: decodeEventMessage(m.data, m.seq) })
      const isLast = m.seq >= last
      if (isLast || batch.length >= batchSize || messages.getPending() === 0) {
        await handle(batch)
        batch = []
      }
      if (isLast) break
    }
  } finally {
    messages.stop()
  }
}

/** Batches a lane may run behind the reading before the reading waits for it (the memory a replay holds). */
const maxBatchesAhead = 4

/**
 * The read models rebuilt side by side in lanes (projections/index.ts, replayLanes), each on a
 * connection and in transactions of its own, each taking the batches in order: one lane's
 * statements run in Postgres while the other's rows are built here, and the reading decodes the
 * next batches meanwhile. A lane's checkpoints are its projections' own, so a replay stopped in
 * the middle resumes each where it stood.
 */
class ReplayLanes {
  readonly #tails: Promise<number>[]
  readonly #batches: Promise<unknown>[] = []

  constructor(
    readonly lanes: readonly (readonly Projection[])[],
    readonly apply: (projections: readonly Projection[], records: readonly EventRecord[]) => Promise<number>,
  ) {
    this.#tails = lanes.map(() => Promise.resolve(0))
  }

  /** Queues the batch on every lane; waits only when a lane is `maxBatchesAhead` behind. */
  async add(records: readonly EventRecord[]): Promise<void> {
    const done = this.lanes.map((lane, i) => (this.#tails[i] = this.#tails[i]!.then(() => this.apply(lane, records))))
    const batch = Promise.all(done)
    // A failure surfaces when its batch is awaited (here or in `finish`), not as an unhandled rejection.
    batch.catch(() => undefined)
    this.#batches.push(batch)
    if (this.#batches.length > maxBatchesAhead) await this.#batches.shift()
  }

  /** The sequence every lane reached once all are done. */
  async finish(): Promise<number> {
    return Math.min(...(await Promise.all(this.#tails)))
  }
}
