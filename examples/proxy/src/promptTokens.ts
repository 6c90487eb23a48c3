import { fakeChatTemplate } from '@kvc/sglang-emulator'
import type { ParsedRequest } from './openai.js'
import { type PromptTokenizer, tokenizeInSlices, yieldToEventLoop } from './tokens.js'

/**
 * The prompt's token ids as {@link PromptTokenizer} counts them (the same ids), computed in
 * slices with a yield to the event loop between two slices, so that a multi-megabyte prompt does
 * not hold up other requests (`/health` among them).
 */
export async function promptTokensAsync(
  req: ParsedRequest,
  tokenizer: PromptTokenizer,
): Promise<Uint32Array> {
  if (req.promptIds !== undefined) return Uint32Array.from(req.promptIds)
  const text = req.promptText ?? fakeChatTemplate(req.messages!)
  const steps = tokenizeInSlices(tokenizer.mode, text)
  let r = steps.next()
  while (r.done !== true) {
    await yieldToEventLoop()
    r = steps.next()
  }
  return r.value
}
