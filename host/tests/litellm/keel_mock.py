"""LiteLLM proxy hook for Keel's tests: picks, for each request, which of
LiteLLM's own mock replies (`mock_response`, `mock_tool_calls`, its mock
errors) the proxy gives, from the model's name and the conversation.

Models (see config.yaml):
  scripted      a tool call to `echo`, then, once the tool answered, text
  rate-limited  as scripted, after a 429 with Retry-After: 2 per request
  burst         as scripted, after two 500s per request
  slow          as scripted, each reply after 3 s (the test kills the
                proxy while Keel waits)
"""
import asyncio
import json
import sys

import httpx
import litellm
from litellm.integrations.custom_logger import CustomLogger


class KeelMock(CustomLogger):
    def __init__(self):
        super().__init__()
        # Attempts seen per (model, goal, conversation length): a retry of
        # the same request is told apart from the next step's request.
        self.seen = {}

    async def async_pre_call_hook(self, user_api_key_dict, cache, data, call_type):
        model = data.get("model", "")
        msgs = data.get("messages") or []
        goal = next((m.get("content") for m in msgs if m.get("role") == "user"), "")
        key = (model, str(goal), len(msgs))
        n = self.seen.get(key, 0)
        self.seen[key] = n + 1
        print(f"keel_mock: {model} request, attempt {n + 1}", flush=True)
        if model == "rate-limited" and n == 0:
            data["mock_response"] = litellm.RateLimitError(
                message="slow down",
                llm_provider="openai",
                model=model,
                response=httpx.Response(
                    429,
                    headers={"retry-after": "2"},
                    request=httpx.Request("POST", "http://upstream/v1/chat/completions"),
                ),
            )
            return data
        if model == "burst" and n < 2:
            data["mock_response"] = "litellm.InternalServerError"
            return data
        if model == "slow":
            await asyncio.sleep(3)
        tool = next((m for m in msgs if m.get("role") == "tool"), None)
        if tool is None:
            data["mock_tool_calls"] = [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "echo", "arguments": json.dumps({"x": 1})},
                }
            ]
            data["mock_response"] = ""
        else:
            data["mock_response"] = "the echo said " + str(tool.get("content"))
        return data


keel_mock = KeelMock()
