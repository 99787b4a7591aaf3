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
  const start = () =>
    new Promise<void>((resolve, reject) => {
      const proc = spawn('/usr/sbin/nats-server', args, { stdio: ['ignore', 'pipe', 'pipe'] })
      child = proc
      let out = ''
      const onData = (d: Buffer) => {
        out += String(d)
        if (out.includes('Server is ready')) resolve()
      }
      proc.stdout!.on('data', onData)
      proc.stderr!.on('data', onData)
      proc.once('exit', (code) => reject(new Error(`nats-server exited with ${code}: ${out}`)))
    })
  const kill = () =>
    new Promise<void>((resolve) => {
      const proc = child
      if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return resolve()
      proc.once('exit', () => resolve())
      proc.kill('SIGKILL')
    })
  return { start, kill }
}
