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
    servers: servers
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    // Capturing a stack trace for every request in case it times out cost ~9% of the CPU of a
    // job's round trips (two Error objects per publish and per direct get).
    noAsyncTraces: true,
  })
  flushOncePerTurn(nc)
  trackConnectionState(nc)
  const jsm = await jetstreamManager(nc, { timeout: 10_000 })
  const js = jetstream(nc, { timeout: 10_000 })
  return { nc, js, jsm }
}

const disconnected = new WeakSet<NatsConnection>()

/**
 * Follows the connection's status events: between a disconnect and the reconnect, commands
 * that need the server fail at once (LogUnavailable, a 503 to clients) instead of waiting out
 * their 10-second timeouts in nats.js's buffer.
 */
function trackConnectionState(nc: NatsConnection): void {
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === 'disconnect') disconnected.add(nc)
      else if (status.type === 'reconnect') disconnected.delete(nc)
    }
  })()
}

/** False while the connection is lost or closed; true otherwise (and for connections not made by connectNats). */
export function isNatsConnected(nc: NatsConnection): boolean {
  return !nc.isClosed() && !disconnected.has(nc)
}

/** The parts of nats.js's protocol handler (nats-core 3.x, not exported) that writes go through. */
interface OutboundProtocol {
  outbound: { length(): number; size(): number; fill(data: Uint8Array, ...more: Uint8Array[]): void }
  pendingLimit: number
  flushPending(): void
  sendCommand(cmd: string | Uint8Array, ...payloads: Uint8Array[]): void
}

function outboundProtocolOf(nc: NatsConnection): OutboundProtocol | null {
  const protocol = (nc as unknown as { protocol?: Partial<OutboundProtocol> }).protocol
  const ok =
    protocol !== undefined &&
    typeof protocol.flushPending === 'function' &&
    typeof protocol.sendCommand === 'function' &&
    typeof protocol.pendingLimit === 'number' &&
    typeof protocol.outbound?.fill === 'function'
  return ok ? (protocol as OutboundProtocol) : null
}

const encoder = new TextEncoder()

/**
 * Makes the connection write what it has buffered once per event-loop turn instead of once per
 * microtask checkpoint. nats.js flushes in a microtask after the first buffered command, and
 * every HTTP request is handled in its own I/O callback, so each append, ack and pull went out
 * as its own socket write, and the NATS server woke up and read once per message. Flushing
 * from setImmediate lets all the commands of one turn (every request parsed from one batch of
 * readable sockets, every ack of a consumer batch) share a write; on an idle connection the
 * delay is the rest of the current turn, well under a millisecond. Measured with
 * `npm run bench -- --spawn`: the NATS server's CPU per job fell from about 0.5 ms to 0.3 ms.
 * A buffer past nats.js's own threshold is still written at once.
 *
 * Returns false (and changes nothing) when nats.js's internals are not the expected ones;
 * test/streams/connection.test.ts fails then, so an upgrade cannot lose this silently.
 */
export function flushOncePerTurn(nc: NatsConnection): boolean {
  const protocol = outboundProtocolOf(nc)
  if (protocol === null) return false
  let scheduled = false
  const flush = () => {
    scheduled = false
    protocol.flushPending()
  }
  protocol.sendCommand = (cmd, ...payloads) => {
    protocol.outbound.fill(typeof cmd === 'string' ? encoder.encode(cmd) : cmd, ...payloads)
    if (protocol.outbound.size() >= protocol.pendingLimit) protocol.flushPending()
    else if (!scheduled) {
      scheduled = true
      setImmediate(flush)
    }
  }
  return true
}
