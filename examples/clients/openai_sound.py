"""The official `openai` Python client, unmodified, asking `fastvideo serve` for a video with
sound (an LTX-2 model):

    python examples/clients/openai_sound.py http://127.0.0.1:8000 out.mp4

Creates a video job with LTX-2's per-stream guidance fields in `extra_body`, polls it to
completion and downloads the MP4 (H.264 and AAC); then shows that a knob the model does not
take comes back as a 400 naming it. Prints a JSON summary (the server's tests read it).
"""

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
    prompt="a red ball bounces on a wooden floor and a bell rings",
    size="32x32",
    extra_body={"num_frames": 17, "fps": 24, "num_inference_steps": 2, "seed": 3, "guidance_scale": 3.0,
                "audio_guidance_scale": 5.0, "modality_scale": 1.0},
)
while video.status in ("queued", "in_progress"):
    time.sleep(0.05)
    video = client.videos.retrieve(video.id)
mp4 = client.videos.download_content(video.id, variant="video").read()
with open(out, "wb") as f:
    f.write(mp4)

# The two-stage recipe: half the size first, the latents upsampled, then refined.
two = client.videos.create(
    model=model,
    prompt="a red ball bounces on a wooden floor and a bell rings",
    size="64x64",
    extra_body={"num_frames": 9, "fps": 24, "num_inference_steps": 2, "seed": 3,
                "node_params": {"refine": {"noise_scale": 0.5}}},
)
while two.status in ("queued", "in_progress"):
    time.sleep(0.05)
    two = client.videos.retrieve(two.id)

try:
    client.videos.create(model=model, prompt="p", size="32x32", extra_body={"guidance_scale_2": 2.0})
    bad = None
except openai.BadRequestError as e:
    bad = {"status": e.status_code, "param": e.body.get("param") if isinstance(e.body, dict) else None}

extra = video.model_extra or {}
print(json.dumps({
    "model": model,
    "status": video.status,
    "audio_sample_rate": getattr(video, "audio_sample_rate", None) or extra.get("audio_sample_rate"),
    "bytes": len(mp4),
    "two_stage_status": two.status,
    "two_stage_error": getattr(two, "error", None) and two.error.message,
    "bad_request": bad,
}))
