/**
 * The spec's error table (api-spec.md, "Errors", "Codes by status"): its codes by status, in its
 * order. The spec lives beside the repository, not in it, so a fresh clone checks the error
 * reference against this copy; change it when the spec's table changes.
 */
const codesByStatus: Record<number, readonly string[]> = {
  400: [
    'invalid_request',
    'invalid_idempotency_key',
    'invalid_cron_expression',
    'invalid_timezone',
    'invalid_locale',
    'invalid_limit',
    'invalid_format',
    'invalid_from',
    'invalid_until',
    'invalid_range',
    'range_too_large',
    'invalid_verification_token',
    'invalid_reset_token',
    'confirm_required',
    'missing_signature',
    'invalid_signature',
    'security_notices_required',
    'display_name_too_long',
    'validation_error',
    'invalid_totp_code',
    'totp_not_initialized',
  ],
  401: ['unauthorized', 'invalid_credentials', 'invalid_totp_code'],
  402: ['billing_state_blocked'],
  403: ['forbidden', 'email_not_verified', 'totp_required', 'account_suspended', 'cannot_modify_owner', 'cannot_remove_owner', 'role_exceeds_caller'],
  404: [
    'job_not_found',
    'recurring_job_not_found',
    'project_not_found',
    'account_not_found',
    'alert_not_found',
    'member_not_found',
    'user_not_found',
    'webhook_not_found',
  ],
  409: [
    'idempotency_key_reuse',
    'invalid_state',
    'parent_terminal',
    'worker_mismatch',
    'recurring_job_type_conflict',
    'last_project',
    'key_revoked',
    'already_revoked',
    'email_already_registered',
    'totp_already_enabled',
    'totp_not_enabled',
  ],
  422: ['parent_not_found', 'invalid_role', 'invalid_email', 'invalid_token'],
  429: ['rate_limit_exceeded', 'monthly_allowance_exceeded', 'spend_cap_reached', 'account_locked'],
  500: ['internal_error'],
  503: ['service_unavailable', 'billing_disabled', 'stripe_unavailable'],
}

export const specErrorCodes: ReadonlyArray<{ status: number; code: string }> = Object.entries(codesByStatus).flatMap(([status, codes]) =>
  codes.map((code) => ({ status: Number(status), code })),
)
