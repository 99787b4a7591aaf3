import type { Server } from 'node:http'
import type { Socket } from 'node:net'
import type { Deps } from '../../infrastructure/runtime.ts'
import { buildApp } from './app.ts'

export interface ApiRole {
  /** The address the server listens on, e.g. http://127.0.0.1:8080. */
  address: string
  stop(): Promise<void>
}

/** The API role: listens on HOST:PORT (port 0 picks a free one). */
export async function start(deps: Deps): Promise<ApiRole> {
  const stopping = new AbortController()
  const { app } = await buildApp(deps, stopping.signal)
  const closeUnused = trackUnusedConnections(app.server)
  await app.listen({ host: deps.config.host, port: deps.config.port })
  const addr = app.server.address()
  const port = typeof addr === 'object' && addr !== null ? addr.port : deps.config.port
  const host = deps.config.host.includes(':') ? `[${deps.config.host}]` : deps.config.host
  return {
    address: `http://${host}:${port}`,
    async stop() {
      stopping.abort()
      // The server's close waits for every connection to end. Fastify closes the idle ones when it
      // begins, but not those that become idle after (a long poll or stream answered because of
      // the abort) nor those a client opened and never sent a request on (Node waits out its
      // headers timeout for them): stopping took 70 s behind one such connection. So connections
      // with no request in flight are closed until the server is.
      const sweep = setInterval(closeUnused, 100)
      closeUnused()
      try {
        await app.close()
      } finally {
        clearInterval(sweep)
      }
    },
  }
}

/** Counts the requests in flight on each connection; the function it returns closes those with none. */
function trackUnusedConnections(server: Server): () => void {
  const inFlight = new Map<Socket, number>()
  server.on('connection', (socket: Socket) => {
    inFlight.set(socket, 0)
    socket.once('close', () => inFlight.delete(socket))
  })
  server.on('request', (request, response) => {
    const socket = request.socket
    inFlight.set(socket, (inFlight.get(socket) ?? 0) + 1)
    response.once('close', () => {
      if (inFlight.has(socket)) inFlight.set(socket, Math.max(0, inFlight.get(socket)! - 1))
    })
  })
  return () => {
    for (const [socket, requests] of inFlight) if (requests === 0) socket.destroy()
  }
}
