import type { Run } from './index'

export { refusalText } from './index'

/**
 * LangChain.js tools with every call decided by `run` first — on the arguments the tool
 * function receives (after its schema coerced them), through `invoke`, `call` or `func`: a
 * blocked (or hitl) call never runs and answers a `ToolMessage` with `status: "error"` and the
 * refusal text. A tool put into the returned array later is governed too.
 */
export declare function wrapTools<T extends { name: string; invoke: (...args: any[]) => any }>(tools: T[], run: Run): T[]
export declare function wrapTools<T extends { name: string; invoke: (...args: any[]) => any }>(tools: T, run: Run): T

/**
 * A LangChain v1 `createAgent` middleware (package `langchain`) that ends the agent before its
 * next model call once `run` is stopped by a hitl decision (`run.aborted`):
 * `createAgent({ model, tools: wrapTools(tools, run), middleware: [toolgateMiddleware(run)] })`.
 */
export declare function toolgateMiddleware(run: Run): any
