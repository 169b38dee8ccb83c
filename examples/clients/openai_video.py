"""The official `openai` Python client, unmodified, against `fastvideo serve`.

    python examples/clients/openai_video.py http://127.0.0.1:8000 out.mp4

With a server started with `--api-key KEY`, set OPENAI_API_KEY=KEY (the client sends it as
`Authorization: Bearer KEY`).

Creates a video job, polls it to completion, downloads the MP4, generates an image, and shows
that a malformed request comes back as a 400 naming the field. Prints a JSON summary (the
server's tests read it).
"""

import base64
import json
import os
import sys
import time

import openai

base, out = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key=os.environ.get("OPENAI_API_KEY", "not-needed"), max_retries=0)

model = client.models.list().data[0].id
video = client.videos.create(
    model=model,
    prompt="a red circle moving left on a white background",
    size="64x64",
    extra_body={"num_inference_steps": 6, "seed": 7},
)
statuses = [video.status]
progress = [video.progress]
while video.status in ("queued", "in_progress"):
    time.sleep(0.05)
    video = client.videos.retrieve(video.id)
    statuses.append(video.status)
    progress.append(video.progress)
content = client.videos.download_content(video.id, variant="video")
mp4 = content.read()
with open(out, "wb") as f:
    f.write(mp4)

image = client.images.generate(
    model=model,
    prompt="a blue square static on a black background",
    size="64x64",
    response_format="b64_json",
    extra_body={"num_inference_steps": 4, "seed": 1},
)
png = base64.b64decode(image.data[0].b64_json)

try:
    client.videos.create(prompt="a red circle", extra_body={"num_inference_steps": "many"})
    bad = None
except openai.BadRequestError as e:
    bad = {"status": e.status_code, "param": e.body.get("param") if isinstance(e.body, dict) else None}

listed = [v.id for v in client.videos.list(limit=10)]
print(json.dumps({
    "model": model,
    "id": video.id,
    "status": video.status,
    "statuses": statuses,
    "progress": progress,
    "mp4_bytes": len(mp4),
    "mp4_ftyp": mp4[4:8].decode("latin1"),
    "png_signature": png[:8] == b"\x89PNG\r\n\x1a\n",
    "png_bytes": len(png),
    "bad_request": bad,
    "listed": listed,
}))
