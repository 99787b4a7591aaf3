import t from 'tap'
import type { ClaimTarget, PollDemand } from '../../services/use-cases/jobs/claim-line.ts'
import { ClaimLine } from '../../services/use-cases/jobs/claim-line.ts'

/**
 * The claim line's turn-taking, with a runner the test finishes by hand (the claim transactions
 * themselves run against Postgres in test/api/poll-fairness.test.ts and workers.test.ts). Each
 * "job" a run hands out is `<project>:<worker>:<n>`, so an answer shows whose transaction served it.
 */

interface Run {
  target: ClaimTarget
  polls: readonly PollDemand[]
  finish(jobsFor?: (p: PollDemand) => number): void
  fail(err: Error): void
}

function lineWithManualRuns(limits = { perProject: 2, total: 3, jobsPerTransaction: 100 }) {
  const runs: Run[] = []
  const line = new ClaimLine<string>(
    (target, polls) =>
      new Promise<string[][]>((resolve, reject) => {
        runs.push({
          target,
          polls,
          finish: (jobsFor = () => 0) =>
            resolve(polls.map((p) => Array.from({ length: jobsFor(p) }, (_, n) => `${target.projectId}:${p.workerId}:${n}`))),
          fail: reject,
        })
      }),
    limits,
  )
  return { line, runs }
}

const request = (projectId: string, workerId: string, capacity = 1, queues = ['q']) => ({ projectId, workerId, queues, jobTypes: null, capacity })

/** Lets the line's deferred start (setImmediate) and the answers' promise callbacks run. */
const settle = () => new Promise((r) => setImmediate(() => setImmediate(r)))

/** Sends the polls one after the other, each settled before the next, so they queue in this order. */
async function claimInTurn(line: ClaimLine<string>, requests: Array<ReturnType<typeof request>>): Promise<Array<Promise<string[]>>> {
  const answers: Array<Promise<string[]>> = []
  for (const r of requests) {
    answers.push(line.claim(r))
    await settle()
  }
  return answers
}

/** Finishes the runs from `from` on, one after the other, each settled before the next. */
async function finishInTurn(runs: readonly Run[], from: number): Promise<void> {
  for (let i = from; i < runs.length; i++) {
    runs[i]!.finish()
    await settle()
  }
}

t.test('polls of one project and target that wait together share one transaction', async (t) => {
  const { line, runs } = lineWithManualRuns()
  const answers = Array.from({ length: 30 }, (_, i) => line.claim(request('prj_a', `w${i}`)))
  await settle()
  t.equal(runs.length, 1, '30 polls woken together: one transaction')
  t.equal(runs[0]!.polls.length, 30)
  t.same(runs[0]!.target, { projectId: 'prj_a', queues: ['q'], jobTypes: null })
  runs[0]!.finish((p) => (p.workerId === 'w0' || p.workerId === 'w1' ? 1 : 0))
  const got = await Promise.all(answers)
  t.same(got[0], ['prj_a:w0:0'], 'each poll gets what its share of the transaction claimed')
  t.same(got[1], ['prj_a:w1:0'])
  t.ok(
    got.slice(2).every((jobs) => jobs.length === 0),
    'the others get nothing',
  )
})

t.test('a transaction serves at most jobsPerTransaction jobs of capacity; the rest form the next batch', async (t) => {
  const { line, runs } = lineWithManualRuns({ perProject: 1, total: 1, jobsPerTransaction: 100 })
  const answers = [line.claim(request('prj_a', 'big1', 50)), line.claim(request('prj_a', 'big2', 50)), line.claim(request('prj_a', 'big3', 50))]
  await settle()
  t.equal(runs.length, 1)
  t.same(
    runs[0]!.polls.map((p) => p.workerId),
    ['big1', 'big2'],
    'two polls of capacity 50 fill a transaction',
  )
  runs[0]!.finish()
  await settle()
  t.equal(runs.length, 2)
  t.same(
    runs[1]!.polls.map((p) => p.workerId),
    ['big3'],
  )
  runs[1]!.finish()
  await Promise.all(answers)
})

t.test('different queue sets of a project are different batches; the same set in another order is the same', async (t) => {
  const { line, runs } = lineWithManualRuns({ perProject: 5, total: 5, jobsPerTransaction: 100 })
  const answers = [
    line.claim(request('prj_a', 'w1', 1, ['x', 'y'])),
    line.claim(request('prj_a', 'w2', 1, ['y', 'x'])),
    line.claim(request('prj_a', 'w3', 1, ['x'])),
  ]
  await settle()
  t.same(
    runs.map((r) => [r.target.queues, r.polls.map((p) => p.workerId)]),
    [
      [
        ['x', 'y'],
        ['w1', 'w2'],
      ],
      [['x'], ['w3']],
    ],
  )
  for (const r of runs) r.finish()
  await Promise.all(answers)
})

t.test('a project runs at most perProject transactions; its other polls wait without one', async (t) => {
  const { line, runs } = lineWithManualRuns({ perProject: 2, total: 10, jobsPerTransaction: 100 })
  const answers = await claimInTurn(
    line,
    Array.from({ length: 6 }, (_, i) => request('prj_a', `w${i}`, 1, [`q${i}`])),
  )
  t.equal(runs.length, 2, 'six targets, two transactions')
  t.equal(line.running('prj_a'), 2)
  t.equal(line.waiting('prj_a'), 4)
  runs[0]!.finish()
  await settle()
  t.equal(runs.length, 3, 'a finished transaction lets the next batch of the project start')
  t.equal(line.running('prj_a'), 2)
  await finishInTurn(runs, 1)
  await Promise.all(answers)
  t.equal(line.running(), 0)
  t.equal(line.waiting('prj_a'), 0)
})

t.test("another project's poll is not stuck behind a project's long line: projects take turns", async (t) => {
  const { line, runs } = lineWithManualRuns({ perProject: 2, total: 2, jobsPerTransaction: 100 })
  const answers = await claimInTurn(
    line,
    Array.from({ length: 5 }, (_, i) => request('prj_a', `a${i}`, 1, [`q${i}`])),
  )
  answers.push(line.claim(request('prj_b', 'b0')))
  await settle()
  t.same(
    runs.map((r) => r.target.projectId),
    ['prj_a', 'prj_a'],
    'A holds both slots of the process',
  )
  runs[0]!.finish()
  await settle()
  t.equal(runs[2]!.target.projectId, 'prj_b', "the next free slot goes to B's poll, ahead of A's three queued batches")
  await finishInTurn(runs, 1)
  await Promise.all(answers)
  t.equal(runs.length, 6)
})

t.test('an aborted poll leaves its batch before it runs; once it runs, the answer stands', async (t) => {
  const { line, runs } = lineWithManualRuns({ perProject: 1, total: 1, jobsPerTransaction: 100 })
  const first = line.claim(request('prj_a', 'first', 1, ['other']))
  await settle()
  const gone = new AbortController()
  const leaving = line.claim(request('prj_a', 'leaving'), gone.signal)
  const staying = line.claim(request('prj_a', 'staying'))
  await settle()
  t.equal(line.waiting('prj_a'), 2)
  gone.abort()
  t.same(await leaving, [], 'the aborted poll is answered with nothing at once')
  t.equal(line.waiting('prj_a'), 1)
  runs[0]!.finish()
  await settle()
  t.same(
    runs[1]!.polls.map((p) => p.workerId),
    ['staying'],
    'its batch runs without it',
  )
  runs[1]!.finish(() => 1)
  t.same(await staying, ['prj_a:staying:0'])
  await first

  const late = new AbortController()
  const running = line.claim(request('prj_a', 'late'), late.signal)
  await settle()
  late.abort()
  runs[2]!.finish(() => 1)
  t.same(await running, ['prj_a:late:0'], 'an abort after the transaction started does not drop what it claimed')
  t.same(await line.claim(request('prj_a', 'never'), late.signal), [], 'an already aborted poll claims nothing')
  t.equal(runs.length, 3)
})

t.test('a failed transaction fails every poll it served, and frees its slot', async (t) => {
  const { line, runs } = lineWithManualRuns({ perProject: 1, total: 1, jobsPerTransaction: 100 })
  const answers = [line.claim(request('prj_a', 'w1')), line.claim(request('prj_a', 'w2'))]
  await settle()
  runs[0]!.fail(new Error('connection lost'))
  for (const a of answers) await t.rejects(a, /connection lost/)
  const next = line.claim(request('prj_a', 'w3'))
  await settle()
  t.equal(runs.length, 2, 'the next poll gets a transaction')
  runs[1]!.finish()
  t.same(await next, [])
  t.equal(line.running(), 0)
})
