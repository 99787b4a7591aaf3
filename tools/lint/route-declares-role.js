/**
 * Every route registered under `services/roles/api/routes/` declares the least project role a
 * dashboard session needs (`config: { role }`), so that which role may call a route is read from
 * the route itself (docs/api-notes.md, "Roles per route"). At start `requireDeclaredRoles` refuses such a route
 * too; this says so at the line, before anything runs.
 *
 * A plugin whose routes are not project routes (mounted outside `/jobsvc/v1`: the platform, the
 * health checks, the providers' webhooks) says so with `@noProjectRole` and the reason in the
 * comment above it; its routes are not checked.
 */

const routeMethods = new Set(['get', 'post', 'put', 'patch', 'delete', 'head', 'options', 'all', 'route'])
const roles = new Set(['viewer', 'member', 'admin', 'owner'])
const exemption = '@noProjectRole'

const isFunction = (node) => node !== undefined && (node.type === 'ArrowFunctionExpression' || node.type === 'FunctionExpression')

/** The property `name` of an object literal, or undefined (spreads and computed keys are not followed). */
function propertyOf(object, name) {
  return object.properties.find(
    (p) =>
      p.type === 'Property' &&
      !p.computed &&
      ((p.key.type === 'Identifier' && p.key.name === name) || (p.key.type === 'Literal' && p.key.value === name)),
  )
}

/** Unwraps `x as const` and `x satisfies T`. */
function unwrap(node) {
  let n = node
  while (n && (n.type === 'TSAsExpression' || n.type === 'TSSatisfiesExpression')) n = n.expression
  return n
}

/** The object literal `node` is, or a `const` in scope is initialised with. */
function objectLiteral(node, sourceCode) {
  const n = unwrap(node)
  if (n?.type === 'ObjectExpression') return n
  if (n?.type !== 'Identifier') return null
  for (let scope = sourceCode.getScope(n); scope !== null; scope = scope.upper) {
    const variable = scope.set.get(n.name)
    if (variable === undefined) continue
    const def = variable.defs[0]
    if (def?.type !== 'Variable' || def.parent.kind !== 'const') return null
    const init = unwrap(def.node.init)
    return init?.type === 'ObjectExpression' ? init : null
  }
  return null
}

/** A registration is `x.get(path, options?, handler)`, or `x.route({ method, url, handler })`. */
function routeOptionsOf(call) {
  const callee = call.callee
  if (callee.type !== 'MemberExpression' || callee.computed || callee.property.type !== 'Identifier') return undefined
  const method = callee.property.name
  if (!routeMethods.has(method)) return undefined
  const args = call.arguments
  if (method === 'route') return args.length === 1 && args[0].type === 'ObjectExpression' && propertyOf(args[0], 'url') ? args[0] : undefined
  const handler = args.at(-1)
  if (args.length < 2 || args.length > 3 || !(isFunction(handler) || handler.type === 'Identifier')) return undefined
  return args.length === 3 ? args[1] : null
}

/** @type {import('eslint').Rule.RuleModule} */
export default {
  meta: {
    type: 'problem',
    docs: { description: 'a project route declares its least session role in its options (config.role)' },
    messages: {
      missing:
        '{{what}} declares no project role: give it `config: { role }` in its options object, or mark its plugin `@noProjectRole` with the reason',
      unknown: "'{{role}}' is not a project role (viewer, member, admin, owner)",
    },
    schema: [],
  },
  create(context) {
    const sourceCode = context.sourceCode
    const isExempt = (node) =>
      sourceCode
        .getAncestors(node)
        .some(
          (a) =>
            ['FunctionDeclaration', 'VariableDeclaration', 'ExportNamedDeclaration'].includes(a.type) &&
            sourceCode.getCommentsBefore(a).some((c) => c.value.includes(exemption)),
        )

    return {
      CallExpression(call) {
        const options = routeOptionsOf(call)
        if (options === undefined || isExempt(call)) return
        const method = call.callee.property.name
        const path = method === 'route' ? propertyOf(call.arguments[0], 'url').value : call.arguments[0]
        const what = `${method.toUpperCase()} ${sourceCode.getText(path).slice(0, 60)}`
        const literal = options === null ? null : objectLiteral(options, sourceCode)
        const config = literal === null ? undefined : propertyOf(literal, 'config')
        const configObject = config === undefined ? null : objectLiteral(config.value, sourceCode)
        const role = configObject === null ? undefined : propertyOf(configObject, 'role')
        if (role === undefined) return context.report({ node: options ?? call, messageId: 'missing', data: { what } })
        const value = unwrap(role.value)
        if (value.type === 'Literal' && !roles.has(value.value))
          context.report({ node: role, messageId: 'unknown', data: { role: String(value.value) } })
      },
    }
  },
}
