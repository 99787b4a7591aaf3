import { EventBeforeCreation, type CommandMeta, type Decider } from './decider.ts'
import { EmailAlreadyRegistered } from './errors.ts'

/**
 * One aggregate per e-mail address (its id is a digest of the normalised address): it makes
 * "one user per address" an append with an expected sequence instead of a unique index in a
 * read model, so two concurrent sign-ups cannot both win, and finding a user by address is one
 * direct get.
 */

export interface EmailClaim {
  user_id: string | null
  claimed_at: string | null
}

export type EmailClaimAggregate = EmailClaim | null

export type EmailClaimEvent =
  | { type: 'email_claimed'; data: { user_id: string; claimed_at: string } }
  | { type: 'email_released'; data: { user_id: string; released_at: string } }

export type EmailClaimCommand =
  | {
      type: 'claim_email'
      /**
       * A holder the edge found gone (its user never written, or deleted). Naming the holder, not
       * a flag, keeps a re-decision after a conflict from taking a claim someone else just made.
       */
      data: { user_id: string; gone_holder: string | null }
      meta: CommandMeta
    }
  | { type: 'release_email'; data: { user_id: string }; meta: CommandMeta }

function decide(command: EmailClaimCommand, state: EmailClaimAggregate): EmailClaimEvent[] {
  const holder = state?.user_id ?? null
  switch (command.type) {
    case 'claim_email':
      if (holder === command.data.user_id) return []
      if (holder !== null && holder !== command.data.gone_holder) throw new EmailAlreadyRegistered('this e-mail address is already registered')
      return [{ type: 'email_claimed', data: { user_id: command.data.user_id, claimed_at: command.meta.now } }]
    case 'release_email':
      // Only the holder may release: a late release by an earlier holder must not free a new claim.
      return holder === command.data.user_id ? [{ type: 'email_released', data: { user_id: holder, released_at: command.meta.now } }] : []
  }
}

function evolve(state: EmailClaimAggregate, event: EmailClaimEvent): EmailClaimAggregate {
  if (event.type === 'email_claimed') return { user_id: event.data.user_id, claimed_at: event.data.claimed_at }
  if (state === null) throw new EventBeforeCreation(event.type, 'email_claimed')
  return { user_id: null, claimed_at: null }
}

export const emailRegistryDecider: Decider<EmailClaimCommand, EmailClaimEvent, EmailClaimAggregate> = {
  initialState: null,
  decide,
  evolve,
}
