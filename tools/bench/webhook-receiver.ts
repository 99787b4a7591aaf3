import http from 'node:http'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { HttpError, type Client } from './http-client.ts'
import { percentileMs } from './percentiles.ts'

/**
 * A webhook receiver on loopback (`--webhooks`): answers 200 at once and notes, per delivery, the
 * lag from the event's `created_at` to its arrival (service and bench share the machine's clock).
 */
export class WebhookReceiver {
  readonly lags: number[] = []
  readonly jobs = new Set<string>()
  firstAt: number | null = null
  lastAt = 0
  #port: number | null = null
  readonly #server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      res.writeHead(200).end()
      try {
        const envelope = JSON.parse(body) as { created_at: string; data: { job_id: string } }
        if (this.jobs.has(envelope.data.job_id)) return
        const now = Date.now()
        this.jobs.add(envelope.data.job_id)
        this.lags.push(now - Date.parse(envelope.created_at))
        this.firstAt ??= now
        this.lastAt = now
      } catch {
        // not a delivery
      }
    })
  })

  /** Listens on a free loopback port and resolves with it (the spawned service must be allowed to call it). */
  async listen(): Promise<number> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r))
    this.#port = (this.#server.address() as { port: number }).port
    return this.#port
  }

  /** Subscribes this receiver to the project's job.created events. */
  async subscribe(client: Client): Promise<void> {
    const sub = await client.request('POST', '/jobsvc/v1/webhooks', { url: `http://127.0.0.1:${this.#port}/bench`, events: ['job.created'] })
    if (sub.status !== 201) throw new HttpError('webhook subscription', sub)
  }

  /** Waits until `count` jobs were delivered or `ms` passed. */
  async settle(count: number, ms: number): Promise<void> {
    const end = performance.now() + ms
    while (this.jobs.size < count && performance.now() < end) await sleep(50)
  }

  summary() {
    const spanS = this.firstAt === null ? 0 : (this.lastAt - this.firstAt) / 1000
    return {
      webhook_deliveries: this.jobs.size,
      webhook_deliveries_per_s: spanS > 0 ? Math.round((this.jobs.size / spanS) * 10) / 10 : null,
      webhook_lag_p50_ms: percentileMs(this.lags, 50),
      webhook_lag_p99_ms: percentileMs(this.lags, 99),
    }
  }

  close(): void {
    this.#server.close()
  }
}
