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
