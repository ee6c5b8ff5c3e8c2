import type { Run } from './index'

export { refusalText } from './index'

/**
 * LangChain.js tools with every call decided by `run` first: a blocked (or hitl) call never
 * runs and answers a `ToolMessage` with `status: "error"` and the refusal text.
 */
export declare function wrapTools<T extends { name: string; invoke: (...args: any[]) => any }>(tools: T[], run: Run): T[]
export declare function wrapTools<T extends { name: string; invoke: (...args: any[]) => any }>(tools: T, run: Run): T
