import type { FastifyPluginAsync } from 'fastify'
import { routeRemoved } from '../errors.ts'

/** The canonical prefixes of the removed wrappers (spec, Versioning 7), each with the wrapper's own under the service prefix. */
const wrappedPrefixes = [
  { canonical: '/platform/v1/auth/', removed: '/jobsvc/v1/auth/' },
  { canonical: '/platform/v1/billing/', removed: '/jobsvc/v1/billing/' },
] as const

/** Whether `path` is one of the removed compatibility routes (they are left out of the API description). */
export const isRemovedWrapperPath = (path: string): boolean => wrappedPrefixes.some(({ removed }) => path.startsWith(removed))

/**
 * The compatibility wrappers the spec lists as removed: auth and billing under the service
 * prefix. Each route of `/platform/v1/auth` and `/platform/v1/billing` has its old path under
 * `/jobsvc/v1` answer 410 `route_removed` with a Link to it, so a client still calling one learns
 * where it went instead of getting a 401 for the API key it does not send. They need no
 * credentials, and are hidden from the API description, which lists the routes that work.
 *
 * Register it with no prefix after every platform route: it mirrors the `routes` registered so far.
 *
 * @noProjectRole removed paths, answered before any credentials
 */
export function removedWrapperRoutes(routes: ReadonlyArray<{ method: string | string[]; url: string }>): FastifyPluginAsync {
  const wrapped = routes.flatMap((route) => {
    const prefix = wrappedPrefixes.find((p) => route.url.startsWith(p.canonical))
    if (prefix === undefined) return []
    const removed = prefix.removed + route.url.slice(prefix.canonical.length)
    // Fastify mirrors each GET as a HEAD itself; OPTIONS is the CORS preflight.
    const methods = [route.method].flat().filter((method) => method !== 'HEAD' && method !== 'OPTIONS')
    return methods.map((method) => ({ method, canonical: route.url, removed }))
  })
  return async (app) => {
    for (const { method, canonical, removed } of wrapped) {
      app.route({
        method,
        url: removed,
        schema: { hide: true },
        handler: async (request) => {
          const params = request.params as Record<string, string>
          throw routeRemoved(
            method,
            canonical.replace(/:(\w+)/g, (_, name: string) => encodeURIComponent(params[name] ?? '')),
          )
        },
      })
    }
  }
}
