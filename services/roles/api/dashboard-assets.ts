import { createHash } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { extname, join, relative, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'

/** The dashboard's own files, served as they are in the repository (no build step). */
const dashboardRoot = fileURLToPath(new URL('../../../dashboard/', import.meta.url))

/**
 * The packages the dashboard imports by bare name, resolved from node_modules (installed by
 * `npm ci` from the lock file) so that nothing comes from a CDN and the page works offline.
 */
const vendorModules: ReadonlyArray<readonly [specifier: string, file: string]> = [
  ['preact', 'preact'],
  ['preact/hooks', 'preact/hooks'],
  ['htm', 'htm'],
  ['uqr', 'uqr'],
  // uPlot (the charts) names its CommonJS build as its main: the browser takes its ES module.
  ['uplot', 'uplot/dist/uPlot.esm.js'],
]

/** Stylesheets of the vendored packages, linked from the page. */
const vendorStyles = ['uplot/dist/uPlot.min.css'] as const

/** The e-mailed links (mailer.ts, under PUBLIC_URL) that land on dashboard pages. */
export const mailedPaths = ['/verify', '/reset-password', '/accept-invite'] as const

const contentTypes: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
}

interface Asset {
  body: Buffer
  type: string
  etag: string
  cacheControl: string
}

const digestOf = (body: Buffer | string) => createHash('sha256').update(body).digest()

function asset(body: Buffer, file: string, cacheControl: string): Asset {
  return {
    body,
    type: contentTypes[extname(file)] ?? 'application/octet-stream',
    etag: `"${digestOf(body).toString('base64url').slice(0, 22)}"`,
    cacheControl,
  }
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? filesUnder(join(dir, entry.name)) : [join(dir, entry.name)],
  )
}

interface DashboardFiles {
  index: Asset
  /** By URL path under /dashboard (`/assets/app.js`, `/vendor/preact.<hash>.mjs`). */
  byPath: Map<string, Asset>
  contentSecurityPolicy: string
}

/**
 * Reads every file once at start. The application's modules keep their names and are
 * revalidated on each load (ETag, `no-cache`), so a deploy is seen at once; the vendored modules
 * are named by their content hash and cached for a year.
 */
function loadDashboardFiles(): DashboardFiles {
  const byPath = new Map<string, Asset>()
  const imports: Record<string, string> = {}
  for (const [specifier, resolvable] of vendorModules) {
    const file = fileURLToPath(import.meta.resolve(resolvable))
    const body = readFileSync(file)
    const name = `${specifier.replace('/', '-')}.${digestOf(body).toString('hex').slice(0, 12)}${extname(file)}`
    byPath.set(`/vendor/${name}`, asset(body, file, 'public, max-age=31536000, immutable'))
    imports[specifier] = `/dashboard/vendor/${name}`
  }
  const styleLinks: string[] = []
  for (const resolvable of vendorStyles) {
    const file = fileURLToPath(import.meta.resolve(resolvable))
    const body = readFileSync(file)
    const name = `${resolvable.split('/')[0]}.${digestOf(body).toString('hex').slice(0, 12)}${extname(file)}`
    byPath.set(`/vendor/${name}`, asset(body, file, 'public, max-age=31536000, immutable'))
    styleLinks.push(`<link rel="stylesheet" href="/dashboard/vendor/${name}" />`)
  }
  for (const file of filesUnder(join(dashboardRoot, 'assets'))) {
    const urlPath = `/${relative(dashboardRoot, file).split(sep).join('/')}`
    byPath.set(urlPath, asset(readFileSync(file), file, 'no-cache'))
  }
  // An inline import map is the only way to name bare specifiers; the CSP admits it by its hash.
  const importMap = JSON.stringify({ imports })
  const html = readFileSync(join(dashboardRoot, 'index.html'), 'utf8')
    .replace('<!-- import map -->', `<script type="importmap">${importMap}</script>`)
    .replace('<!-- vendor styles -->', styleLinks.join('\n    '))
  const contentSecurityPolicy = [
    "default-src 'self'",
    `script-src 'self' 'sha256-${digestOf(importMap).toString('base64')}'`,
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ')
  return { index: asset(Buffer.from(html), 'index.html', 'no-cache'), byPath, contentSecurityPolicy }
}

function send(request: FastifyRequest, reply: FastifyReply, file: Asset, contentSecurityPolicy: string) {
  void reply
    .header('Content-Type', file.type)
    .header('Cache-Control', file.cacheControl)
    .header('ETag', file.etag)
    .header('Content-Security-Policy', contentSecurityPolicy)
    .header('X-Content-Type-Options', 'nosniff')
    // Account links carry their token in the query: it must not leave in a Referer.
    .header('Referrer-Policy', 'no-referrer')
  if (request.headers['if-none-match'] === file.etag) return reply.code(304).send()
  return reply.send(file.body)
}

/**
 * `GET /dashboard/*`: the single-page dashboard. Paths under `/assets/` and `/vendor/` are files
 * (404 when missing); every other path is a page of the app and answers `index.html`, whose
 * script routes on the location. The e-mailed links under the root (`/verify?token=…`) redirect
 * to the same page under `/dashboard`, so they work whether PUBLIC_URL names the dashboard's
 * path or only the host.
 */
export function dashboardRoutes(): FastifyPluginAsync {
  const files = loadDashboardFiles()
  return async (app) => {
    const page = async (request: FastifyRequest, reply: FastifyReply) => send(request, reply, files.index, files.contentSecurityPolicy)
    app.get('/dashboard', { schema: { hide: true } }, page)
    app.get('/dashboard/*', { schema: { hide: true } }, async (request, reply) => {
      const path = `/${(request.params as { '*': string })['*']}`
      if (path.startsWith('/assets/') || path.startsWith('/vendor/')) {
        const file = files.byPath.get(path)
        if (file === undefined) return reply.callNotFound()
        return send(request, reply, file, files.contentSecurityPolicy)
      }
      return page(request, reply)
    })
    for (const path of mailedPaths) {
      app.get(path, { schema: { hide: true } }, async (request, reply) => {
        const query = request.url.indexOf('?')
        return reply.redirect(`/dashboard${path}${query === -1 ? '' : request.url.slice(query)}`, 302)
      })
    }
  }
}
