// Compiled with `tsc --noEmit -p test/types` (types.test.mjs): the typings of index.d.ts,
// ai-sdk.d.ts and langchain.d.ts against the way the README uses them.
import { generateText, stepCountIs, tool, wrapLanguageModel } from 'ai'
import { MockLanguageModelV3 } from 'ai/test'
import { z } from 'zod'
import { tool as lcTool } from '@langchain/core/tools'
import {
  Engine,
  ManualClock,
  Decision,
  BlockedError,
  ReviewRequiredError,
  PolicyError,
  ToolgateError,
  LlmBlockedError,
  refusalText,
  type Review,
} from 'toolgate'
import { governTools, settleApprovals, toolgateModelMiddleware } from 'toolgate/ai-sdk'
import { govern as governOpenAI } from 'toolgate/openai-agents'
import { govern as governMastra } from 'toolgate/mastra'
import { Agent as OpenAIAgent } from '@openai/agents'
import { Agent as MastraAgent } from '@mastra/core/agent'
import { wrapTools, toolgateMiddleware } from 'toolgate/langchain'

async function main(): Promise<void> {
  const clock = new ManualClock(new Date())
  clock.advance(1000)
  const engine = new Engine({ policies: 'policies/customer-support.json', audit: { dir: 'trail' }, clock, failureMode: 'open' })
  engine.registerSignal('crm.isVip', async ({ customerId }) => customerId === 'x')
  engine.registerSubjects('get*', (toolName, args) => [{ subjectType: 'customer', id: toolName }])
  engine.registerCondition('fraud', (args, call) => call.toolName === 'refund' && args !== null)
  const run = engine.startRun({ agentId: 'bot', enduser: { id: 'u', tags: { tier: 'gold' } }, agentTags: ['prod'] })
  const d: Decision = await run.beforeTool({ name: 'refund', args: { amount: 1 }, tags: ['payments'] })
  const gate: Decision = await run.beforeLlm('gpt-4o', [{ role: 'user', content: 'hi' }], { callId: 'l1' })
  if (gate.phase === 'llm.before' && gate.allowed) {
    run.recordLlm({ tokensIn: 10, tokensOut: 2, model: 'gpt-4o', durationMs: 120, callId: 'l1' })
  }
  run.recordLlm(10, 2, 0.001)
  const priced = new Engine({ policies: 'p.json', prices: { 'gpt-4o': { in: 2.5, out: 10 } }, recordMessages: true })
  void priced
  const effect: 'allow' | 'block' | 'hitl' = d.effect
  const after: Decision = await run.afterTool(d.callId, { output: { ok: true }, durationMs: 3 })
  const allowedAfter: boolean = after.allowed
  const resumed: boolean = await run.resume()
  const refund = run.guard(async (orderId: string, amount: number) => amount, { name: 'refund', argNames: ['orderId', 'amount'] })
  const refunded: number = await refund('o-1', 5)
  const mapped = run.guard((orderId: string, amount: number) => amount, { mapArgs: (orderId, amount) => ({ orderId, amount }) })
  const text: string = refusalText(d)
  const guarded = run.guard(async ({ amount }: { amount: number }) => amount * 2, { name: 'double' })
  const doubled: number = await guarded({ amount: 2 })
  const reviews: Review[] = await engine.reviews.pending()
  if (reviews[0]) await engine.reviews.approve(reviews[0].id)
  const tools = governTools(
    { refund: tool({ description: 'refund', inputSchema: z.object({ amount: z.number() }), execute: async ({ amount }) => ({ amount }) }) },
    run,
    { approver: async (review, ctx) => review.status === 'pending' && ctx.approved && ctx.toolName === 'refund' },
  )
  const model = wrapLanguageModel({ model: new MockLanguageModelV3(), middleware: toolgateModelMiddleware(run, { prices: { 'gpt-4o*': { in: 2.5, out: 10 } } }) })
  const oa: OpenAIAgent = governOpenAI(new OpenAIAgent({ name: 'support', instructions: 'Help.' }), engine, { agentId: 'support', enduser: { id: 'u' }, agentTags: ['prod'] })
  const ma: MastraAgent = governMastra(new MastraAgent({ name: 'support', instructions: 'Help.', model: new MockLanguageModelV3() as any }), engine, { agentId: 'support' })
  const mw = toolgateMiddleware(run, { prices: { m: { in: 1, out: 1 } } })
  const result = await generateText({ model, tools, prompt: 'go', stopWhen: stepCountIs(2) })
  await settleApprovals(tools, result.response.messages)
  const lc = wrapTools([lcTool(async () => 'x', { name: 'x', description: 'x', schema: z.object({}) })], run)
  void [oa, ma, mw, LlmBlockedError, effect, after, allowedAfter, resumed, refunded, mapped, text, doubled, lc, BlockedError, ReviewRequiredError, PolicyError, ToolgateError]
  await run.end('success', result.text)
  await engine.shutdown()
}
void main
