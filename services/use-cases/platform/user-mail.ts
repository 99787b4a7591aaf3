import { mailVerdict, type MailTopic, type User } from '../../../domain/user.ts'
import type { Mail } from '../../infrastructure/mailer.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

const skipReasons = {
  turned_off: 'the user turned this kind of e-mail off',
  undeliverable: 'the address is marked undeliverable (a hard bounce or a complaint)',
}

/**
 * Sends `mail` to a user unless their notification preferences or an undeliverable address say
 * not to; a skipped send is logged with its reason. Resolves to whether it was sent. A failed
 * delivery rejects, so that each caller keeps its own policy (log it, or try again later).
 */
export async function mailUser(deps: Pick<Deps, 'mailer' | 'log'>, user: User, topic: MailTopic, mail: Mail): Promise<boolean> {
  const verdict = mailVerdict(user, topic)
  if (verdict !== 'send') {
    deps.log.info({ user_id: user.id, topic, subject: mail.subject, reason: verdict }, `e-mail not sent: ${skipReasons[verdict]}`)
    return false
  }
  await deps.mailer.send(mail)
  return true
}
