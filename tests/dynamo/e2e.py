"""The fleet test: NVIDIA Dynamo's real frontend in front of two fastvideo workers on loopback
(file discovery, TCP request plane), driven by the official `openai` client.

1. 20 video requests through the frontend: all succeed, and both workers serve some. Worker b
   also serves a language model (the tiny Qwen3 fixture) as a Chat model: a chat completion,
   the same streamed, a text completion, and a bad field.
2. SIGTERM one worker while it holds a request: that request completes, the worker exits 0,
   and the requests after it all go to the other worker.
3. SIGKILL a worker (started again) while it holds a request: the client sees an error for that
   one request (not a hang), the worker leaves the frontend's instance list, and the next
   requests succeed on the survivor.

Run by host/scripts/dynamo-e2e.sh, which installs what it needs. Prints the figures; exits
non-zero on the first failed check.
"""

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import openai

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORKER = os.environ.get("FASTVIDEO_DYNAMO", os.path.join(ROOT, "target/debug/fastvideo-dynamo"))
PY = sys.executable
MODEL = "fastvideo-default"
LM = "tiny-qwen3"
LM_DIR = os.path.join(ROOT, "tests", "fixtures", LM)


def free_port():
    """A free port below 32768: Dynamo reads DYN_SYSTEM_PORT as an i16."""
    import random
    while True:
        p = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_for(what, fn, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if fn():
                return time.time() - t0
        except Exception:
            pass
        time.sleep(0.2)
    check(False, f"{what} within {timeout} s")


class Fleet:
    def __init__(self, tmp):
        self.tmp = tmp
        self.kv = os.path.join(tmp, "kv")
        os.makedirs(self.kv)
        self.env = dict(os.environ, DYN_DISCOVERY_BACKEND="file", DYN_FILE_KV=self.kv, DYN_REQUEST_PLANE="tcp",
                        DYN_TCP_RPC_HOST="127.0.0.1", DYN_TCP_RESPONSE_STREAM_HOST="127.0.0.1",
                        DYN_EVENT_PLANE_HOST="127.0.0.1", DYN_LOG="warn")
        self.http = free_port()
        self.logs = {}
        self.frontend = self.spawn("frontend", [PY, "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
                                                "--http-port", str(self.http), "--discovery-backend", "file",
                                                "--request-plane", "tcp", "--router-mode", "round-robin"], self.env)
        self.workers = {}

    def spawn(self, name, cmd, env):
        log = open(os.path.join(self.tmp, f"{name}.log"), "ab")
        self.logs[name] = log.name
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)

    def start_worker(self, name, extra=()):
        port = free_port()
        media = os.path.join(self.tmp, f"media-{name}")
        env = dict(self.env, DYN_SYSTEM_HOST="127.0.0.1", DYN_SYSTEM_PORT=str(port))
        p = self.spawn(name, [WORKER, "--device", "cpu", "--media-dir", media, "--drain-grace", "2", *extra], env)
        self.workers[name] = (p, port, media)
        wait_for(f"worker {name} ready", lambda: get_json(f"http://127.0.0.1:{port}/health")["status"] == "ready")
        return p

    def served(self, name):
        media = self.workers[name][2]
        return len([f for f in os.listdir(media) if f.endswith(".mp4")]) if os.path.isdir(media) else 0

    def live(self, name):
        """The worker's own gauge of requests it holds (from its /metrics)."""
        port = self.workers[name][1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if "fastvideo_live_requests" in line and not line.startswith("#"))

    def instances(self):
        h = get_json(f"http://127.0.0.1:{self.http}/health")
        return h.get("instances", [])

    def stop(self):
        for p, _, _ in self.workers.values():
            if p.poll() is None:
                p.kill()
        self.frontend.kill()


def video(client, steps=4, timeout=120):
    """One video through the frontend. The client's `videos.create` sends multipart (as OpenAI's
    video API takes), which Dynamo's frontend refuses (415: it takes JSON), so the request goes
    through the same client's JSON `post`."""
    body = {"model": MODEL, "prompt": "a red circle moving left on a white background", "size": "64x64",
            "nvext": {"num_frames": 17, "num_inference_steps": steps, "seed": 1}}
    d = client.post("/videos", body=body, cast_to=object, options={"timeout": timeout})
    return d["status"], d.get("data", [])


def chat(client):
    """The language model through the frontend, as a Chat and Completions model."""
    wait_for("/v1/models lists the language model", lambda: LM in [m.id for m in client.models.list().data])
    messages = [{"role": "user", "content": "a crimson disc gliding leftwards over snow"}]
    whole = client.chat.completions.create(model=LM, messages=messages, max_tokens=20)
    u = whole.usage
    # The fixture's template makes 71 prompt tokens of this chat (as `fastvideo chat` counts them);
    # its random weights do not stop within 20 tokens.
    check(u is not None and (u.prompt_tokens, u.completion_tokens) == (71, 20) and whole.choices[0].finish_reason == "length",
          f"a chat completion with usage ({u}, {whole.choices[0].finish_reason})")
    parts, usage = [], None
    for c in client.chat.completions.create(model=LM, messages=messages, max_tokens=20, stream=True,
                                            stream_options={"include_usage": True}):
        if c.choices and c.choices[0].delta.content:
            parts.append(c.choices[0].delta.content)
        usage = c.usage or usage
    check("".join(parts) == whole.choices[0].message.content and usage is not None and usage.completion_tokens == 20,
          f"the same chat streamed: the same greedy text in {len(parts)} chunks, usage last")
    text = client.completions.create(model=LM, prompt="a red circle", max_tokens=5)
    check(text.usage.completion_tokens == 5 and isinstance(text.choices[0].text, str), "a text completion")
    try:
        # The frontend knows nothing of the model's context (a text-input card): the worker checks.
        client.chat.completions.create(model=LM, messages=messages, max_tokens=1000)
        check(False, "a reply past the context is refused")
    except openai.BadRequestError as e:
        check("max_tokens" in str(e) and "512 positions" in str(e), f"past the context: a 400 naming max_tokens: {e}")


def main():
    tmp = tempfile.mkdtemp(prefix="fastvideo-dynamo-")
    fleet = Fleet(tmp)
    try:
        wait_for("the frontend", lambda: get_json(f"http://127.0.0.1:{fleet.http}/health") is not None)
        fleet.start_worker("a")
        fleet.start_worker("b", ["--lm", LM_DIR, "--lm-kv-cache", "8M"])
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{fleet.http}/v1", api_key="none", max_retries=0)
        wait_for("/v1/models lists the model",
                 lambda: MODEL in [m.id for m in client.models.list().data])
        # videos + images each, and b's chat
        wait_for("both workers registered", lambda: len(fleet.instances()) >= 5)

        # 1. Twenty requests.
        t0 = time.time()
        results = [video(client) for _ in range(20)]
        took = time.time() - t0
        check(all(s == "completed" and d and d[0].get("url", "").startswith("file://") for s, d in results),
              "20 videos through the frontend completed, each with a URL")
        a, b = fleet.served("a"), fleet.served("b")
        print(f"figures: 20 requests in {took:.1f} s; worker a served {a}, worker b served {b}", flush=True)
        check(a + b == 20 and a > 0 and b > 0, "both workers served some")
        img = client.images.generate(model=MODEL, prompt="a blue star on a gray background", size="64x64",
                                     response_format="b64_json")
        check(base64.b64decode(img.data[0].b64_json)[:8] == b"\x89PNG\r\n\x1a\n", "an image through the frontend")
        # Streaming: a progress item per denoise step, then the result.
        req = urllib.request.Request(f"http://127.0.0.1:{fleet.http}/v1/videos", method="POST",
                                     headers={"Content-Type": "application/json"},
                                     data=json.dumps({"model": MODEL, "prompt": "a green square", "size": "64x64",
                                                      "stream": True, "nvext": {"num_frames": 17,
                                                                                "num_inference_steps": 5}}).encode())
        items = []
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    items.append(json.loads(line[6:]))
        check([i["status"] for i in items] == ["in_progress"] * 5 + ["completed"] and items[-1]["data"],
              f"a streamed video: 5 progress items, then the result ({[i['progress'] for i in items]})")
        try:
            video_bad = client.post("/videos", body={"model": MODEL, "prompt": "x", "size": "big"}, cast_to=object)
            check(False, f"a bad size is refused (got {video_bad})")
        except openai.BadRequestError as e:
            check("size" in str(e), f"a bad size is a 400 naming the field: {e}")

        chat(client)

        # 2. SIGTERM a worker mid-request.
        before_a, before_b = fleet.served("a"), fleet.served("b")
        long_results = []
        threads = [threading.Thread(target=lambda: long_results.append(video(client, steps=200))) for _ in range(2)]
        for t in threads:
            t.start()
        wait_for("both workers hold a long request", lambda: fleet.live("a") >= 1 and fleet.live("b") >= 1, 30)
        pa = fleet.workers["a"][0]
        t_term = time.time()
        pa.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=300)
        check(len(long_results) == 2 and all(s == "completed" for s, _ in long_results),
              "the requests in flight during SIGTERM completed")
        code = pa.wait(timeout=120)
        drain = time.time() - t_term
        check(code == 0, f"the drained worker exited 0 (after {drain:.1f} s)")
        after_term_a = fleet.served("a")
        later = [video(client) for _ in range(6)]
        check(all(s == "completed" for s, _ in later), "6 requests after the drain completed")
        check(fleet.served("a") == after_term_a and fleet.served("b") >= before_b + 6,
              "all of them went to the other worker")
        print(f"figures: drain took {drain:.1f} s; a served {after_term_a - before_a} of the 2 long requests", flush=True)

        # 3. SIGKILL a worker mid-request.
        fleet.start_worker("a")
        wait_for("worker a back in the frontend", lambda: len(fleet.instances()) >= 5, 60)
        outcomes = []

        def one():
            try:
                outcomes.append(video(client, steps=400, timeout=60)[0])
            except Exception as e:  # the killed worker's request: an error, not a hang
                outcomes.append(f"error: {type(e).__name__}")

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        wait_for("worker a holds a request", lambda: fleet.live("a") >= 1, 30)
        fleet.workers["a"][0].kill()
        t_kill = time.time()
        for t in threads:
            t.join(timeout=120)
        errors = [o for o in outcomes if o != "completed"]
        check(len(outcomes) == 2 and len(errors) <= 1, f"one request at most lost to the kill: {outcomes}")
        gone = wait_for("the killed worker leaves the instance list", lambda: len(fleet.instances()) <= 3, 60)
        after = [video(client) for _ in range(4)]
        check(all(s == "completed" for s, _ in after), "4 requests after the kill completed")
        print(f"figures: after SIGKILL the frontend dropped the worker in {time.time() - t_kill:.1f} s "
              f"(instance gone after {gone:.1f} s of polling); outcomes {outcomes}", flush=True)
        print("dynamo e2e: all checks passed", flush=True)
    finally:
        fleet.stop()


if __name__ == "__main__":
    main()
