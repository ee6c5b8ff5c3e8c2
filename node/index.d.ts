// Types of the `toolgate` package (hand-written over index.js; the addon's own generated types
// are native.d.ts). The engine is toolgate's Rust crate: these are its camelCase mirror.

/** JSON data: what crosses into the engine (as JSON text). */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue }

/** A policy: a path (file or folder, string or file: URL), a policy document, or a bare array of rules. */
export type PolicySource = string | URL | Record<string, unknown> | unknown[]

/** Where the audit trail goes. */
export interface AuditOptions {
  /** A folder for the JSONL trail (`toolgate verify` checks it). */
  dir?: string | URL
  /** The URL of a collector (`toolgate collect`). */
  collector?: string
  /** The collector's bearer token. */
  token?: string
  /** An Ed25519 PKCS#8 PEM file that signs runs (`toolgate keygen`). */
  signingKey?: string | URL
}

export interface EngineOptions {
  /** A path (file or folder), a policy document, or an array of them. */
  policies: PolicySource | PolicySource[]
  /** `undefined`: no trail | a folder path: JSONL trail | {@link AuditOptions}. */
  audit?: string | URL | AuditOptions
  /** `undefined`: in process | `"redis://host:port/db"` (reviews then live there too). */
  state?: string
  /** `undefined`: in memory (or Redis with `state`) | a review file shared with `toolgate review --store`. */
  reviews?: string | URL
  /** What an internal failure decides: `"closed"` (block, default) or `"open"` (allow). */
  failureMode?: 'closed' | 'open'
  /** An IANA timezone; `undefined`: the policies' own `timezone`. */
  orgTimezone?: string
  /** Past it a signal, subject extractor or custom condition is missing data (default 100). */
  signalTimeoutMs?: number
  /** A {@link ManualClock} for tests and replays. */
  clock?: ManualClock
  /**
   * The price of each model in USD per million tokens, `{"gpt-4o": {in: 2.5, out: 10}}` (a name
   * with `*` is a glob): usage recorded without `costUsd` is priced from it; a model without a
   * price records no cost.
   */
  prices?: Record<string, ModelPrice>
  /** Write each model call's messages (`beforeLlm`) as `llm.messages` audit events (default false). */
  recordMessages?: boolean
}

/** A model's price in USD per million tokens. */
export interface ModelPrice {
  in: number
  out: number
}

/** The usage of one model call (`run.recordLlm`). */
export interface LlmUsageInput {
  tokensIn: number
  tokensOut: number
  /** The cost in USD; absent: from the engine's `prices` for `model`. */
  costUsd?: number
  model?: string
  durationMs?: number
  /** The id of the `beforeLlm` call it belongs to. */
  callId?: string
}

/** The end user of a run: `tags` values that are not strings are kept as their JSON text. */
export interface Enduser {
  id: string
  tags?: Record<string, JsonValue>
}

export interface StartRunOptions {
  agentId: string
  /** Default: a fresh UUID (32 hex digits). */
  runId?: string
  enduser?: Enduser
  /** The agent's tags: a policy's `agentSelector` matches them. */
  agentTags?: string[] | string
}

export interface ToolCallInput {
  name: string
  /** The tool's arguments (JSON data). Default `{}`. */
  args?: unknown
  tags?: string[] | string
  /** Default: `call-1`, `call-2`, … in the run. Well-formed Unicode (a lone surrogate is refused). */
  callId?: string
}

export interface ToolOutcomeInput {
  /** The tool's result (JSON data). */
  output?: unknown
  durationMs?: number
  /** The call failed: its error (an Error is recorded as `Name: message`). */
  error?: string | Error
}

export type Effect = 'allow' | 'block' | 'hitl'

export type DecisionCode =
  | 'ALLOWED'
  | 'ALLOWED_HITL_APPROVED'
  | 'BLOCKED_RULE'
  | 'BLOCKED_HITL_REQUESTED'
  | 'BLOCKED_HITL_PENDING'
  | 'BLOCKED_HITL_DENIED'
  | 'BLOCKED_RUN_ABORTED'
  | 'BLOCKED_FAILURE'

/** One decision of the engine. */
export declare class Decision {
  private constructor()
  readonly callId: string
  readonly phase: 'tool.before' | 'tool.after' | 'llm.before'
  readonly effect: Effect
  readonly code: DecisionCode
  readonly reason: string | null
  readonly ruleId: string | null
  /** Whether the call may proceed. */
  readonly allowed: boolean
  /** The review's id when the effect is hitl (or a review decided this call). */
  readonly reviewId: string | null
  /** Whether the agent must stop the run. */
  readonly abortRun: boolean
  /** The effect a shadow-mode rule would have had. */
  readonly shadowEffect: Effect | null
  /** The internal error behind a failure-mode decision. */
  readonly error: string | null
  /** How long the engine took. */
  readonly latencyNs: number
  /**
   * The whole Rust `Decision` (camelCase keys: `evaluated`, `signals`, `hitl`, …): always for a
   * decision that waited for a callback or Redis, else while its run keeps it (its last 256
   * decisions); older ones give these fields.
   */
  toJSON(): Record<string, any>
}

/** A review, as `toolgate review` shows it. */
export interface Review {
  id: string
  fingerprint: string
  status: 'pending' | 'approved' | 'denied' | 'expired'
  agentId: string
  ruleId: string
  toolName: string
  args: JsonValue
  enduserId?: string
  runId: string
  callId: string
  reason?: string
  createdAt: string
  decidedAt?: string
  expiresAt?: string
}

/** The engine's human reviews (`engine.reviews`). Read and decided off the event loop. */
export declare class Reviews {
  private constructor()
  list(): Promise<Review[]>
  pending(): Promise<Review[]>
  /** Approves a pending review: identical calls are allowed from now on. */
  approve(reviewId: string): Promise<Review>
  /** Denies a pending review: identical calls are blocked from now on. */
  deny(reviewId: string): Promise<Review>
  /** Expires a review: the next identical call asks again. */
  expire(reviewId: string): Promise<Review>
}

/** A clock that moves only when told to (tests, replays). */
export declare class ManualClock {
  constructor(date: Date | string | number)
  set(date: Date | string | number): void
  /** Moves the time by `ms` milliseconds (negative: back). */
  advance(ms: number): void
  now(): Date
}

/** How `run.guard` names a tool's arguments (give at most one of `argNames` and `mapArgs`). */
export interface GuardOptions<A extends unknown[] = unknown[]> {
  /** The tool's name (default: the function's name). */
  name?: string
  tags?: string[] | string
  /** The names of the positional arguments: `['orderId', 'amount']` → `{orderId, amount}`. */
  argNames?: string[]
  /** The tool's args object from the call's arguments. */
  mapArgs?: (...args: A) => Record<string, unknown>
}

/** One agent run. */
export declare class Run {
  private constructor()
  readonly runId: string
  readonly agentId: string
  /** Whether a hitl decision (or a failure) stopped the run. */
  readonly aborted: boolean
  /** The engine that started it. */
  readonly engine: Engine
  /** Decides a tool call (phase `tool.before`). */
  beforeTool(call: ToolCallInput): Promise<Decision>
  beforeTool(name: string, args?: unknown): Promise<Decision>
  /**
   * Records the outcome of an allowed call; the after-phase decision, always (`ALLOWED` when no
   * after-phase rule is in play, or when the run has no allowed call `callId` — unless the
   * run dropped calls past its bound of 10,000 waiting: then by the failure mode).
   */
  afterTool(callId: string, outcome?: ToolOutcomeInput): Promise<Decision>
  /** Ends the run (`run.ended`) and flushes its audit events. */
  end(status?: string, output?: unknown): Promise<void>
  /**
   * Lifts the stop a hitl decision put on the run once its reviews are decided: `true` when the
   * run goes on, `false` (still stopped) while a review it raised or was held by is pending.
   */
  resume(): Promise<boolean>
  /**
   * Decides a model call (phase `llm.before`) before it is made; `messages` is JSON data
   * (usually `[{role, content}]`). Blocked: do not call the model. Hitl: a review was raised.
   */
  beforeLlm(model: string, messages?: unknown, options?: { callId?: string }): Promise<Decision>
  /** Records a model call's usage (the `llm_*` metrics and an `llm.result` event). */
  recordLlm(usage: LlmUsageInput): void
  /** @deprecated the positional form; use `recordLlm({tokensIn, tokensOut, costUsd})`. */
  recordLlm(tokensIn: number, tokensOut: number, costUsd?: number): void
  recordMetric(key: string, value: number): void
  /**
   * Wraps tool function `fn`: each call is decided first, on its arguments named (`argNames`,
   * `mapArgs`, or `fn`'s one argument as the args object; a function of two or more parameters
   * without names is refused); throws {@link BlockedError} / {@link ReviewRequiredError} when
   * refused, a `TypeError` (without running it) for a call whose arguments cannot be named.
   */
  guard<A extends unknown[], R>(fn: (...args: A) => R | PromiseLike<R>, options?: GuardOptions<A>): (...args: A) => Promise<R>
}

/** A signal provider: the rule's resolved bindings in, a JSON value out (sync or async). */
export type SignalFn = (args: Record<string, JsonValue>) => unknown
export interface Subject {
  subjectType: string
  id: string
  idSystem?: string
  role?: string
}
export type SubjectsFn = (toolName: string, args: JsonValue) => Subject[] | PromiseLike<Subject[]>
/** The call a custom condition sees. */
export interface CustomCall {
  toolName: string
  toolTags: string[]
  args: JsonValue
  runId: string
  agentId: string
  agentTags: string[]
  sessionId: string | null
  enduser: { id: string; tags: Record<string, string> } | null
}
export type ConditionFn = (args: JsonValue, call: CustomCall) => boolean | PromiseLike<boolean>

/** The governance engine. */
export declare class Engine {
  constructor(options: EngineOptions)
  constructor(policies: PolicySource | PolicySource[])
  readonly reviews: Reviews
  /** Number of active rules. */
  readonly activeRules: number
  registerSignal(key: string, fn: SignalFn): void
  registerSubjects(toolGlob: string, fn: SubjectsFn): void
  registerCondition(name: string, fn: ConditionFn): void
  startRun(options: StartRunOptions | string): Run
  /** Replaces the policies atomically; throws {@link PolicyError} and keeps the old ones on error. */
  reload(policies: PolicySource | PolicySource[]): void
  flush(): Promise<void>
  /** Flushes the audit trail and shuts its sinks down. */
  shutdown(): Promise<void>
}

/** Base class of every error toolgate throws. */
export declare class ToolgateError extends Error {}
/** A policy did not load. */
export declare class PolicyError extends ToolgateError {
  /** The JSON path of the (first) problem. */
  readonly path: string | null
  /** Its file. */
  readonly file: string | null
}
/** A guarded call was blocked. */
export declare class BlockedError extends ToolgateError {
  constructor(decision: Decision)
  readonly decision: Decision
}
/** A guarded call needs a human's approval (effect hitl). */
export declare class ReviewRequiredError extends BlockedError {
  readonly reviewId: string | null
}

/**
 * The `llm.before` gate blocked a model call: the model was not called and the run ended
 * `budget_exceeded` (what the adapters throw where a framework's turn ends with an error).
 */
export declare class LlmBlockedError extends BlockedError {}

/** `toolgate blocked this call: <reason> [<CODE>, rule <id>]` (+ the review for hitl). */
export declare function refusalText(decision: Decision): string
/** `value` as JSON data; what JSON cannot hold becomes its string. */
export declare function jsonable(value: unknown): JsonValue
/** The native engine's version. */
export declare const version: string
