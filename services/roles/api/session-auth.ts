import { UserNotFound } from '../../../domain/errors.ts'
import { isSessionLive, type User } from '../../../domain/user.ts'
import type { AccountService } from '../../use-cases/platform/accounts.ts'
import { sessionTokenOf } from '../../use-cases/platform/sessions.ts'
import { unauthorized } from './errors.ts'

/**
 * Resolves a dashboard request to its user: a valid session token (Bearer or the `sv_jwt`
 * cookie) not ended by logout nor issued before the user's last password change, for an active
 * user (404 `user_not_found` once the user is deleted).
 * The user is loaded from the log on every request (one direct get), so a logout, password
 * change, suspension or deletion takes effect on the next request in every process.
 */
export async function authenticateSession(
  accounts: AccountService,
  headers: { authorization?: string | undefined; cookie?: string | undefined },
  now: Date,
): Promise<User> {
  const token = sessionTokenOf(headers)
  if (token === null) throw unauthorized('missing or invalid session')
  const claims = await accounts.sessions.verify(token, now)
  if (claims === null) throw unauthorized('missing or invalid session')
  const user = await accounts.loadUser(claims.userId)
  if (user === null) throw new UserNotFound('the user of this session no longer exists')
  if (user.status !== 'active' || !isSessionLive(user, { session_id: claims.sessionId, issued_at_ms: claims.issuedAtMs })) {
    throw unauthorized('the session has ended; log in again')
  }
  return user
}
