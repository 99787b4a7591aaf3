import t from 'tap'
import {
  abandonedAfterMs,
  debouncedRunAt,
  dedupKeyDecider,
  isAbandoned,
  isDebouncing,
  isDuplicateOf,
  type DedupKeyCommand,
  type DedupKeyEvent,
} from '../../domain/dedup-key.ts'
import { InvalidState } from '../../domain/errors.ts'
import { deciderSpec, evolveOnMissingState } from '../support/decider-spec.ts'

const t0 = Date.parse('2026-03-01T12:00:00.000Z')
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString()

const take = (jobId: string, freeHolder: string | null = null, seconds = 0): DedupKeyCommand => ({
  type: 'take_dedup_key',
  data: { job_id: jobId, key: 'invoice-7', scope: 'queue', queue: 'billing', free_holder: freeHolder },
  meta: { now: at(seconds) },
})
const release = (jobId: string, seconds = 0): DedupKeyCommand => ({ type: 'release_dedup_key', data: { job_id: jobId }, meta: { now: at(seconds) } })

const taken = (jobId: string, seconds = 0): DedupKeyEvent => ({
  type: 'dedup_key_taken',
  data: { job_id: jobId, key: 'invoice-7', scope: 'queue', queue: 'billing', taken_at: at(seconds) },
})
const released = (jobId: string, seconds = 0): DedupKeyEvent => ({ type: 'dedup_key_released', data: { job_id: jobId, released_at: at(seconds) } })

t.test('a new key is taken by the job named', async (t) => {
  const state = deciderSpec(t, dedupKeyDecider)
    .given([])
    .when(take('job_a'))
    .then([taken('job_a')])
  t.same(state, { key: 'invoice-7', scope: 'queue', queue: 'billing', job_id: 'job_a', taken_at: at(0) })
})

t.test('a held key is refused unless its holder is named free', async (t) => {
  deciderSpec(t, dedupKeyDecider)
    .given([taken('job_a')])
    .when(take('job_b'))
    .thenThrows(InvalidState, 'invalid_state')
  deciderSpec(t, dedupKeyDecider)
    .given([taken('job_a')])
    .when(take('job_b', 'job_x'))
    .thenThrows(InvalidState, 'invalid_state', 'naming another holder free does not free this one')
  const state = deciderSpec(t, dedupKeyDecider)
    .given([taken('job_a')])
    .when(take('job_b', 'job_a', 30))
    .then([taken('job_b', 30)])
  t.equal(state?.job_id, 'job_b')
})

t.test('taking a key again for its holder decides nothing', async (t) => {
  deciderSpec(t, dedupKeyDecider)
    .given([taken('job_a')])
    .when(take('job_a', null, 5))
    .then([])
})

t.test('a released key is free for anyone', async (t) => {
  const state = deciderSpec(t, dedupKeyDecider)
    .given([taken('job_a')])
    .when(release('job_a', 1))
    .then([released('job_a', 1)])
  t.same(state, { key: 'invoice-7', scope: 'queue', queue: 'billing', job_id: null, taken_at: null })
  deciderSpec(t, dedupKeyDecider)
    .given([taken('job_a'), released('job_a', 1)])
    .when(take('job_b', null, 2))
    .then([taken('job_b', 2)])
})

t.test('only the holder releases: a late release leaves a newer holder alone', async (t) => {
  deciderSpec(t, dedupKeyDecider)
    .given([taken('job_a'), taken('job_b', 10)])
    .when(release('job_a', 11))
    .then([])
  deciderSpec(t, dedupKeyDecider).given([]).when(release('job_a')).then([], 'nothing to release on a new key')
})

t.test('only dedup_key_taken builds a key from nothing', async (t) => {
  evolveOnMissingState(t, dedupKeyDecider, taken('job_a'), [released('job_a')])
})

t.test('isDuplicateOf: pending, active and a window', async (t) => {
  const job = (state: 'pending' | 'scheduled' | 'processing' | 'succeeded' | 'dead_letter', createdSecondsAgo = 0) => ({
    state,
    created_at: at(-createdSecondsAgo),
  })
  t.ok(isDuplicateOf('pending', job('pending'), at(0)))
  t.ok(isDuplicateOf('pending', job('scheduled'), at(0)))
  t.notOk(isDuplicateOf('pending', job('processing'), at(0)), 'a running job does not hold a `pending` key')
  t.ok(isDuplicateOf('active', job('processing'), at(0)))
  t.notOk(isDuplicateOf('active', job('succeeded'), at(0)))
  t.notOk(isDuplicateOf('active', job('dead_letter'), at(0)))
  t.ok(isDuplicateOf({ window_seconds: 60 }, job('succeeded', 59), at(0)), 'within the window whatever its state')
  t.notOk(isDuplicateOf({ window_seconds: 60 }, job('pending', 60), at(0)), 'the window is open at its start, closed at its end')
})

t.test('isAbandoned: a missing holder frees the key only after the grace period', async (t) => {
  t.notOk(isAbandoned({ taken_at: at(0) }, new Date(t0 + abandonedAfterMs - 1).toISOString()))
  t.ok(isAbandoned({ taken_at: at(0) }, new Date(t0 + abandonedAfterMs).toISOString()))
  t.ok(isAbandoned({ taken_at: null }, at(0)), 'a released key holds nothing')
})

t.test('debounce: only a scheduled job not waiting for a parent is in its quiet period', async (t) => {
  t.ok(isDebouncing({ state: 'scheduled', waiting_for_parent: false }))
  t.notOk(isDebouncing({ state: 'scheduled', waiting_for_parent: true }))
  t.notOk(isDebouncing({ state: 'pending', waiting_for_parent: false }), 'a due job has left it')
  t.notOk(isDebouncing({ state: 'processing', waiting_for_parent: false }))
})

t.test('debounce: the due time moves a quiet period on, capped at the longest wait after the first create', async (t) => {
  const holder = { created_at: at(0) }
  t.equal(debouncedRunAt(holder, at(10), 30, 120), at(40))
  t.equal(debouncedRunAt(holder, at(100), 30, 120), at(120), 'never past first create + max_wait_seconds')
})
