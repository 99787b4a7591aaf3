import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { VersionSunset } from '../../infrastructure/config.ts'
import { versionSunset } from './errors.ts'
import { apiDescriptionPath } from './openapi.ts'

/** The two surfaces of v1 (spec, Versioning 1): the service routes and the dashboard routes. */
const versionedPath = /^\/(?:jobsvc|platform)\/v1(?:[/?]|$)/

/**
 * The path the version is read from: the route pattern Fastify matched, or, where no route
 * matched, the path decoded as the router decodes it. Never the raw URL: the router decodes
 * percent-escapes before matching, so `/jobsvc/%761/jobs` runs the route `/jobsvc/v1/jobs`.
 */
function versionPathOf(request: FastifyRequest): string {
  const matched = request.routeOptions.url
  if (matched !== undefined) return matched
  const path = request.url.split('?')[0]!
  try {
    return decodeURIComponent(path)
  } catch {
    return path
  }
}

/**
 * Announces the end of v1 (spec, Versioning 3) on every answer under its prefixes, errors
 * included: `Deprecation` (RFC 9745, a structured-field date), `Sunset` (RFC 8594, an HTTP-date)
 * and a `Link` to the migration notes as both relations those RFCs define. From the sunset on,
 * every route of the version answers 410 `version_sunset`, the headers still on it.
 *
 * Without a sunset nothing is registered, so an install that announces none does no work per
 * request. The health probes are outside the version: an orchestrator must not read a sunset as
 * a dead process. The API description keeps answering after the sunset (with the headers): it
 * is what a client migrating away from v1 reads.
 */
export function registerVersionSunset(app: FastifyInstance, sunset: VersionSunset | null, deps: { now: () => Date }): void {
  if (sunset === null) return
  const headers = {
    Deprecation: `@${Math.floor(sunset.deprecatedAt.getTime() / 1000)}`,
    Sunset: sunset.sunsetAt.toUTCString(),
    Link: `<${sunset.migrationUrl}>; rel="deprecation", <${sunset.migrationUrl}>; rel="sunset"`,
  }
  const sunsetMs = sunset.sunsetAt.getTime()
  app.addHook('onRequest', async (request, reply) => {
    if (!versionedPath.test(versionPathOf(request))) return
    void reply.headers(headers)
    if (deps.now().getTime() >= sunsetMs && request.routeOptions.url !== apiDescriptionPath) throw versionSunset(sunset.sunsetAt)
  })
}
