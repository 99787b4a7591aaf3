import { ESLint } from 'eslint'
import t from 'tap'

// The rule as the repository configures it (eslint.config.js): run on code given a path, so the
// file scope is checked too. Nothing is written; the paths need not exist.
const eslint = new ESLint({ cwd: new URL('../..', import.meta.url).pathname })
const rule = 'jobsvc-aggregates/no-untyped-store'

async function problems(code: string, filePath: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath })
  return result!.messages.filter((m) => m.ruleId === rule).map((m) => m.message)
}

const wrong = {
  handleCommand: "import { handleCommand } from '../../../streams/handle-command.ts'\n",
  typedLoad: 'export const load = (deps: any, ref: any) => deps.store.load<{ plan: string }>(ref)\n',
  typedHistory: 'export const read = (log: any, ref: any) => log.history<never, { plan: string }>(ref)\n',
  storeLoad: 'export const load = (deps: any, ref: any) => deps.store.load(ref)\n',
  eventId: 'export const eventId = (deps: any) => `evt_${deps.newUlid()}`\n',
}

const right = [
  "import { projectHandler } from '../../../streams/aggregates.ts'",
  "import type { CommandResult } from '../../../streams/aggregate-handler.ts'",
  'export const load = (deps: any, id: string) => projectHandler.load(deps.store, projectHandler.ref(id))',
  'export const decide = (deps: any, id: string, command: any): Promise<CommandResult<any, any>> => projectHandler.decide(deps, projectHandler.ref(id), command)',
  'export const jobId = (deps: any) => `job_${deps.newUlid()}`',
  '',
].join('\n')

t.test('in services/, each raw primitive is refused', async (t) => {
  const file = 'services/use-cases/projects/example.ts'
  for (const [what, code] of Object.entries(wrong)) t.equal((await problems(code, file)).length, 1, `${what} is reported`)
  t.match((await problems(wrong.typedLoad, file))[0], /handler/, 'pointing at the handler')
})

t.test('code that goes through the handlers passes', async (t) => {
  t.same(await problems(right, 'services/use-cases/projects/example.ts'), [])
  t.same(await problems(right, 'services/roles/api/routes/example.ts'), [])
})

t.test('streams/ is where the primitives live, and test/streams/ tests them', async (t) => {
  for (const code of Object.values(wrong)) {
    t.same(await problems(code, 'streams/example.ts'), [])
    t.same(await problems(code, 'test/streams/example.test.ts'), [])
  }
})

t.test('other tests may append raw messages and read them back untyped, but not state a type the log does not check', async (t) => {
  const file = 'test/api/example.test.ts'
  t.same(await problems(wrong.storeLoad, file), [], 'an untyped read')
  t.same(await problems(wrong.eventId, file), [], "a raw event's id")
  t.equal((await problems(wrong.typedLoad, file)).length, 1, 'a typed read is reported')
  t.equal((await problems(wrong.handleCommand, file)).length, 1, 'handleCommand is reported')
})
