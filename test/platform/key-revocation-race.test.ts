import t from 'tap'
import { ApiKeyDirectory } from '../../services/roles/api/api-key-directory.ts'
import { commandProject } from '../../services/use-cases/projects/project-service.ts'
import type { EventStore } from '../../streams/event-store.ts'
import { startHarness } from '../support/harness.ts'

/**
 * Spec, Authentication 8: a revocation rejects every key within milliseconds. The API's key
 * cache is filled by loads from the log and by the project events it sees; a load that read the
 * project before the revocation and returns after the revocation's event must not put the
 * revoked keys back. The load is held in between deterministically, not by timing.
 */

t.test('a project load in flight across a revocation does not re-install the revoked key', async (t) => {
  const h = await startHarness(t, import.meta.filename, { roles: [] })
  const key = `Bearer ${h.apiKey}`

  // The first load of the project reads the log, then waits until the test lets it return.
  let releaseLoad!: () => void
  const held = new Promise<void>((resolve) => (releaseLoad = resolve))
  let signalRead!: () => void
  const read = new Promise<void>((resolve) => (signalRead = resolve))
  let loads = 0
  const store = Object.create(h.runtime.store) as EventStore
  store.load = async (ref) => {
    const loaded = await h.runtime.store.load(ref)
    if (ref.aggregate === 'project' && ++loads === 1) {
      signalRead()
      await held
    }
    return loaded as never
  }
  const directory = new ApiKeyDirectory({ ...h.runtime, store })
  directory.start()
  t.teardown(() => directory.stop())

  const inFlight = directory.authenticate(key).then(
    () => 'authenticated',
    (err: { code?: string }) => err.code ?? String(err),
  )
  await read
  t.equal(loads, 1, 'the first request is loading the project, which still has its key')

  await commandProject(h.runtime, h.projectId, { type: 'revoke_api_keys', data: { actor_user_id: null }, meta: { now: new Date().toISOString() } })
  // The revocation's message reaches this connection's subscribers before the append's
  // acknowledgement does; a flush round trip makes sure the directory has handled it.
  await h.runtime.nats.nc.flush()
  await t.rejects(directory.authenticate(key), { code: 'unauthorized' }, 'a request after the revocation is refused (from the event, no load)')
  t.equal(loads, 1, 'it was answered from the revocation event, without a load of its own')

  releaseLoad()
  t.equal(await inFlight, 'unauthorized', 'the request whose load spanned the revocation is refused too')
  await t.rejects(directory.authenticate(key), { code: 'unauthorized' }, 'and the load did not put the revoked key back in the cache')
  t.equal(loads, 1, 'that answer came from the cache as well')
})
