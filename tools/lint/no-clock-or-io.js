/**
 * A module that is pure bookkeeping: the time arrives as a parameter, and timers and I/O belong
 * to its callers. Flagged: timers (`setTimeout`, `setInterval`, `setImmediate`, `queueMicrotask`),
 * reading a clock (`Date.now()`, `new Date()` without arguments, `performance.now()`), and value
 * imports of what does I/O (Node's modules, NATS, Postgres, our `streams/`, `projections/` and
 * `services/infrastructure/`); type imports stay allowed. The ready index's lanes are held to it,
 * so that their unit tests need no server and no clock (test/jobs/ready-index-lanes.test.ts).
 */

const timers = new Set(['setTimeout', 'setInterval', 'setImmediate', 'queueMicrotask'])
const ioModules = [
  /^node:/,
  /^(fs|net|http|https|crypto|timers)(\/|$)/,
  /^@nats-io\//,
  /^postgres$/,
  /^pino$/,
  /(^|\/)(streams|projections|infrastructure)\//,
]

/** The global `name` refers to at `node`, unless a local declaration shadows it. */
function isGlobal(sourceCode, node, name) {
  for (let scope = sourceCode.getScope(node); scope !== null; scope = scope.upper) {
    const variable = scope.set.get(name)
    if (variable !== undefined) return variable.defs.length === 0
  }
  return true
}

/** @type {import('eslint').Rule.RuleModule} */
export default {
  meta: {
    type: 'problem',
    docs: { description: 'no timers, no clock readings and no I/O imports in a pure module: time is passed in' },
    schema: [],
    messages: {
      timer: '`{{name}}` sets a timer: a pure module leaves timers to its callers',
      clock: '`{{what}}` reads the clock: pass the time in',
      io: "'{{source}}' does I/O: a pure module imports only its types",
    },
  },
  create(context) {
    const sourceCode = context.sourceCode
    const isTypeOnly = (node) =>
      node.importKind === 'type' ||
      (node.specifiers.length > 0 && node.specifiers.every((s) => s.type === 'ImportSpecifier' && s.importKind === 'type'))
    return {
      ImportDeclaration(node) {
        const source = String(node.source.value)
        if (!isTypeOnly(node) && ioModules.some((re) => re.test(source))) context.report({ node, messageId: 'io', data: { source } })
      },
      CallExpression(node) {
        const callee = node.callee
        if (callee.type === 'Identifier' && timers.has(callee.name) && isGlobal(sourceCode, node, callee.name)) {
          context.report({ node, messageId: 'timer', data: { name: callee.name } })
        }
        if (
          callee.type === 'MemberExpression' &&
          !callee.computed &&
          callee.object.type === 'Identifier' &&
          callee.property.name === 'now' &&
          (callee.object.name === 'Date' || callee.object.name === 'performance') &&
          isGlobal(sourceCode, node, callee.object.name)
        ) {
          context.report({ node, messageId: 'clock', data: { what: `${callee.object.name}.now()` } })
        }
      },
      NewExpression(node) {
        if (node.callee.type === 'Identifier' && node.callee.name === 'Date' && node.arguments.length === 0) {
          context.report({ node, messageId: 'clock', data: { what: 'new Date()' } })
        }
      },
    }
  },
}
