/**
 * Issue 24, item 3: the layers above streams/ load and decide through each aggregate's typed
 * handler (streams/aggregates.ts), never through the raw primitives, whose state type is
 * whatever the caller writes (`store.load<Job>(projectRef(id))` compiled). Reports:
 *
 * - an import of streams/handle-command.ts (decide with `<aggregate>Handler.decide`);
 * - a read of the event store given a state or event type (`x.load<S>(...)`, `lastOf`, `nextOf`,
 *   `messageAt`, `history`): use `<aggregate>Handler.load(store, ref)` and its siblings;
 * - unless `{ storeCalls: false }`, any such read or an append on something named `store`
 *   (`deps.store.load(ref)`), typed or not;
 * - unless `{ eventIds: false }`, a template literal starting `evt_` with a substitution: event
 *   ids are made in one place, streams/aggregate-handler.ts.
 *
 * streams/ itself is outside the rule's files (eslint.config.js), and so is test/streams/, which
 * tests the primitives. Other tests may append raw messages and read them back untyped (the
 * options), but not state a type the log does not check.
 */

const readers = new Set(['load', 'lastOf', 'nextOf', 'messageAt', 'history'])
const storeCalls = new Set([...readers, 'append'])

function propertyName(member) {
  if (member.computed) return member.property.type === 'Literal' ? String(member.property.value) : null
  return member.property.type === 'Identifier' ? member.property.name : null
}

function isNamedStore(node) {
  if (node.type === 'Identifier') return node.name === 'store'
  if (node.type === 'MemberExpression') return propertyName(node) === 'store'
  return false
}

/** @type {import('eslint').Rule.RuleModule} */
export default {
  meta: {
    type: 'problem',
    docs: { description: "load and decide through each aggregate's typed handler (streams/aggregates.ts)" },
    schema: [{ type: 'object', properties: { eventIds: { type: 'boolean' }, storeCalls: { type: 'boolean' } }, additionalProperties: false }],
    messages: {
      handleCommand: "decide through the aggregate's handler (`jobHandler.decide(deps, ref, command)`, streams/aggregates.ts), not handleCommand",
      typedRead:
        "`{{name}}<...>` states a type the log does not check: use the aggregate's handler (`projectHandler.{{name}}`...), streams/aggregates.ts",
      storeCall: 'read and write an aggregate through its handler (`projectHandler.load(deps.store, projectHandler.ref(id))`), streams/aggregates.ts',
      eventId: 'event ids are made in one place (streams/aggregate-handler.ts): decide through the aggregate handler',
    },
  },
  create(context) {
    const checkEventIds = context.options[0]?.eventIds !== false
    const checkStoreCalls = context.options[0]?.storeCalls !== false
    return {
      ImportDeclaration(node) {
        if (/(^|\/)handle-command(\.[jt]s)?$/.test(String(node.source.value))) context.report({ node, messageId: 'handleCommand' })
      },
      CallExpression(node) {
        const callee = node.callee
        if (callee.type !== 'MemberExpression') return
        const name = propertyName(callee)
        if (name === null) return
        const typeArguments = node.typeArguments ?? node.typeParameters
        if (readers.has(name) && typeArguments !== undefined && typeArguments !== null) {
          context.report({ node, messageId: 'typedRead', data: { name } })
        } else if (checkStoreCalls && storeCalls.has(name) && isNamedStore(callee.object)) {
          context.report({ node, messageId: 'storeCall' })
        }
      },
      TemplateLiteral(node) {
        if (checkEventIds && node.expressions.length > 0 && node.quasis[0].value.cooked.endsWith('evt_'))
          context.report({ node, messageId: 'eventId' })
      },
    }
  },
}
