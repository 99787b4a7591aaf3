import type { Subscription } from '@nats-io/transport-node'
import type { Actor } from '../../../domain/decider.ts'
import type { Project, ProjectRole } from '../../../domain/project/index.ts'
import { projectDirectory } from '../../../projections/project-directory.ts'
import { decodeEventMessage } from '../../../streams/event-store.ts'
import { aggregateKindFilter } from '../../../streams/names.ts'
import { projectHandler } from '../../../streams/aggregates.ts'
import { apiKeyPrefix, hashApiKey, isApiKeyShape, isHashMatch } from '../../use-cases/projects/api-keys.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import { unauthorized } from './errors.ts'

export { hasRoleAtLeast, type ProjectRole } from '../../../domain/project/index.ts'

export interface Principal {
  projectId: string
  /** API keys act for the whole project (role owner); dashboard users get their membership role. */
  role: ProjectRole
  /** The project as this process last saw it (plan, billing settings). */
  project: Project
  /** The member, when a dashboard session calls (their changes are recorded as theirs); absent for API keys. */
  actor?: Actor
}

/** A cached project older than this is loaded again even if no event said it changed. */
const cacheTtlMs = 60_000
/** Prefix → project ids never change once issued, so they are remembered (bounded). */
const maxRememberedPrefixes = 10_000

/**
 * Authenticates API keys. The prefix finds the project in Postgres; the keys themselves are
 * checked against the project aggregate's state, cached in memory and replaced by every project
 * event this process sees on the log's subjects, so a revocation applies here as soon as it is
 * appended, without waiting for a projection.
 */
export class ApiKeyDirectory {
  readonly #deps: Deps
  readonly #projects = new Map<string, { project: Project; loadedAt: number }>()
  /** Loads from the log in flight, per project; an event for the project marks them stale. */
  readonly #loading = new Map<string, Set<{ stale: boolean }>>()
  readonly #prefixes = new Map<string, string>()
  readonly #hashes = new Map<string, string>()
  readonly #listeners = new Set<(before: Project | undefined, after: Project) => void>()
  #subscription: Subscription | undefined

  constructor(deps: Deps) {
    this.#deps = deps
  }

  start(): void {
    this.#subscription = this.#deps.nats.nc.subscribe(aggregateKindFilter(this.#deps.config.namespace, 'project'), {
      callback: (err, msg) => {
        if (err) return
        try {
          const message = decodeEventMessage<{ type: string; data: unknown }, Project | null>(msg.data, null)
          if (message.state === null) this.#projects.delete(message.project_id)
          else this.#replace(message.state)
          for (const load of this.#loading.get(message.project_id) ?? []) load.stale = true
        } catch (e) {
          this.#deps.log.warn({ err: e }, 'api keys: undecodable project event')
        }
      },
    })
  }

  stop(): void {
    this.#subscription?.unsubscribe()
  }

  /**
   * The project from the cache, or loaded from the log. A load that an event for the project
   * overtook (it read the log, then a revocation's event arrived before it returned) may hold
   * the state from before that event: it is neither cached nor used, and the event's state,
   * which the subscription has just cached, answers instead.
   */
  async #project(projectId: string): Promise<Project | null> {
    const cached = this.#projects.get(projectId)
    if (cached && Date.now() - cached.loadedAt < cacheTtlMs) return cached.project
    const load = { stale: false }
    const loads = this.#loading.get(projectId) ?? new Set()
    this.#loading.set(projectId, loads.add(load))
    try {
      const loaded = await projectHandler.load(this.#deps.store, projectHandler.ref(projectId))
      if (load.stale) return this.#projects.get(projectId)?.project ?? null
      if (loaded.state !== null) this.#projects.set(projectId, { project: loaded.state, loadedAt: Date.now() })
      return loaded.state
    } finally {
      loads.delete(load)
      if (loads.size === 0) this.#loading.delete(projectId)
    }
  }

  /**
   * A project's state that this process has just appended, taken at once, so that its own next
   * requests (an ack after a retry-policy change) see it without waiting for the log to bring it
   * back. An older event of the project still in flight may replace it briefly; this state's
   * own event follows that one on the log and restores it.
   */
  note(project: Project): void {
    this.#replace(project)
    for (const load of this.#loading.get(project.id) ?? []) load.stale = true
  }

  /**
   * The project as this process last saw it (an event, a load, its own append), however long
   * ago; undefined when it holds none. Polls read the queues' pauses here on every claim, so a
   * pause or resume appended by any process applies to a poll that is already waiting.
   */
  current(projectId: string): Project | undefined {
    return this.#projects.get(projectId)?.project
  }

  /**
   * Keeps `project` (as a request loaded it: a dashboard session's project is not loaded through
   * this directory) when this process holds none, so the project's next event has a state to be
   * compared with; a state held already is newer or as new, and stays.
   */
  remember(project: Project): void {
    if (!this.#projects.has(project.id)) this.#projects.set(project.id, { project, loadedAt: Date.now() })
  }

  /** Calls `listener` with the project before and after each change this process sees (events and its own appends). */
  onChange(listener: (before: Project | undefined, after: Project) => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  #replace(project: Project): void {
    const before = this.#projects.get(project.id)?.project
    this.#projects.set(project.id, { project, loadedAt: Date.now() })
    for (const listener of this.#listeners) listener(before, project)
  }

  /**
   * SHA-256 of a key, remembered for keys seen recently (a few percent of a request's CPU at
   * thousands of requests a second). The comparison with the stored hash stays constant-time.
   */
  #hashOf(key: string): string {
    let hash = this.#hashes.get(key)
    if (hash === undefined) {
      hash = hashApiKey(key)
      if (this.#hashes.size >= maxRememberedPrefixes) this.#hashes.clear()
      this.#hashes.set(key, hash)
    }
    return hash
  }

  async #projectIdOf(prefix: string): Promise<string | undefined> {
    const known = this.#prefixes.get(prefix)
    if (known !== undefined) return known
    const projectId = await projectDirectory.projectOfKeyPrefix(this.#deps.sql, prefix)
    if (projectId !== undefined) {
      if (this.#prefixes.size >= maxRememberedPrefixes) this.#prefixes.clear()
      this.#prefixes.set(prefix, projectId)
    }
    return projectId
  }

  /** Resolves the `Authorization` header to a project, or throws 401 `unauthorized`. */
  async authenticate(authorization: string | undefined): Promise<Principal> {
    const match = /^bearer ([^\s]+)$/i.exec(authorization ?? '')
    const key = match?.[1]
    if (key === undefined || !isApiKeyShape(key)) throw unauthorized()
    const projectId = await this.#projectIdOf(apiKeyPrefix(key))
    if (projectId === undefined) throw unauthorized()
    const project = await this.#project(projectId)
    const now = this.#deps.now().getTime()
    const record = project?.keys.find((k) => k.prefix === apiKeyPrefix(key))
    if (record === undefined || !isHashMatch(this.#hashOf(key), record.key_hash)) throw unauthorized()
    const isUsable = record.status === 'active' || (record.status === 'grace' && record.expires_at !== null && Date.parse(record.expires_at) > now)
    if (!isUsable) throw unauthorized()
    return { projectId, role: 'owner', project: project! }
  }
}
