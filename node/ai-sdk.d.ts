import type { Run, Review } from './index'

export { refusalText } from './index'

/**
 * The AI SDK (v5 / v6) tools `tools` with every call decided by `run` first: a blocked call
 * never runs (the model reads `toolgate blocked this call: …`); hitl is a tool approval request
 * (`needsApproval`, v6) whose answer in the app approves or denies the toolgate review.
 * A tool's toolgate tags may be given as `toolgateTags` on the tool object; a tool added to the
 * returned object later is governed too. A decision binds its call id and exact arguments.
 */
export declare function governTools<T extends Record<string, any>>(tools: T, run: Run, options?: GovernOptions): T

/** The app's answer to a tool approval request, as an `approver` sees it. */
export interface ApprovalContext {
  approvalId: string
  /** What the answer says: approve (`true`) or deny. */
  approved: boolean
  reason?: string
  toolCallId: string
  toolName?: string
  /** The call's input as the messages carry it. */
  input?: unknown
  /** The `tool-approval-response` part. */
  response: Record<string, unknown>
  /** The messages the answer came in. */
  messages: unknown[]
}

export interface GovernOptions {
  /**
   * Whether an answer in the app's messages may decide toolgate review `review` (sync or
   * async). Anything but `true` is a refusal: the review stays pending, the run stopped.
   * Default: every answer in the messages decides it.
   */
  approver?: (review: Review, context: ApprovalContext) => boolean | PromiseLike<boolean>
}

/**
 * Applies the app's answers to tool approval requests in `messages` to the toolgate reviews of
 * `governedTools`: approved → approved, denied → denied (a denial reaches no tool, so this is how
 * it reaches the review at once).
 */
export declare function settleApprovals(governedTools: Record<string, any>, messages: unknown[]): Promise<void>

/** A price table: `{"<model>": {in, out}}`, USD per million input / output tokens (a name may be a glob: `"gpt-4o*"`). */
export type Prices = Record<string, { in: number; out: number }>

export interface ModelMiddlewareOptions {
  /**
   * Prices for the cost of each call (matched like the engine's: the exact name,
   * case-insensitive, else the longest glob). Default: the engine's own `prices`.
   */
  prices?: Prices
}

/**
 * A language-model middleware for `wrapLanguageModel` (AI SDK v6 `LanguageModelV3Middleware`;
 * v5's `wrapLanguageModel` takes it too): each model call is decided by `run`'s `llm.before`
 * rules first (block: the model is not called, the run ends `budget_exceeded` and the call
 * rejects with {@link LlmBlockedError}; hitl: `ReviewRequiredError`, the run stopped), and its
 * usage is recorded after (an `llm.result`: tokens, the model's id, duration, cost).
 */
export declare function toolgateModelMiddleware(run: Run, options?: ModelMiddlewareOptions): {
  specificationVersion: 'v3'
  middlewareVersion: 'v2'
  wrapGenerate: (options: { doGenerate: () => PromiseLike<any>; doStream: () => PromiseLike<any>; params: any; model: any }) => Promise<any>
  wrapStream: (options: { doGenerate: () => PromiseLike<any>; doStream: () => PromiseLike<any>; params: any; model: any }) => Promise<any>
}

/** A `LanguageModelV2/V3Prompt` as the gate's messages: `[{role, kind, content}]`, one per part. */
export declare function promptMessages(prompt: unknown): Array<{ role: string; kind: string; content: unknown }>

export { LlmBlockedError } from './index'
