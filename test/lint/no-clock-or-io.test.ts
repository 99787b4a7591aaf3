import { ESLint } from 'eslint'
import t from 'tap'
import { repoRoot } from '../support/harness.ts'

// The ready index's lanes stay pure (issue 24, item 2): no timers, no clock, no I/O imports. This
// runs the repository's own ESLint config (the rule as registered) on examples placed, by name,
// where the lanes live, and on the lanes themselves.

const eslint = new ESLint({ cwd: repoRoot })
const lanesFile = `${repoRoot}services/use-cases/jobs/ready-index/lanes.ts`

async function problems(code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: lanesFile })
  return result!.messages.filter((m) => m.ruleId === 'jobsvc-pure/no-clock-or-io').map((m) => m.message)
}

t.test('timers, clock readings and I/O imports fail', async (t) => {
  const found = await problems(`
import { jobList } from '../../../../projections/job-list.ts'
import { followEvents, type FollowedEvent } from '../../../../streams/consume.ts'
import { setTimeout as sleep } from 'node:timers/promises'
export function sweep(): number {
  setTimeout(() => undefined, 10)
  setInterval(() => undefined, 10)
  void jobList.pendingQueue, followEvents, sleep
  const e: FollowedEvent | null = null
  return Date.now() + new Date().getTime() + performance.now() + (e === null ? 0 : 1)
}
`)
  t.same(found, [
    "'../../../../projections/job-list.ts' does I/O: a pure module imports only its types",
    "'../../../../streams/consume.ts' does I/O: a pure module imports only its types",
    "'node:timers/promises' does I/O: a pure module imports only its types",
    '`setTimeout` sets a timer: a pure module leaves timers to its callers',
    '`setInterval` sets a timer: a pure module leaves timers to its callers',
    '`Date.now()` reads the clock: pass the time in',
    '`new Date()` reads the clock: pass the time in',
    '`performance.now()` reads the clock: pass the time in',
  ])
})

t.test('type imports, time passed in and dates from values pass', async (t) => {
  const found = await problems(`
import type { Job } from '../../../../domain/job.ts'
import { type StoredEvent } from '../../../../streams/event-store.ts'
export function dueAt(job: Job, events: StoredEvent<never>[], now: number, setTimeout: (f: () => void) => void): number {
  setTimeout(() => undefined)
  return Math.max(now, Date.parse(job.created_at), new Date(now).getTime(), events.length)
}
`)
  t.same(found, [])
})

t.test('the lanes themselves pass', async (t) => {
  const [result] = await eslint.lintFiles([lanesFile])
  t.same(
    result!.messages.map((m) => `${m.line}: ${m.message}`),
    [],
  )
})
