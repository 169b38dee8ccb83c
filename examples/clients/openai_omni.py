"""The official `openai` Python client against one `fastvideo serve --model COSMOS3_DIR`: a chat
completion from the omni model's reasoner (streamed too), a video with sound from its denoiser,
and a robot policy (actions predicted from a first frame), all on the one copy of the weights.

    python examples/clients/openai_omni.py http://127.0.0.1:8000 out.mp4 first_frame.png

Prints a JSON summary (the server's tests read it).
"""

import base64
import json
import os
import sys
import time

import openai

base, out, frame = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base + "/v1", api_key=os.environ.get("OPENAI_API_KEY", "not-needed"), max_retries=0)

models = [m.id for m in client.models.list().data]
video_model = next(m for m in models if not m.endswith("-reasoner"))
reasoner = next(m for m in models if m.endswith("-reasoner"))

chat = client.chat.completions.create(
    model=reasoner,
    messages=[{"role": "user", "content": "Describe a robot arm stacking blocks."}],
    max_tokens=8,
    temperature=0,
)
stream = client.chat.completions.create(
    model=reasoner,
    messages=[{"role": "user", "content": "Describe a robot arm stacking blocks."}],
    max_tokens=8,
    temperature=0,
    stream=True,
)
streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def wait(video):
    while video.status in ("queued", "in_progress"):
        time.sleep(0.05)
        video = client.videos.retrieve(video.id)
    return video


video = wait(client.videos.create(
    model=video_model,
    prompt="a robot arm stacks red blocks",
    size="64x48",
    extra_body={"num_frames": 17, "fps": 16, "num_inference_steps": 2, "seed": 3, "generate_sound": True},
))
mp4 = client.videos.download_content(video.id, variant="video").read()
with open(out, "wb") as f:
    f.write(mp4)

with open(frame, "rb") as f:
    picture = "data:image/png;base64," + base64.b64encode(f.read()).decode()
policy = wait(client.videos.create(
    model=video_model,
    prompt="push the block to the goal",
    extra_body={"input_reference": picture, "num_inference_steps": 2, "seed": 5,
                "action": {"mode": "policy", "domain_name": "pusht", "chunk_size": 4, "resolution_tier": 256}},
))

try:
    client.videos.create(model=video_model, prompt="push", extra_body={
        "input_reference": picture, "action": {"domain_name": "mars_rover", "chunk_size": 4}})
    bad = None
except openai.BadRequestError as e:
    bad = {"status": e.status_code, "param": e.body.get("param") if isinstance(e.body, dict) else None,
           "message": e.body.get("message") if isinstance(e.body, dict) else None}

print(json.dumps({
    "models": models,
    "chat_model": chat.model,
    "chat_text": chat.choices[0].message.content,
    "chat_tokens": chat.usage.completion_tokens,
    "streamed": streamed,
    "video_status": video.status,
    "audio_sample_rate": getattr(video, "audio_sample_rate", None) or (video.model_extra or {}).get("audio_sample_rate"),
    "mp4_bytes": len(mp4),
    "policy_status": policy.status,
    "action": (policy.model_extra or {}).get("action"),
    "bad_request": bad,
}))
