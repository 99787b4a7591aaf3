// Entry of the background-roles thread (see role-thread.ts). Worker threads do not inherit the
// main thread's TypeScript loader (tsx), so this plain module registers it first.
import { register } from 'tsx/esm/api'

register()
await import('./role-thread.ts')
