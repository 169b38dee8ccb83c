"""Classic classifier-free guidance written in Python, `uncond + s * (cond - uncond)`.

The host runs the three tensor ops in the order the built-in policy computes them, so the result
is bit-identical to it; no tensor data enters the sandbox. Built with componentize-py (see
sdk/python/README.md):

    componentize-py -d wit/fastvideo-plugin -w guider-plugin componentize --stub-wasi \
        -p plugins/python/cfg cfg_guider -o cfg_py.core.wasm
    fastvideo plugin embed-manifest cfg_py.core.wasm plugins/python/cfg/manifest.json -o cfg_py.wasm
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import tensor_ops


class Guider(exports.Guider):
    def init(self, params_json: str) -> list[str]:
        # The manifest's schema only asks for an object; the plugin checks the rest itself (an
        # `Err` raised here fails the request with this message, naming the plugin and hook).
        params = json.loads(params_json or "{}")
        if params:
            raise Err(f"cfg-py takes no parameters, got {sorted(params)}")
        return ["cond", "uncond"]

    def combine(self, ctx, preds):
        if len(preds) != 2:
            raise Err(f"cfg-py: expected 2 branch predictions, got {len(preds)}")
        cond, uncond = preds
        delta = tensor_ops.sub(cond, uncond)
        return tensor_ops.add(uncond, tensor_ops.scale(delta, ctx.guidance_scale))
