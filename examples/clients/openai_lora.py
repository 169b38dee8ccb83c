"""LoRA adapters per request with the official `openai` Python client, unmodified, against
`fastvideo serve` with adapters enabled in its deploy config:

    fastvideo serve --model MODEL --deploy deploy.toml &
    python examples/clients/openai_lora.py http://127.0.0.1:8000 ADAPTER

`lora` travels in `extra_body`. Makes the same video (same seed) without the adapter, with it,
and with it once more; and names an adapter the server does not have (a 400 naming
`lora[0].name`). Prints a JSON summary (the server's tests read it).
"""

import json
import os
import sys
import time

import openai

base, adapter = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key=os.environ.get("OPENAI_API_KEY", "not-needed"), max_retries=0)
model = client.models.list().data[0].id


def video(lora):
    body = {"seed": 5, "num_inference_steps": 3, "size": "32x32", "num_frames": 5}
    if lora is not None:
        body["lora"] = lora
    v = client.videos.create(model=model, prompt="a red circle moving left", extra_body=body)
    while v.status in ("queued", "in_progress"):
        time.sleep(0.05)
        v = client.videos.retrieve(v.id)
    if v.status != "completed":
        raise SystemExit(f"video {v.id}: {v.status} {v.error}")
    return client.videos.download_content(v.id, variant="video").read()


plain = video(None)
with_adapter = video([{"name": adapter, "scale": 0.8}])
again = video([{"name": adapter, "scale": 0.8}])
try:
    video([{"name": "no-such-adapter"}])
    unknown = None
except openai.BadRequestError as e:
    body = e.body if isinstance(e.body, dict) else {}
    unknown = {"status": e.status_code, "param": body.get("param"), "message": body.get("message")}

print(json.dumps({"differs": with_adapter != plain, "reproducible": with_adapter == again,
                  "bytes": len(with_adapter), "unknown": unknown}))
