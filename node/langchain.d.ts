import type { Run } from './index'
import type { Prices } from './ai-sdk'

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
 * A LangChain v1 `createAgent` middleware (package `langchain`) for `run`'s model side and stops:
 * each model call is decided by the `llm.before` rules first (block: the model is not called,
 * the agent ends with an `AIMessage` carrying the refusal text and the run ends
 * `budget_exceeded`; hitl: the same naming the review, the run stopped) and its usage
 * (`usage_metadata`) recorded after; the agent ends before its next model call once a hitl
 * stopped the run (`run.aborted`):
 * `createAgent({ model, tools: wrapTools(tools, run), middleware: [toolgateMiddleware(run)] })`.
 */
export declare function toolgateMiddleware(run: Run, options?: { prices?: Prices }): any
