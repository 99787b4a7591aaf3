import { Resolver } from 'node:dns/promises'
import { BlockList, isIP } from 'node:net'

/**
 * Addresses a webhook may never reach (the service's own network and everything that is not the
 * public internet), by IANA special-purpose registries: the checks use node's BlockList, the
 * ranges are the whole of this list.
 */
// Two lists: a BlockList holding IPv6 rules also matches IPv4 addresses against ::ffff:0:0/96.
const blockedV4 = new BlockList()
const blockedV6 = new BlockList()
for (const [net, prefix] of [
  ['0.0.0.0', 8], // "this network", unspecified
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local (cloud metadata lives here)
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  blockedV4.addSubnet(net, prefix, 'ipv4')
}
for (const [net, prefix] of [
  ['::', 128], // unspecified
  ['::1', 128], // loopback
  ['::ffff:0:0', 96], // IPv4-mapped: refused outright rather than unwrapped
  ['64:ff9b::', 96], // NAT64
  ['64:ff9b:1::', 48], // local NAT64
  ['100::', 64], // discard
  ['2001::', 23], // IETF protocol assignments (Teredo and friends)
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['ff00::', 8], // multicast
] as const) {
  blockedV6.addSubnet(net, prefix, 'ipv6')
}

/** 127.0.0.0/8 and ::1: this machine (allowed as a webhook target in development mode). */
export function isLoopbackAddress(address: string): boolean {
  const family = isIP(address)
  if (family === 4) return address.startsWith('127.')
  return family === 6 && (address === '::1' || address === '0:0:0:0:0:0:0:1')
}

export function isPublicAddress(address: string): boolean {
  const family = isIP(address)
  if (family === 0) return false
  return family === 4 ? !blockedV4.check(address, 'ipv4') : !blockedV6.check(address, 'ipv6')
}

/**
 * Resolves a host name to its addresses (the system resolver unless a test passes its own);
 * `signal` abandons the lookup (an attempt's deadline).
 */
export type HostResolver = (host: string, signal?: AbortSignal) => Promise<string[]>

/**
 * A and AAAA queries through c-ares, not `dns.lookup`: lookup runs getaddrinfo on libuv's
 * thread pool (4 threads, shared with file and crypto work), where a host whose name servers
 * answer slowly holds a thread for seconds. Measured here: 100 concurrent lookups of names the
 * server is slow on took 20 s, one batch of four after another, so one project's receiver could
 * hold up every other project's address checks. c-ares queries wait on the event loop, and
 * `signal` cancels them. (The hosts file is not read: names a receiver uses are public.)
 */
export const systemResolver: HostResolver = async (host, signal) => {
  const resolver = new Resolver({ timeout: 2_000, tries: 3 })
  const cancel = () => resolver.cancel()
  signal?.addEventListener('abort', cancel, { once: true })
  try {
    const [v4, v6] = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)])
    const addresses = [...(v4.status === 'fulfilled' ? v4.value : []), ...(v6.status === 'fulfilled' ? v6.value : [])]
    if (addresses.length === 0 && v4.status === 'rejected') throw v4.reason
    return addresses
  } finally {
    signal?.removeEventListener('abort', cancel)
  }
}

export type UrlVerdict = { ok: true; url: URL; addresses: string[] } | { ok: false; reason: string }

/** host:port as `WEBHOOK_ALLOW_HOSTS` lists it (development and tests only). */
function hostPort(url: URL): string {
  const port = url.port || (url.protocol === 'https:' ? '443' : '80')
  return `${url.hostname}:${port}`
}

/**
 * Checks a webhook URL: absolute http(s), at most 2048 characters, and a host whose every
 * address is public. The WHATWG parser has already turned numeric tricks (decimal, octal, hex,
 * short IPv4 forms) into dotted quads, so they meet the same ranges. The same check runs again
 * at delivery on the address actually connected to, so a name that later resolves elsewhere
 * (DNS rebinding) is refused then.
 */
export async function checkWebhookUrl(
  raw: string,
  allowHosts: readonly string[],
  resolve: HostResolver = systemResolver,
  signal?: AbortSignal,
  allowLoopback = false,
): Promise<UrlVerdict> {
  if (raw.length > 2048) return { ok: false, reason: 'url must be at most 2048 characters' }
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return { ok: false, reason: 'url must be an absolute URL' }
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { ok: false, reason: 'url must be http or https' }
  const host = url.hostname.replace(/^\[|\]$/g, '')
  if (allowHosts.includes(hostPort(url))) return { ok: true, url, addresses: [] }
  let addresses: string[]
  if (isIP(host) !== 0) {
    addresses = [host]
  } else {
    try {
      addresses = await resolve(host, signal)
    } catch {
      return { ok: false, reason: `url host ${host} does not resolve` }
    }
  }
  if (allowLoopback && addresses.length > 0 && addresses.every(isLoopbackAddress)) return { ok: true, url, addresses }
  if (addresses.length === 0 || !addresses.every(isPublicAddress)) {
    return {
      ok: false,
      reason: `url host ${host} is not a public address; to deliver to it anyway, add ${hostPort(url)} to WEBHOOK_ALLOW_HOSTS (loopback targets are allowed with --dev)`,
    }
  }
  return { ok: true, url, addresses }
}
