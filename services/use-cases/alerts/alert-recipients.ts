import type { Project } from '../../../domain/project/index.ts'
import type { User } from '../../../domain/user.ts'
import { projectHandler, userHandler } from '../../../streams/aggregates.ts'
import { normalizeEmail } from '../platform/accounts.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/**
 * Alert e-mails go only to the project's own people: an address is a recipient while it is the
 * current address of a member of the project. Anything else would make the alert routes an open
 * relay (whoever holds an API key could have the service mail any address, ten per alert, with a
 * subject they wrote). Checked when an alert is written and again before each e-mail is sent, so
 * a member removed since, or a user whose account is gone or whose address changed, gets nothing.
 *
 * Both the project's member list and the user are read from the log (the member entry keeps the
 * address the user joined with; the user aggregate has the current one), so there is no
 * projection lag. Resolves to the addresses of `emails` that are not recipients, in their order.
 */
export async function nonMemberAddresses(deps: Deps, projectId: string, emails: readonly string[]): Promise<string[]> {
  if (emails.length === 0) return []
  const project = (await projectHandler.load(deps.store, projectHandler.ref(projectId))).state
  const users = new Map<string, Promise<User | null>>()
  const userOf = (id: string) => {
    let user = users.get(id)
    if (user === undefined) users.set(id, (user = userHandler.load(deps.store, userHandler.ref(id)).then((l) => l.state)))
    return user
  }
  const refused: string[] = []
  for (const email of emails) {
    if ((await memberWithAddress(project, email, userOf)) === null) refused.push(email)
  }
  return refused
}

/** The user whose current address `email` is, while they are a member of the project; null otherwise. */
export async function alertRecipient(deps: Deps, projectId: string, email: string): Promise<User | null> {
  const project = (await projectHandler.load(deps.store, projectHandler.ref(projectId))).state
  return memberWithAddress(project, email, async (id) => (await userHandler.load(deps.store, userHandler.ref(id))).state)
}

async function memberWithAddress(project: Project | null, email: string, userOf: (id: string) => Promise<User | null>): Promise<User | null> {
  const address = normalizeEmail(email)
  const member = project?.status === 'active' ? project.members.find((m) => normalizeEmail(m.email) === address) : undefined
  const user = member === undefined ? null : await userOf(member.user_id)
  return user === null || user.status === 'deleted' || normalizeEmail(user.email) !== address ? null : user
}
