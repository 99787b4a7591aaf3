import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { TestLike } from './harness.ts'

/** A free loopback port, so a stopped server can be started again where its clients look for it. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => resolve(typeof address === 'object' && address !== null ? address.port : 0))
    })
  })
}

export interface PrivateNats {
  url: string
  /** Kills the server (SIGKILL: an outage, not a clean shutdown). */
  kill(): Promise<void>
  /** Starts it again on the same port and store. */
  start(): Promise<void>
}

/**
 * A throw-away nats-server with JetStream for fault injection (../shared/services.md): its own
 * port and store directory, stopped by its PID. The shared server is never touched.
 */
export async function startPrivateNats(t: TestLike): Promise<PrivateNats> {
  const port = await freePort()
  const store = await mkdtemp(join(tmpdir(), 'jobsvc-nats-'))
  const { start, kill } = natsServerProcess(['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', store])
  await start()
  t.teardown(async () => {
    await kill()
    await rm(store, { recursive: true, force: true })
  })
  return { url: `nats://127.0.0.1:${port}`, kill, start }
}

/** One nats-server process with `args`: `start` resolves once it is ready, `kill` is SIGKILL (a crash). */
export function natsServerProcess(args: string[]): { start(): Promise<void>; kill(): Promise<void> } {
  let child: ChildProcess | null = null
  const start = async () => {
    await spawnServer('/usr/sbin/nats-server', args, 'Server is ready', (proc) => (child = proc))
  }
  const kill = () =>
    new Promise<void>((resolve) => {
      const proc = child
      if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return resolve()
      proc.once('exit', () => resolve())
      proc.kill('SIGKILL')
    })
  return { start, kill }
}

/**
 * Spawns a server, `command` with `args`, and resolves once its output (stdout or stderr)
 * includes `ready`; rejects with that output if it exits first. `spawned` is handed the process
 * at once, so that a caller can stop one that never gets ready.
 */
export function spawnServer(
  command: string,
  args: string[],
  ready: string,
  spawned: (proc: ChildProcess) => void = () => undefined,
): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const proc = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    spawned(proc)
    let out = ''
    const onData = (d: Buffer) => {
      out += String(d)
      if (out.includes(ready)) resolve(proc)
    }
    proc.stdout!.on('data', onData)
    proc.stderr!.on('data', onData)
    proc.once('exit', (code) => reject(new Error(`${command} exited with ${code}: ${out}`)))
  })
}
