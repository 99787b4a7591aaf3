import { execFile, type ChildProcess } from 'node:child_process'
import { chown, mkdir, mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import type { TestLike } from './harness.ts'
import { freePort, spawnServer } from './private-nats.ts'

const run = promisify(execFile)
const bin = '/usr/lib/postgresql/15/bin'

export interface PrivatePostgres {
  /** The server's address, for a database `name` of the caller's (the service creates it). */
  url(name: string): string
  /** Kills the postmaster (SIGKILL: a crash, as `kill -9` does); its backends notice and exit on their own. */
  kill(): Promise<void>
  /** Starts the server again on the same port and data directory (crash recovery runs first). */
  start(): Promise<void>
}

/**
 * A throw-away PostgreSQL 15 for fault injection, the Postgres twin of private-nats.ts: a cluster
 * initialised in a temporary folder and run as the `postgres` user (the server refuses to run as
 * root) on a free loopback port, with its socket in the same folder, stopped by its postmaster's
 * PID. The shared Postgres is never touched.
 */
export async function startPrivatePostgres(t: TestLike): Promise<PrivatePostgres> {
  const port = await freePort()
  const root = await mkdtemp(join(tmpdir(), 'jobsvc-pg-'))
  const data = join(root, 'data')
  const sockets = join(root, 'sockets')
  await mkdir(sockets)
  const { uid, gid } = await postgresUser()
  await chown(root, uid, gid)
  await chown(sockets, uid, gid)
  await run('runuser', ['-u', 'postgres', '--', join(bin, 'initdb'), '-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '--no-instructions'])
  let child: ChildProcess | null = null
  // fsync off: the crash is the server's, not the machine's, so the OS keeps what was written
  // either way. 200 connections: each service process pools about 25 of its own.
  const args = ['-D', data, '-p', String(port), '-k', sockets, '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'max_connections=200']
  const start = async () => {
    await spawnServer(
      'runuser',
      ['-u', 'postgres', '--', join(bin, 'postgres'), ...args],
      'database system is ready to accept connections',
      (proc) => (child = proc),
    )
  }
  const kill = async () => {
    const proc = child
    if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return
    // runuser stays the parent of the server, so the postmaster is named by its own PID file.
    const pid = Number((await readFile(join(data, 'postmaster.pid'), 'utf8')).split('\n')[0])
    const backends = await childrenOf(pid)
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()))
    process.kill(pid, 'SIGKILL')
    await exited
    await gone(backends)
  }
  await start()
  t.teardown(async () => {
    await kill()
    await rm(root, { recursive: true, force: true })
  })
  return { url: (name) => `postgres://postgres@127.0.0.1:${port}/${name}`, kill, start }
}

async function postgresUser(): Promise<{ uid: number; gid: number }> {
  const [uid, gid] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])])
  return { uid: Number(uid.stdout), gid: Number(gid.stdout) }
}

async function childrenOf(pid: number): Promise<number[]> {
  const { stdout } = await run('ps', ['-o', 'pid=', '--ppid', String(pid)]).catch(() => ({ stdout: '' }))
  return stdout
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map(Number)
}

/**
 * Backends outlive a killed postmaster until they notice its death, and a new postmaster refuses
 * to start while they still hold the old shared memory; they are waited for, not killed (their
 * own exit is part of the crash being reproduced). A zombie left to a non-reaping init counts as gone.
 */
async function gone(pids: number[]): Promise<void> {
  const isRunning = async (pid: number) => {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null)
    return stat !== null && !/^\d+ \(.*\) Z/.test(stat)
  }
  for (;;) {
    const running = await Promise.all(pids.map(isRunning))
    if (!running.includes(true)) return
    await new Promise((r) => setTimeout(r, 50))
  }
}
