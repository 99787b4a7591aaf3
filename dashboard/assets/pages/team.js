import { useState } from 'preact/hooks'
import { call } from '../api.js'
import { formatTime, hasRoleAtLeast } from '../format.js'
import { DeleteCell, ErrorNotice, html, ListStatus, navigate, Table, useLoad, useSubmit } from '../ui.js'
import { Field } from './account.js'

const grantable = ['admin', 'member', 'viewer']

/** Below the owner, nobody grants, changes or removes a role at or above their own (the service refuses it too). */
const mayManageRole = (callerRole, role) => role !== 'owner' && (callerRole === 'owner' || (callerRole === 'admin' && !hasRoleAtLeast(role, 'admin')))

const rolesFor = (callerRole) => grantable.filter((role) => mayManageRole(callerRole, role))

function InviteForm({ project, onInvited }) {
  const [email, setEmail] = useState('')
  const [role, setRole] = useState('member')
  const [sentTo, setSentTo] = useState(null)
  const invite = useSubmit(async () => {
    await call('POST', `/platform/v1/projects/${project.id}/members`, { body: { email, role } })
    setSentTo(email)
    setEmail('')
    onInvited()
  })
  return html`<form onSubmit=${invite.submit} aria-labelledby="invite-title" class="panel">
    <h2 id="invite-title">Invite someone</h2>
    <${Field} label="E-mail" type="email" name="invite_email" autocomplete="off" required value=${email} onValue=${setEmail} />
    <label class="field"
      ><span>Role</span>
      <select name="role" value=${role} onChange=${(e) => setRole(e.target.value)}>
        ${rolesFor(project.role).map((r) => html`<option value=${r}>${r}</option>`)}
      </select>
    </label>
    <${ErrorNotice} error=${invite.error} />
    ${sentTo ? html`<p role="status">Invitation sent to ${sentTo}; the link works for 7 days.</p>` : null}
    <button type="submit" disabled=${invite.busy}>Send the invitation</button>
  </form>`
}

export function TeamPage({ project, me, onProjectChanged }) {
  const path = `/platform/v1/projects/${project.id}/members`
  const { data, error, loading, reload } = useLoad(() => call('GET', path), [project.id])
  const mayManage = hasRoleAtLeast(project.role, 'admin')
  const isSelf = (member) => member.user_id === me.user_id
  const change = useSubmit(async ({ userId, role }) => {
    await call('PATCH', `${path}/${encodeURIComponent(userId)}`, { body: { role } })
    reload()
  })
  const remove = useSubmit(async (userId) => {
    await call('DELETE', `${path}/${encodeURIComponent(userId)}`)
    if (userId !== me.user_id) return reload()
    await onProjectChanged()
    navigate('/')
  })
  return html`<section aria-labelledby="team-title">
    <h1 id="team-title">Team</h1>
    <p>Viewers read; members also create, cancel and retry jobs; admins manage keys, webhooks and the team; the owner also the plan.</p>
    <${ListStatus} error=${error ?? change.error ?? remove.error} loading=${loading} rows=${data?.members} what="Loading the team" />
    ${
      data
        ? html`<${Table} className="members" busy=${loading} columns=${['Member', 'Role', 'Joined', '']}>
            ${data.members.map(
              (m) =>
                html`<tr data-member=${m.email}>
                  <td>${m.email}${m.user_id === me.user_id ? html` <span class="muted small">(you)</span>` : null}</td>
                  <td>
                    ${
                      mayManage && mayManageRole(project.role, m.role) && m.user_id !== me.user_id
                        ? html`<label
                            ><span class="visually-hidden">Role of ${m.email}</span>
                            <select
                              value=${m.role}
                              disabled=${change.busy}
                              onChange=${(e) => change.submit({ userId: m.user_id, role: e.target.value })}
                            >
                              ${rolesFor(project.role).map((r) => html`<option value=${r}>${r}</option>`)}
                            </select></label
                          >`
                        : m.role
                    }
                  </td>
                  <td>${formatTime(m.joined_at)}</td>
                  <${DeleteCell}
                    allowed=${isSelf(m) ? m.role !== 'owner' : mayManage && mayManageRole(project.role, m.role)}
                    text=${isSelf(m) ? 'Leave' : 'Remove'}
                    label=${isSelf(m) ? 'Leave the project' : `Remove ${m.email}`}
                    action=${remove}
                    id=${m.user_id}
                  />
                </tr>`,
            )}
          </${Table}>`
        : null
    }
    ${
      data && data.invites && data.invites.length > 0
        ? html`<h2>Pending invitations</h2>
            <${Table} className="invites" columns=${['E-mail', 'Role', 'Invited', 'Expires']}>
              ${data.invites.map(
                (i) =>
                  html`<tr>
                    <td>${i.email}</td>
                    <td>${i.role}</td>
                    <td>${formatTime(i.invited_at)}</td>
                    <td>${formatTime(i.expires_at)}</td>
                  </tr>`,
              )}
            </${Table}>`
        : null
    }
    ${mayManage ? html`<${InviteForm} project=${project} onInvited=${reload} />` : html`<p class="muted">Managing the team needs the role admin or owner.</p>`}
  </section>`
}
