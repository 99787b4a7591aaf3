import t from 'tap'
import { toTraceparent } from '../../domain/trace-context.ts'

const valid = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'

t.test('a version-00 traceparent is kept as sent', async (t) => {
  t.equal(toTraceparent(valid), valid)
  t.equal(toTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00'), '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00')
})

t.test('a later version may carry more fields after a dash', async (t) => {
  t.equal(toTraceparent(`01${valid.slice(2)}-what-comes-next`), `01${valid.slice(2)}-what-comes-next`)
})

t.test('anything malformed is not a trace context', async (t) => {
  const invalid = [
    undefined,
    null,
    42,
    '',
    'garbage',
    valid.toUpperCase(),
    `${valid}-extra`,
    `ff${valid.slice(2)}`,
    '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
    '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
    '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01',
    ` ${valid}`,
    `01${valid.slice(2)}-${'x'.repeat(600)}`,
  ]
  for (const value of invalid) t.equal(toTraceparent(value), null, String(JSON.stringify(value)).slice(0, 80))
})
