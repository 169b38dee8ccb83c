"""Pictures and edits with the official `openai` Python client, unmodified, against
`fastvideo serve` running an image model (FLUX.2 [klein]).

    fastvideo serve --model path/to/FLUX.2-klein-4B &
    python examples/clients/openai_images.py http://127.0.0.1:8000 ref0.png ref1.png out_dir

Makes two pictures in one request (`n=2`, stepped as one batch), edits with two reference
pictures (`image=[...]`, sent as `image[]` multipart files), and shows that an inpainting mask
comes back as a 400 naming `mask`. Writes the PNGs into out_dir and prints a JSON summary (the
server's tests read it).
"""

import base64
import json
import os
import sys

import openai

base, ref0, ref1, out_dir = sys.argv[1:5]
client = openai.OpenAI(base_url=base + "/v1", api_key=os.environ.get("OPENAI_API_KEY", "not-needed"), max_retries=0)
model = client.models.list().data[0].id
summary = {"model": model}

made = client.images.generate(
    model=model, prompt="a red fox in the snow", n=2, size="48x32",
    extra_body={"seed": 5, "num_inference_steps": 2},
)
summary["generated"] = []
for i, d in enumerate(made.data):
    path = os.path.join(out_dir, f"gen{i}.png")
    with open(path, "wb") as f:
        f.write(base64.b64decode(d.b64_json))
    summary["generated"].append(path)

with open(ref0, "rb") as a, open(ref1, "rb") as b:
    edit = client.images.edit(
        model=model, image=[a, b], prompt="the fox wears a blue scarf", size="48x32",
        extra_body={"seed": 5, "num_inference_steps": 2},
    )
path = os.path.join(out_dir, "edit.png")
with open(path, "wb") as f:
    f.write(base64.b64decode(edit.data[0].b64_json))
summary["edited"] = path

try:
    with open(ref0, "rb") as a, open(ref1, "rb") as m:
        client.images.edit(model=model, image=a, mask=m, prompt="p")
    summary["mask"] = "accepted"
except openai.BadRequestError as e:
    summary["mask"] = {"status": e.status_code, "param": e.body.get("param") if isinstance(e.body, dict) else None}

print(json.dumps(summary))
