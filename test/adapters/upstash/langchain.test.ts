// A real consumer of @upstash/ratelimit's API, unchanged: LangChain's UpstashRatelimitHandler
// (@langchain/community), given `edgelimit/upstash` limiters, run by LangChain's own callback manager
// around a chain (a prompt, then a model). The model is a stand-in that reports the token usage a real
// provider reports, so that nothing leaves the machine.

import {
  UpstashRatelimitError,
  UpstashRatelimitHandler,
} from "@langchain/community/callbacks/handlers/upstash_ratelimit";
import type { CallbackManagerForLLMRun } from "@langchain/core/callbacks/manager";
import { BaseLLM } from "@langchain/core/language_models/llms";
import type { LLMResult } from "@langchain/core/outputs";
import { PromptTemplate } from "@langchain/core/prompts";
import { Redis } from "@upstash/redis";
import { describe, expect, inject, it } from "vitest";
import { Ratelimit } from "../../../src/adapters/upstash/index.js";
import { failOnUnhandledRejections, ownBridge } from "../../own-bridge.js";
import { manualClock, uniquePrefix } from "../../support.js";

failOnUnhandledRejections();
const bridge = ownBridge();

/** A model that answers "ok" and reports `promptTokens` and `totalTokens` as OpenAI's models do. */
class UsageReportingModel extends BaseLLM {
  constructor(private readonly usage: { promptTokens: number; completionTokens: number }) {
    super({});
  }
  _llmType(): string {
    return "usage-reporting";
  }
  async _generate(prompts: string[], _options: this["ParsedCallOptions"], _run?: CallbackManagerForLLMRun) {
    const { promptTokens, completionTokens } = this.usage;
    return {
      generations: prompts.map(() => [{ text: "ok" }]),
      llmOutput: {
        tokenUsage: { promptTokens, completionTokens, totalTokens: promptTokens + completionTokens },
      },
    } satisfies LLMResult;
  }
}

function limiters(requests: number, tokens: number) {
  const clock = manualClock();
  const redis = new Redis({ url: bridge.url, token: inject("bridgeToken"), enableTelemetry: false });
  const options = { redis, prefix: uniquePrefix("langchain"), timeout: 15_000, clock };
  return {
    clock,
    requestRatelimit: new Ratelimit({ ...options, limiter: Ratelimit.fixedWindow(requests, "1 h") }),
    tokenRatelimit: new Ratelimit({
      ...options,
      prefix: `${options.prefix}:tokens`,
      limiter: Ratelimit.fixedWindow(tokens, "1 h"),
    }),
  };
}

/** One chain run as a LangChain user writes it: a handler per run, then invoke with it. */
async function run(
  ratelimits: ReturnType<typeof limiters>,
  user: string,
  model: BaseLLM,
  includeOutputTokens = false,
): Promise<"served" | "request" | "token"> {
  const { requestRatelimit, tokenRatelimit } = ratelimits;
  // The handler's types name the peer's class, whose protected members make TypeScript compare it by
  // name: with @upstash/ratelimit still installed (it is here, for the side-by-side tests) each limiter
  // is passed `as never`, as docs/upstash.md says; once it is uninstalled, no cast is needed.
  const options = {
    requestRatelimit: requestRatelimit as never,
    tokenRatelimit: tokenRatelimit as never,
    includeOutputTokens,
  };
  const handler = new UpstashRatelimitHandler(user, options);
  const chain = PromptTemplate.fromTemplate("Say {word}").pipe(model);
  try {
    await chain.invoke({ word: "ok" }, { callbacks: [handler] });
    return "served";
  } catch (error) {
    if (error instanceof UpstashRatelimitError) return error.type as "request" | "token";
    throw error;
  }
}

describe("LangChain's UpstashRatelimitHandler on edgelimit/upstash", () => {
  it("charges the prompt tokens after each call, stops the user once they reach the limit", async () => {
    const ratelimits = limiters(100, 1000);
    const model = new UsageReportingModel({ promptTokens: 400, completionTokens: 50 });
    const seen = [];
    for (let i = 0; i < 4; i++) seen.push(await run(ratelimits, "user:1", model));
    // 400 + 400 + 400: the third call overshoots the 1000 and is charged all the same (the peer's
    // semantics, which the handler relies on); the fourth is refused before the model runs
    expect(seen).toEqual(["served", "served", "served", "token"]);
    expect((await ratelimits.tokenRatelimit.getRemaining("user:1")).remaining).toBe(0);
    // another user has its own budget
    expect(await run(ratelimits, "user:2", model)).toBe("served");
    expect((await ratelimits.tokenRatelimit.getRemaining("user:2")).remaining).toBe(600);
    // the requests counted: one per chain run that reached the handler's chain start
    expect((await ratelimits.requestRatelimit.getRemaining("user:1")).remaining).toBe(96);
    // a new window: the user is served again
    ratelimits.clock.set(ratelimits.clock.now + 3_600_000);
    expect(await run(ratelimits, "user:1", model)).toBe("served");
  });

  it("with includeOutputTokens, charges the total; the request limit refuses before the model runs", async () => {
    const ratelimits = limiters(2, 10_000);
    const model = new UsageReportingModel({ promptTokens: 100, completionTokens: 25 });
    const seen = [];
    for (let i = 0; i < 3; i++) seen.push(await run(ratelimits, "user:3", model, true));
    expect(seen).toEqual(["served", "served", "request"]);
    // two calls of 125 tokens each; the refused one charged nothing
    expect((await ratelimits.tokenRatelimit.getRemaining("user:3")).remaining).toBe(10_000 - 250);
  });
});
