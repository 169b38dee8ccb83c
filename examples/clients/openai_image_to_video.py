"""Image to video with the official `openai` Python client, unmodified, against `fastvideo serve`
running an image-to-video model.

    fastvideo serve --model models/default-i2v &
    python examples/clients/openai_image_to_video.py http://127.0.0.1:8000 start.png out.mp4 \
        "a red circle moving left on a white background"

Uploads the picture as `input_reference` (a multipart file, as the client sends it), polls the
job, downloads the MP4; uploads the picture once more through the Files API and names it by id in
a JSON request (same seed, same video); and shows that a file that is not a picture comes back
as a 400 naming `input_reference`. Prints a JSON summary (the server's tests read it).
"""

import json
import os
import sys
import time

import openai

base, image, out = sys.argv[1], sys.argv[2], sys.argv[3]
prompt = sys.argv[4] if len(sys.argv) > 4 else "a red circle moving left on a white background"
client = openai.OpenAI(base_url=base + "/v1", api_key=os.environ.get("OPENAI_API_KEY", "not-needed"), max_retries=0)
model = client.models.list().data[0].id

with open(image, "rb") as f:
    video = client.videos.create(
        model=model,
        prompt=prompt,
        input_reference=f,
        # Size, frame count and steps: the model's defaults (64x64, 17 frames for default-i2v).
        extra_body={"seed": 3},
    )
while video.status in ("queued", "in_progress"):
    time.sleep(0.05)
    video = client.videos.retrieve(video.id)
mp4 = client.videos.download_content(video.id, variant="video").read()
with open(out, "wb") as f:
    f.write(mp4)

# The same picture uploaded once (POST /v1/files) and named by id in a JSON request: no base64
# in the request, and one upload serves any number of requests.
with open(image, "rb") as f:
    uploaded = client.files.create(file=f, purpose="vision")
by_id = client.videos.create(model=model, prompt=prompt, extra_body={"input_reference": uploaded.id, "seed": 3})
while by_id.status in ("queued", "in_progress"):
    time.sleep(0.05)
    by_id = client.videos.retrieve(by_id.id)
same = client.videos.download_content(by_id.id, variant="video").read() == mp4
client.files.delete(uploaded.id)

try:
    client.videos.create(model=model, prompt="a red circle", input_reference=("notes.png", b"not a picture"))
    bad = None
except openai.BadRequestError as e:
    bad = {"status": e.status_code, "param": e.body.get("param") if isinstance(e.body, dict) else None}

print(json.dumps({"id": video.id, "status": video.status, "mp4_bytes": len(mp4), "bad_image": bad,
                  "file_id": uploaded.id, "by_id_status": by_id.status, "by_id_same_video": same}))
