import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatTime, hasRoleAtLeast } from '../format.js'
import { ErrorNotice, Facts, html, ListStatus, useLoad, useSubmit } from '../ui.js'
import { Field } from './account.js'

const plans = ['free', 'starter', 'pro', 'business', 'enterprise']

const number = new Intl.NumberFormat()
const money = new Intl.NumberFormat(undefined, { style: 'currency', currency: 'USD' })
const dollars = (cents) => (cents === null || cents === undefined ? '—' : money.format(cents / 100))

function Usage({ billing }) {
  const share = billing.allowance > 0 ? Math.min(1, billing.used / billing.allowance) : 1
  return html`<h2>This period</h2>
    <p class="muted small">${formatTime(billing.period_start)} to ${formatTime(billing.period_end)}</p>
    <label class="usage"
      >Jobs used: <strong data-used>${number.format(billing.used)}</strong> of ${number.format(billing.allowance)}
      <progress max="1" value=${share}>${Math.round(share * 100)}%</progress></label
    >
    <${Facts}
      className="stats"
      items=${[
        ['Overage', `${number.format(billing.overage)} jobs`],
        ['Overage cost', dollars(billing.overage_cost_cents)],
        ['Rate', billing.overage_cents_per_10k === null ? '—' : `${dollars(billing.overage_cents_per_10k)} / 10,000`],
        ['Requests per hour', number.format(billing.requests_per_hour)],
      ]}
    />`
}

function Settings({ project, billing, onSaved }) {
  const [draft, setDraft] = useState({
    plan: billing.plan,
    overage_enabled: billing.overage_enabled,
    spend_cap: billing.spend_cap_cents === null ? '' : String(billing.spend_cap_cents / 100),
  })
  const isOwner = project.role === 'owner'
  const save = useSubmit(async () => {
    const body = {
      overage_enabled: draft.overage_enabled,
      spend_cap_cents: draft.spend_cap === '' ? null : Math.round(Number(draft.spend_cap) * 100),
    }
    if (isOwner && draft.plan !== billing.plan) body.plan = draft.plan
    onSaved(await call('PATCH', `/platform/v1/projects/${project.id}/billing`, { body }))
  })
  return html`<form onSubmit=${save.submit} aria-labelledby="billing-settings-title" class="panel">
    <h2 id="billing-settings-title">Plan and limits</h2>
    ${
      isOwner
        ? html`<label class="field"
            ><span>Plan</span>
            <select name="plan" value=${draft.plan} onChange=${(e) => setDraft({ ...draft, plan: e.target.value })}>
              ${plans.map((p) => html`<option value=${p}>${p}</option>`)}
            </select>
          </label>`
        : html`<p class="muted small">Only the owner changes the plan.</p>`
    }
    <label class="check"
      ><input
        type="checkbox"
        name="overage_enabled"
        checked=${draft.overage_enabled}
        disabled=${!billing.overage_available}
        onChange=${(e) => setDraft({ ...draft, overage_enabled: e.target.checked })}
      />
      Allow overage past the allowance ${billing.overage_available ? null : html`<span class="muted small">(not on this plan)</span>`}</label
    >
    <${Field}
      label="Spend cap in dollars (empty: none)"
      type="number"
      name="spend_cap"
      min="0"
      step="0.01"
      value=${draft.spend_cap}
      onValue=${(value) => setDraft({ ...draft, spend_cap: value })}
    />
    <${ErrorNotice} error=${save.error} />
    <button type="submit" disabled=${save.busy}>Save</button>
  </form>`
}

export function BillingPage({ project }) {
  const { data, error, loading } = useLoad(() => call('GET', `/platform/v1/projects/${project.id}/billing`), [project.id])
  const [saved, setSaved] = useState(null)
  const billing = saved ?? data
  const mayChange = hasRoleAtLeast(project.role, 'admin')
  return html`<section aria-labelledby="billing-title">
    <h1 id="billing-title">Billing</h1>
    <${ListStatus} error=${error} loading=${loading} rows=${billing ? [billing] : null} what="Loading billing" />
    ${
      billing
        ? html`<${Facts}
              items=${[
                ['Plan', html`<span data-plan>${billing.plan}</span>`],
                ['Billing state', billing.billing_state],
                ['Overage', billing.overage_enabled ? 'allowed' : 'off'],
                ['Spend cap', billing.spend_cap_cents === null ? 'none' : dollars(billing.spend_cap_cents)],
              ]}
            />
            ${billing.billing_state !== 'active' ? html`<p class="notice">Job creation is paused while the billing state is ${billing.billing_state}.</p>` : null}
            <${Usage} billing=${billing} />
            ${
              mayChange
                ? html`<${Settings} key=${billing.plan} project=${project} billing=${billing} onSaved=${setSaved} />`
                : html`<p class="muted">Changing the plan, overage and spend cap needs the role admin (owner for the plan).</p>`
            }`
        : null
    }
  </section>`
}
