import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

/** The service and its command line run from the repository root, as `npm start` runs them. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..')

/** A project the bench drives, as the command line prints it. */
export interface BenchProject {
  project_id: string
  api_key: string
}

export interface SpawnedService {
  url: string
  child: ChildProcess
  output(): string
}

/** Keeps only the tail of a child's output: enough to explain a failure, never unbounded. */
function tailBuffer(limit = 64 * 1024) {
  let text = ''
  return {
    add: (chunk: unknown) => {
      text += String(chunk)
      if (text.length > limit) text = text.slice(-limit)
    },
    text: () => text,
  }
}

/**
 * Starts the service (every role, one process, unless `roles` names some) and resolves once it
 * says it is ready, with the URL it logs when it serves the API (else ''); `env` carries its
 * namespace, database and port 0.
 */
export async function spawnService(
  env: NodeJS.ProcessEnv,
  logPath: string | null,
  cpuProfileDir: string | null,
  dev: boolean,
  signal: AbortSignal,
  roles: readonly string[] = [],
): Promise<SpawnedService> {
  const args = [
    ...(cpuProfileDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${cpuProfileDir}`]),
    '--import',
    'tsx',
    'services/roles/main.ts',
    ...(dev ? ['--dev'] : []),
    ...(roles.length === 0 ? [] : ['--role', roles.join(',')]),
  ]
  const child = spawn(process.execPath, args, { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'] })
  const out = tailBuffer()
  // Drained for the whole run: a full pipe would block the service's logging.
  child.stdout!.on('data', out.add)
  child.stderr!.on('data', out.add)
  if (logPath !== null) {
    const file = createWriteStream(logPath)
    child.stdout!.pipe(file)
    child.stderr!.pipe(file)
  }
  const url = await new Promise<string>((resolvePromise, reject) => {
    const fail = (why: string) => {
      clearTimeout(timer)
      reject(new Error(`${why}\n${out.text()}`))
    }
    const timer = setTimeout(() => fail('the service did not start within 30 s'), 30_000)
    const onData = () => {
      const m = /jobsvc listening on (http:\/\/[^"\s]+)|jobsvc ready \(/.exec(out.text())
      if (m) {
        clearTimeout(timer)
        child.stdout!.off('data', onData)
        resolvePromise(m[1] ?? '')
      }
    }
    child.stdout!.on('data', onData)
    child.once('exit', (code) => fail(`the service exited with ${code}`))
    signal.addEventListener('abort', () => fail('interrupted'), { once: true })
  })
  return { url, child, output: out.text }
}

/** SIGTERM, then SIGKILL if the service has not exited within 10 s. */
export async function stopService(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise<void>((r) => child.once('exit', () => r()))
  child.kill('SIGTERM')
  const killer = setTimeout(() => child.kill('SIGKILL'), 10_000)
  await exited
  clearTimeout(killer)
}

/** A project on the business plan, created by the service's command line, and its API key. */
export function createBenchProject(env: NodeJS.ProcessEnv, dev: boolean): Promise<BenchProject> {
  // business: its request rate (500,000/h) and allowance leave the bench unthrottled.
  const args = ['--import', 'tsx', 'services/roles/cli.ts', ...(dev ? ['--dev'] : []), 'project', 'create', '--name', 'bench', '--plan', 'business']
  return new Promise((resolvePromise, reject) => {
    execFile(process.execPath, args, { cwd: repoRoot, env, timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`project create failed: ${err.message}\n${stderr}`))
      try {
        resolvePromise(JSON.parse(stdout.trim().split('\n').at(-1)!))
      } catch {
        reject(new Error(`project create printed no JSON: ${stdout}\n${stderr}`))
      }
    })
  })
}
