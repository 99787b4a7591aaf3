import { createTransport, type Transporter } from 'nodemailer'
import type { Logger } from 'pino'

export interface Mail {
  to: string
  subject: string
  text: string
}

/** Sends the service's e-mails: over SMTP when SMTP_URL is set, to the log otherwise. */
export interface Mailer {
  send(mail: Mail): Promise<void>
  close(): void
}

const sender = 'jobsvc <no-reply@jobsvc.local>'

export function createMailer(smtpUrl: string | null, log: Logger): Mailer {
  if (smtpUrl === null) {
    return {
      async send(mail) {
        log.info({ mail }, 'e-mail (SMTP_URL is unset, so it is logged instead of sent)')
      },
      close() {},
    }
  }
  const transport: Transporter = createTransport(smtpUrl)
  return {
    async send(mail) {
      await transport.sendMail({ from: sender, to: mail.to, subject: mail.subject, text: mail.text })
    },
    close() {
      transport.close()
    },
  }
}

/** A link under PUBLIC_URL carrying the token as `token=<token>` (CONTRACT.md, E-mail). */
export function tokenLink(publicUrl: string, path: string, token: string): string {
  // Relative to PUBLIC_URL's own path, so a dashboard served under a prefix keeps it.
  const url = new URL(path.replace(/^\/+/, ''), publicUrl.endsWith('/') ? publicUrl : `${publicUrl}/`)
  url.searchParams.set('token', token)
  return url.toString()
}

export function verificationMail(to: string, link: string): Mail {
  return {
    to,
    subject: 'Verify your e-mail address',
    text: `Welcome to jobsvc.\n\nOpen this link within 24 hours to verify your address and create your first project:\n\n${link}\n\nIf you did not sign up, ignore this message.\n`,
  }
}

export function passwordResetMail(to: string, link: string): Mail {
  return {
    to,
    subject: 'Reset your password',
    text: `Someone asked to reset the password of your jobsvc account.\n\nOpen this link within 1 hour to choose a new password:\n\n${link}\n\nIf it was not you, ignore this message; your password is unchanged.\n`,
  }
}

/**
 * Tenant-written text (an alert's or a project's name) as one quoted line: control characters
 * (CR and LF above all, which could start a header of their own), line and paragraph separators
 * and bidirectional overrides become spaces, runs of spaces one, and what is longer than `max` is
 * cut with an ellipsis. The quotes show where the tenant's words begin and end (a double quote
 * inside becomes a single one, so it cannot end them early), so a name cannot pass for the
 * service's own text.
 */
export function quotedLine(text: string, max: number): string {
  const flat = text
    .replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g, ' ')
    .replace(/\s+/g, ' ')
    .replaceAll('"', "'")
    .trim()
  const chars = [...flat]
  return `"${chars.length > max ? `${chars.slice(0, max - 1).join('')}…` : flat}"`
}

/**
 * An invitation goes to any address a project admin types, so the project's name (the tenant's
 * words) stays out of the subject, which a mail client shows as the service speaking; the body
 * names it quoted.
 */
export function inviteMail(to: string, projectName: string, role: string, link: string): Mail {
  return {
    to,
    subject: 'You are invited to join a project on jobsvc',
    text: `You were invited to join the jobsvc project named ${quotedLine(projectName, Number.MAX_SAFE_INTEGER)} as ${role}.\n\nSign in with this address and open this link within 7 days to accept:\n\n${link}\n\nIf you do not know this project, ignore this message.\n`,
  }
}

export function reverificationMail(to: string, link: string): Mail {
  return {
    to,
    subject: 'Confirm your e-mail address',
    text: `Mail to this address was returned or reported, so jobsvc stopped sending to it.\n\nOpen this link within 24 hours to confirm that it receives mail again; e-mails resume at once:\n\n${link}\n\nIf you did not ask for this, ignore this message.\n`,
  }
}

/**
 * `what` happened to the account, as a sentence without its full stop ("Your password was
 * changed"), and where it is known, `detail` from the request (its address and client), which
 * stays out of the subject: a client names itself, so its words must not read as the service's.
 */
export function securityNoticeMail(to: string, what: string, at: string, detail?: string): Mail {
  return {
    to,
    subject: `Security notice: ${what}`,
    text: `${what} on your jobsvc account (${at}).\n${detail === undefined ? '' : `\n${detail}\n`}\nIf this was you, there is nothing more to do. If it was not, reset your password at once, check your two-factor settings and review your account's activity.\n\nSecurity notices cannot be turned off.\n`,
  }
}
