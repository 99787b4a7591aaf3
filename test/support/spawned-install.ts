import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { openSql, type Sql } from '../../projections/database.ts'
import { isolatedNames, removeIsolated, repoRoot, spawnService, testSecret, type SpawnedService, type TestLike } from './harness.ts'

const run = promisify(execFile)

/** An install whose processes run apart from the test, as `npm start` runs them. */
export interface SpawnedInstall {
  /** The variables that point a process at the install: namespace, database, config file. */
  env: Record<string, string>
  /** Starts `services/roles/main.ts` with `args`; every process started is stopped at teardown, even one still starting. */
  start(args?: string[]): Promise<SpawnedService>
  /** Stops a process (SIGTERM) and answers its exit code. */
  stop(svc: SpawnedService): Promise<number | null>
  /** A small pool on the install's database, closed at teardown; open it once a process has created the database. */
  openSql(): Sql
}

/**
 * A namespace and database of the test file's own (`isolatedNames`), removed at teardown, with
 * `config` (plans and tunables, as `JOBSVC_CONFIG` reads them) written to a file of its own.
 */
export async function spawnedInstall(
  t: TestLike,
  file: string,
  options: { suffix?: string; config?: unknown; env?: Record<string, string> } = {},
): Promise<SpawnedInstall> {
  const names = isolatedNames(file, options.suffix)
  t.teardown(() => removeIsolated(names))
  const env: Record<string, string> = { JOBSVC_NAMESPACE: names.namespace, DATABASE_URL: names.databaseUrl, ...options.env }
  if (options.config !== undefined) {
    const dir = await mkdtemp(join(tmpdir(), 'jobsvc-config-'))
    t.teardown(() => rm(dir, { recursive: true, force: true }))
    env.JOBSVC_CONFIG = join(dir, 'config.json')
    await writeFile(env.JOBSVC_CONFIG, JSON.stringify(options.config))
  }
  const started: Array<Promise<SpawnedService>> = []
  t.teardown(() =>
    Promise.all(
      started.map((starting) =>
        starting.then(
          (svc) => svc.stop(),
          () => undefined,
        ),
      ),
    ),
  )
  return {
    env,
    start(args = []) {
      const starting = spawnService(env, args)
      started.push(starting)
      return starting
    },
    async stop(svc) {
      await svc.stop()
      return svc.process.exitCode
    },
    openSql() {
      const sql = openSql(names.databaseUrl, { max: 2, applicationName: 'jobsvc-test' })
      t.teardown(() => sql.end({ timeout: 5 }))
      return sql
    },
  }
}

/** Runs the operator command line (`services/roles/cli.ts`) against the install `env` names; answers what its last line prints. */
export async function runCli(env: Record<string, string>, args: string[]): Promise<Record<string, string>> {
  const out = await run(process.execPath, ['--import', 'tsx', 'services/roles/cli.ts', ...args], {
    cwd: repoRoot,
    env: { ...process.env, JOBSVC_SECRET: testSecret, ...env },
  })
  return JSON.parse(out.stdout.trim().split('\n').at(-1)!) as Record<string, string>
}

/** Creates a business-plan project with the operator command line; answers its id and API key. */
export async function createProjectWithCli(env: Record<string, string>, name: string): Promise<{ projectId: string; apiKey: string }> {
  const created = await runCli(env, ['project', 'create', '--name', name, '--plan', 'business'])
  return { projectId: created.project_id!, apiKey: created.api_key! }
}
