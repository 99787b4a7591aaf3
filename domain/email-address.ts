/**
 * The shape of an e-mail address the service accepts, wherever one arrives (sign-up, invites,
 * alert recipients, the CLI). Shape only: whether it exists is for the mail relay to say.
 */

/** RFC 5321's path limit; the spec's bound on every e-mail field. */
export const maxEmailLength = 320

const atom = '[^\\s@<>()[\\]\\\\,;:"]'
const label = '[^\\s@<>()[\\]\\\\,;:".]'
/**
 * A local part, `@`, then two or more dot-separated labels. Linear on any input: the local part
 * cannot hold `@` and no label can hold `.`, so each character has exactly one place in a match
 * and a failed match never retries a split (the earlier pattern let dots fall in either of two
 * runs and took quadratic time on `a@....,`).
 */
const emailPattern = new RegExp(`^${atom}+@(?:${label}+\\.)+${label}+$`)

export function isEmailAddress(value: string): boolean {
  return value.length <= maxEmailLength && emailPattern.test(value)
}
