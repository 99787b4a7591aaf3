import t from 'tap'
import { projectedThrough } from '../../projections/checkpoints.ts'
import { projections } from '../../projections/index.ts'
import { eventsStreamName } from '../../streams/names.ts'
import { eventually, startHarness, type Harness } from '../support/harness.ts'
import { readModels } from '../support/read-models.ts'

// Issue 14, item 4 (docs/architecture.md, "Durability"): no Postgres commit waits for the WAL flush, because a
// lost tail of commits is projected again from the log. A crash before the flush leaves the
// database as it was at an earlier commit, checkpoints included: simulated here by saving every
// read-model table at one point, projecting more, and putting the saved tables back.
const tables = [
  'jobs',
  'projects',
  'api_keys',
  'recurring_jobs',
  'job_state_counts',
  'job_throughput',
  'job_type_stats',
  'activity',
  'alerts',
  'webhooks',
  'deliveries',
  'event_consumers',
  'flow_gates',
  'operations',
  'projection_checkpoints',
  'projection_failures',
]

async function projected(h: Harness, seq: number): Promise<void> {
  await eventually(async () => (await projectedThrough(h.runtime.sql, projections)) >= seq, 15_000, `projected through ${seq}`)
}

async function createJobs(h: Harness, n: number, tag: string): Promise<number> {
  let seq = 0
  for (let i = 0; i < n; i++) {
    const res = await h.request('POST', '/jobsvc/v1/jobs', { job_type: `durable-${tag}`, queue: tag, payload: { i } })
    t.equal(res.status, 201)
    seq = Number(res.headers.get('x-event-seq'))
  }
  return seq
}

t.test('read models commit asynchronously, and a lost tail of commits is projected again', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: ['api', 'projector'] })
  for (const pool of [h.runtime.sql, h.runtime.meteringSql]) {
    t.equal((await pool`SHOW synchronous_commit`)[0]!.synchronous_commit, 'off', 'this pool commits without a WAL flush')
  }
  const sql = h.runtime.sql
  await projected(h, await createJobs(h, 10, 'early'))
  await h.stopRole('projector')
  for (const table of tables) await sql.unsafe(`CREATE TABLE saved_${table} AS TABLE ${table}`)
  await h.startRole('projector')
  await projected(h, await createJobs(h, 15, 'late'))
  await h.stopRole('projector')
  const before = await readModels(sql)

  // The crash: everything committed after the save is gone, checkpoints with it.
  for (const table of tables) {
    // Generated columns (jobs.available_at, the throughput percentiles) are computed again, not copied.
    const columns = (
      await sql<{ column_name: string }[]>`
      SELECT column_name FROM information_schema.columns WHERE table_name = ${table} AND is_generated = 'NEVER' ORDER BY ordinal_position`
    ).map((c) => `"${c.column_name}"`)
    await sql.unsafe(`TRUNCATE ${table}; INSERT INTO ${table} (${columns}) SELECT ${columns} FROM saved_${table}; DROP TABLE saved_${table}`)
  }
  t.not((await readModels(sql)).jobs.length, before.jobs.length, 'the later jobs are gone from the read model')
  await h.startRole('projector')
  await projected(h, Number((await h.runtime.nats.jsm.streams.info(eventsStreamName(h.config.namespace))).state.last_seq))
  t.same(await readModels(sql), before, 'the projector applied the lost tail again: the read models end as they were')
})
