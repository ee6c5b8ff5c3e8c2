import type { Engine, Enduser, Review } from './index'
import type { Prices } from './ai-sdk'

export { refusalText, LlmBlockedError } from './index'

/** What an `approver` sees of the answer resuming a suspended call. */
export interface MastraApprovalContext {
  runId: string
  toolCallId: string
  toolName: string
  args: unknown
  /** What the answer says (`resumeData.approved === true`). */
  approved: boolean
  resumeData: unknown
}

export interface GovernOptions {
  /** The toolgate agent id (default: the agent's id). */
  agentId?: string
  enduser?: Enduser
  agentTags?: string[] | string
  /** Prices for the cost of each model call (default: the engine's own `prices`). */
  prices?: Prices
  /**
   * Whether the answer resuming a suspended call may decide toolgate review `review`; anything
   * but `true` leaves it pending (the call is suspended again). Default: whoever resumes.
   */
  approver?: (review: Review, context: MastraApprovalContext) => boolean | PromiseLike<boolean>
}

/**
 * A governed copy of a Mastra `Agent` (a new `Agent` of the same class over the original's
 * instructions, model, tools, memory, workflows, scorers, processors and default options): one
 * toolgate run per Mastra run (`runId`); tools decided first (block → the model reads the
 * refusal text; hitl → the tool suspends with `{toolgate: {reviewId, code, reason, ruleId,
 * text}}`, and `resumeStream({approved}, {runId, toolCallId})` decides the review); every model
 * call gated by the `llm.before` rules (block → `LlmBlockedError`, the run ends
 * `budget_exceeded`; hitl → `ReviewRequiredError`) and its usage recorded.
 */
export declare function govern<A extends { generate: (...args: any[]) => any }>(agent: A, engine: Engine, options?: GovernOptions): A
