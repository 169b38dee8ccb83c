"""Chat completions with the official `openai` Python client, unmodified, against
`fastvideo serve --lm LM_FOLDER` (a language model served beside the video model):

    fastvideo serve --lm path/to/Qwen3-folder &
    python examples/clients/openai_chat.py http://127.0.0.1:8000 "hi"

Asks once without streaming and once streaming (with usage in the last chunk), then a plain
completion, then a request with max_tokens 0 (a 400 naming it). Prints a JSON summary (the
server's tests read it).
"""

import json
import os
import sys

import openai

base, message = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key=os.environ.get("OPENAI_API_KEY", "not-needed"), max_retries=0)
models = [m.id for m in client.models.list().data]
lm = models[-1]  # the language model is listed after the video model
messages = [{"role": "user", "content": message}]

whole = client.chat.completions.create(model=lm, messages=messages, max_tokens=12, temperature=0)
stream = client.chat.completions.create(
    model=lm, messages=messages, max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True}
)
deltas, reasons, usage = [], [], None
for chunk in stream:
    for c in chunk.choices:
        if c.delta.content:
            deltas.append(c.delta.content)
        if c.finish_reason:
            reasons.append(c.finish_reason)
    if chunk.usage:
        usage = chunk.usage.model_dump()
plain = client.completions.create(model=lm, prompt="a red circle", max_tokens=5, temperature=0)
try:
    client.chat.completions.create(model=lm, messages=messages, max_tokens=0)
    bad = None
except openai.BadRequestError as e:
    bad = {"status": e.status_code, "param": e.body.get("param") if isinstance(e.body, dict) else None}

print(json.dumps({
    "models": models,
    "content": whole.choices[0].message.content,
    "finish_reason": whole.choices[0].finish_reason,
    "usage": whole.usage.model_dump(),
    "deltas": deltas,
    "stream_reasons": reasons,
    "stream_usage": usage,
    "completion_text": plain.choices[0].text,
    "completion_usage": plain.usage.model_dump(),
    "bad_request": bad,
}))
