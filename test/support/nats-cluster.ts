import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { jetstreamManager } from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import type { TestLike } from './harness.ts'
import { freePort, natsServerProcess } from './private-nats.ts'

export interface ClusterNode {
  /** The server name, as JetStream's stream info names its cluster leader and replicas. */
  name: string
  url: string
  /** Kills the server (SIGKILL: a crash, not a clean shutdown). */
  kill(): Promise<void>
  /** Starts it again on the same ports and store. */
  start(): Promise<void>
}

export interface NatsCluster {
  nodes: ClusterNode[]
  /** Every node's client URL, comma-separated, as NATS_URL takes them. */
  urls: string
  node(name: string): ClusterNode
}

/**
 * `size` nats-server processes on loopback forming one JetStream cluster: each with its own
 * client and route ports and its own store directory under one temporary directory, routes to
 * every other node. Killed by PID and their stores removed at teardown; the shared server is
 * never touched.
 */
export async function startNatsCluster(t: TestLike, size = 3): Promise<NatsCluster> {
  const root = await mkdtemp(join(tmpdir(), 'jobsvc-nats-cluster-'))
  const clusterName = `jobsvc_t_${randomBytes(3).toString('hex')}`
  const ports = await Promise.all(Array.from({ length: size }, async () => ({ client: await freePort(), route: await freePort() })))
  const nodes: ClusterNode[] = ports.map((port, i) => {
    const name = `n${i + 1}`
    const routes = ports
      .filter((_, j) => j !== i)
      .map((p) => `nats://127.0.0.1:${p.route}`)
      .join(',')
    const args = [
      ...['-js', '-a', '127.0.0.1', '-p', String(port.client), '-n', name, '-sd', join(root, name)],
      ...['--cluster_name', clusterName, '--cluster', `nats://127.0.0.1:${port.route}`, '--routes', routes],
    ]
    const { start, kill } = natsServerProcess(args)
    return { name, url: `nats://127.0.0.1:${port.client}`, kill, start }
  })
  t.teardown(async () => {
    await Promise.all(nodes.map((n) => n.kill()))
    await rm(root, { recursive: true, force: true })
  })
  await Promise.all(nodes.map((n) => n.start()))
  await awaitReplicatedJetStream(
    nodes.map((n) => n.url),
    size,
  )
  return {
    nodes,
    urls: nodes.map((n) => n.url).join(','),
    node(name) {
      const found = nodes.find((n) => n.name === name)
      if (!found) throw new Error(`no cluster node named ${name}`)
      return found
    },
  }
}

/**
 * Waits until the cluster can hold a stream with `replicas` replicas: every server accepting
 * connections is not enough, since JetStream's meta leader is elected after, and a stream created
 * before that times out (seen on the shared two cores while another cluster test was starting).
 * Creates and deletes a probe stream, retrying for up to a minute.
 */
async function awaitReplicatedJetStream(urls: string[], replicas: number): Promise<void> {
  const nc = await connect({ servers: urls, name: 'jobsvc-test-cluster-probe' })
  try {
    const name = `probe_${randomBytes(4).toString('hex')}`
    const deadline = Date.now() + 60_000
    for (;;) {
      try {
        // The manager's own check of the JetStream API is the first request that can time out.
        const jsm = await jetstreamManager(nc, { timeout: 5_000 })
        await jsm.streams.add({ name, subjects: [`${name}.>`], num_replicas: replicas })
        await jsm.streams.delete(name)
        return
      } catch (err) {
        if (Date.now() > deadline) throw err
        await sleep(250)
      }
    }
  } finally {
    await nc.close()
  }
}
