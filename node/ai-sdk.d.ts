import type { Run } from './index'

export { refusalText } from './index'

/**
 * The AI SDK (v5 / v6) tools `tools` with every call decided by `run` first: a blocked call
 * never runs (the model reads `toolgate blocked this call: …`); hitl is a tool approval request
 * (`needsApproval`, v6) whose answer in the app approves or denies the toolgate review.
 * A tool's toolgate tags may be given as `toolgateTags` on the tool object.
 */
export declare function governTools<T extends Record<string, any>>(tools: T, run: Run): T

/**
 * Applies the app's answers to tool approval requests in `messages` to the toolgate reviews of
 * `governedTools`: approved → approved, denied → denied (a denial reaches no tool, so this is how
 * it reaches the review at once).
 */
export declare function settleApprovals(governedTools: Record<string, any>, messages: unknown[]): Promise<void>
