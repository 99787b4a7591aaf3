/** Nearest-rank percentile (`p` from 0 to 100); null when nothing was measured. */
export function percentile(values: readonly number[], p: number): number | null {
  if (values.length === 0) return null
  const sorted = Float64Array.from(values).sort()
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!
}

/** Milliseconds to a tenth, as the report prints them. */
export function roundToTenth(ms: number | null): number | null {
  return ms === null ? null : Math.round(ms * 10) / 10
}

/** A percentile of latencies in milliseconds, to a tenth: the report's figures. */
export function percentileMs(values: readonly number[], p: number): number | null {
  return roundToTenth(percentile(values, p))
}
