import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { percentile } from './percentiles.ts'

/** A process's resident set size in bytes (Linux /proc; null elsewhere or once it has exited). */
export function residentBytes(pid: number | undefined): number | null {
  if (pid === undefined) return null
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m === null ? null : Number(m[1]) * 1024
  } catch {
    return null
  }
}

/** The median of `count` RSS samples 100 ms apart: the idle level, not one moment's noise. */
export async function idleResidentBytes(pid: number | undefined, count = 10): Promise<number> {
  const samples: number[] = []
  for (let i = 0; i < count; i++) {
    const rss = residentBytes(pid)
    if (rss !== null) samples.push(rss)
    await sleep(100)
  }
  if (samples.length === 0) throw new Error('cannot read the service process RSS from /proc')
  return percentile(samples, 50)!
}
