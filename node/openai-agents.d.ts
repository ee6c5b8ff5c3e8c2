import type { Engine, Enduser, Review } from './index'
import type { Prices } from './ai-sdk'

export { refusalText, LlmBlockedError } from './index'

export interface GovernOptions {
  /** The toolgate agent id (default: the agent's name). */
  agentId?: string
  enduser?: Enduser
  /** The agent's tags (a policy's `agentSelector` matches them). */
  agentTags?: string[] | string
  /** Prices for the cost of each model call (default: the engine's own `prices`). */
  prices?: Prices
  /**
   * Whether an SDK answer (`state.approve` / `state.reject` of an interruption) may decide toolgate
   * review `review`; anything but `true` leaves the review pending. Default: whoever answers.
   */
  approver?: (review: Review, runContext: unknown) => boolean | PromiseLike<boolean>
  /** Resolves a model the agent names by a string (default: the SDK's OpenAI provider). */
  modelProvider?: { getModel(name?: string): unknown }
}

/**
 * A governed copy of an OpenAI Agents JS `Agent` (`agent.clone`): one toolgate run per SDK run;
 * function tools decided first (block → the model reads the refusal text; hitl → an approval
 * interruption whose answer through the SDK's `RunState` decides the review); every model call
 * gated by the `llm.before` rules (block → `run()` rejects with `LlmBlockedError`, the run ends
 * `budget_exceeded`; hitl → `ReviewRequiredError`) and its usage recorded.
 */
export declare function govern<A extends { clone(config: Record<string, unknown>): A }>(agent: A, engine: Engine, options?: GovernOptions): A

/** A `ModelRequest`'s instructions and input as the gate's messages. */
export declare function requestMessages(request: unknown): Array<{ role: string; kind: string; content: unknown }>

/**
 * Resolves once the runs `governed` has ended (at the SDK's `agent_end`, in a listener that
 * cannot be awaited) are written: await it before `engine.shutdown()`.
 */
export declare function settled(governed: object): Promise<void>
