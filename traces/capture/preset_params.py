"""Parameter counts of memlens' bundled model presets (core/src/plan/presets/*.json), as
transformers builds each model: `sum(p.numel())` of `AutoModelForCausalLM.from_config(config)` on the
meta device (nothing is downloaded; no weights, no GPU), with each parameter's shape (layer numbers
folded). A multimodal config's language model (its `text_config`) is built alone, as memlens plans it.

Run (any machine with torch and transformers, CPU builds are enough):
    python3 traces/capture/preset_params.py > traces/plan/preset_params.json
tests/tests/presets.rs holds memlens' count to these.
"""
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = os.path.join(HERE, "..", "..", "core", "src", "plan", "presets")


def build(transformers, config):
    config = dict(config.get("text_config") or config)
    config.pop("architectures", None)
    cfg = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
    return transformers.AutoModelForCausalLM.from_config(cfg)


def main():
    import torch
    import transformers

    out = {"transformers": transformers.__version__, "torch": torch.__version__, "presets": {}}
    for path in sorted(glob.glob(os.path.join(PRESETS, "*.json"))):
        with open(path) as f:
            preset = json.load(f)
        try:
            with torch.device("meta"):
                model = build(transformers, preset["config"])
            shapes = {}
            for name, p in model.named_parameters():
                key = re.sub(r"\.\d+\.", ".N.", name)
                shapes.setdefault(key, [list(p.shape), 0])[1] += 1
            entry = {"parameters": sum(p.numel() for p in model.parameters()), "shapes": shapes}
        except Exception as e:  # noqa: BLE001 - the error is the result
            entry = {"error": repr(e)}
        out["presets"][preset["id"]] = entry
        print(preset["id"], entry.get("parameters", entry.get("error")), file=sys.stderr, flush=True)
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
