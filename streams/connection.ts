import { connect, type NatsConnection } from '@nats-io/transport-node'
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream'

export interface NatsHandles {
  nc: NatsConnection
  js: JetStreamClient
  jsm: JetStreamManager
}

/** Connects to `servers` (a CONTRACT-style comma-separated list) and opens the JetStream APIs. */
export async function connectNats(servers: string, name: string): Promise<NatsHandles> {
  const nc = await connect({
    servers: servers.split(',').map((s) => s.trim()).filter(Boolean),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    // Capturing a stack trace for every request in case it times out cost ~9% of the CPU of a
    // job's round trips (two Error objects per publish and per direct get).
    noAsyncTraces: true,
  })
  const jsm = await jetstreamManager(nc, { timeout: 10_000 })
  const js = jetstream(nc, { timeout: 10_000 })
  return { nc, js, jsm }
}
