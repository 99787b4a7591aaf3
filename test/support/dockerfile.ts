/** `key=value` at its first separator (a value may hold the separator itself). */
function splitOnce(text: string, separator: string): [string, string] {
  const at = text.indexOf(separator)
  return at < 0 ? [text, ''] : [text.slice(0, at), text.slice(at + separator.length)]
}

/** One instruction of a Dockerfile: its keyword (upper case) and the rest of the line, continuations joined. */
export interface Instruction {
  keyword: string
  args: string
}

/** A build stage: `FROM <base> AS <name>` and the instructions up to the next FROM. */
export interface Stage {
  base: string
  name: string
  instructions: Instruction[]
}

/**
 * The stages of a Dockerfile, for the subset this repository writes: `#` comment lines (parser
 * directives among them), instructions continued with a trailing backslash, and ARGs before the
 * first FROM, whose defaults are substituted into FROM lines (`${NAME}`), as docker does.
 */
export function parseDockerfile(text: string): { args: Record<string, string>; stages: Stage[] } {
  const lines = text.split('\n').filter((line) => !/^\s*#/.test(line))
  const logical: string[] = []
  let pending = ''
  for (const line of lines) {
    if (/\\\s*$/.test(line)) {
      pending += line.replace(/\\\s*$/, ' ')
      continue
    }
    const whole = (pending + line).trim()
    pending = ''
    if (whole !== '') logical.push(whole.replace(/\s+/g, ' '))
  }
  const args: Record<string, string> = {}
  const stages: Stage[] = []
  for (const line of logical) {
    const [, keyword = '', rest = ''] = /^(\S+)\s*(.*)$/.exec(line)!
    const instruction = { keyword: keyword.toUpperCase(), args: rest }
    if (instruction.keyword === 'FROM') {
      const [, base = '', name] = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(rest) ?? []
      const resolved = base.replace(/\$\{(\w+)\}/g, (_, arg: string) => args[arg] ?? '')
      stages.push({ base: resolved, name: name ?? String(stages.length), instructions: [] })
    } else if (stages.length === 0) {
      if (instruction.keyword !== 'ARG') throw new Error(`only ARG may come before the first FROM: ${line}`)
      const [name, value] = splitOnce(rest, '=')
      args[name] = value
    } else {
      stages.at(-1)!.instructions.push(instruction)
    }
  }
  return { args, stages }
}

/** The instructions of a stage with one keyword. */
export function instructionsOf(stage: Stage, keyword: string): Instruction[] {
  return stage.instructions.filter((i) => i.keyword === keyword)
}

/** A COPY's options (`--from`, `--chown`), sources and destination (the shell form, which this repository writes). */
export function parseCopy(args: string): { options: Record<string, string>; sources: string[]; destination: string } {
  if (args.startsWith('[')) throw new Error(`COPY in its JSON form is not read here: ${args}`)
  const words = args.split(' ')
  const options = Object.fromEntries(words.filter((w) => w.startsWith('--')).map((w) => splitOnce(w.slice(2), '=')))
  const paths = words.filter((w) => !w.startsWith('--'))
  return { options, sources: paths.slice(0, -1), destination: paths.at(-1)! }
}

/** The exec form (a JSON array) of CMD, ENTRYPOINT or a HEALTHCHECK's CMD, and the HEALTHCHECK's options. */
export function parseExecForm(args: string): { options: Record<string, string>; argv: string[] } {
  const [, flags = '', json = ''] = /^((?:--\S+\s+)*)(?:CMD\s+)?(\[.*\])$/.exec(args) ?? []
  if (json === '') throw new Error(`not the exec (JSON) form: ${args}`)
  const options = Object.fromEntries(
    flags
      .trim()
      .split(' ')
      .filter(Boolean)
      .map((w) => splitOnce(w.slice(2), '=')),
  )
  return { options, argv: JSON.parse(json) as string[] }
}

/** ENV instructions as one record (the `KEY=value` form, several to a line). */
export function envOf(stage: Stage): Record<string, string> {
  return Object.fromEntries(instructionsOf(stage, 'ENV').flatMap((i) => i.args.split(' ').map((pair) => splitOnce(pair, '='))))
}
