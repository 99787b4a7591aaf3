/** The run's own end: its time limit or an interrupt. */
export class RunStopped extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'RunStopped'
  }
}

export interface RunControl {
  /** Aborts with RunStopped at the time limit or on the first SIGINT or SIGTERM. */
  signal: AbortSignal
  /** Clears the time limit and the signal handlers, once the run has cleaned up. */
  release(): void
}

/** A second interrupt exits at once, for a cleanup that hangs. */
export function startRunControl(timeoutMs: number): RunControl {
  const run = new AbortController()
  const timeout = setTimeout(() => run.abort(new RunStopped(`timed out after ${timeoutMs / 1000} s`)), timeoutMs)
  let interrupts = 0
  const onSigint = () => {
    if (++interrupts > 1) process.exit(130)
    run.abort(new RunStopped('interrupted'))
  }
  process.on('SIGINT', onSigint)
  process.on('SIGTERM', onSigint)
  return {
    signal: run.signal,
    release: () => {
      clearTimeout(timeout)
      process.off('SIGINT', onSigint)
      process.off('SIGTERM', onSigint)
    },
  }
}
