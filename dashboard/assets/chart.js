import { useEffect, useRef } from 'preact/hooks'
import uPlot from 'uplot'
import { html } from './ui.js'

/**
 * A time chart drawn by uPlot (a small, maintained canvas charting library): axes with the
 * times and values, a cursor whose legend reads each series at the bucket under it (the
 * tooltip), and an empty state instead of a blank frame when no bucket has a value.
 *
 * `buckets`: [{start, ...}], `series`: [{key, label, color}], `bars`: draw bars, not lines;
 * `format`: how a value reads on the axis and in the legend; `empty`: what to say with no data.
 */
export function TimeChart({ name, label, buckets, series, bars = false, format = String, empty }) {
  const box = useRef(null)
  const hasData = buckets.some((b) => series.some((s) => b[s.key] !== null && b[s.key] !== undefined && b[s.key] !== 0))
  useEffect(() => {
    if (!hasData || box.current === null) return
    const data = [buckets.map((b) => Date.parse(b.start) / 1000), ...series.map((s) => buckets.map((b) => b[s.key] ?? null))]
    const paths = bars ? uPlot.paths.bars({ size: [0.6, 24] }) : undefined
    const chart = new uPlot(
      {
        width: Math.max(320, box.current.clientWidth),
        height: 180,
        cursor: { drag: { x: false, y: false } },
        legend: { live: true },
        scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max) * 1.1] } },
        axes: [{}, { values: (_u, ticks) => ticks.map(format), size: 64 }],
        series: [
          { label: 'Time' },
          ...series.map((s) => ({
            label: s.label,
            stroke: s.color,
            fill: bars ? s.color : undefined,
            width: bars ? 0 : 2,
            paths,
            spanGaps: false,
            points: { show: !bars, size: 4 },
            value: (_u, v) => (v === null || v === undefined ? '—' : format(v)),
          })),
        ],
      },
      data,
      box.current,
    )
    const resize = () => chart.setSize({ width: Math.max(320, box.current?.clientWidth ?? 320), height: 180 })
    window.addEventListener('resize', resize)
    return () => {
      window.removeEventListener('resize', resize)
      chart.destroy()
    }
  }, [buckets, hasData])
  if (!hasData) return html`<p class="empty chart-empty" data-chart=${name}>${empty}</p>`
  return html`<div class="time-chart" data-chart=${name} role="img" aria-label=${label} ref=${box}></div>`
}
