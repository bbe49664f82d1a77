"""transformers 5.6's own planning on its own model classes: for each folder
under configs/, the module sizes and the device maps `from_pretrained(
device_map=STRATEGY, max_memory=..., dtype=...)` computes, written to
configs/NAME/transformers-5.6.json for tst_hf56plans. Needs transformers 5.6.0 and Accelerate
1.13.0 with torch >= 2.4 (how to get them on Debian 12 without PyPI:
tests/reference/README.md). Nothing is downloaded and no weights are read:
each folder holds config.json and the index this script writes.

    python3 tests/reference/hf56/hf56_plan.py [NAME...]

from_pretrained runs as a user calls it; the script only wraps its
`_get_device_map` to record what it returns for every strategy and budget
on the model from_pretrained has just built, then stops the load.
"""
import importlib.abc
import importlib.machinery
import importlib.metadata
import json
import os
import sys
import types


def planning_only_shims():
    """transformers 5.6 checks at import that its pinned dependencies are
    installed (dependency_versions_check.py) and imports the Rust tokenizers
    package at module level, but planning tokenizes nothing. Where a
    dependency has no installed metadata (huggingface_hub and Accelerate put
    on PYTHONPATH from their sources) its module's own version answers; where
    the tokenizers package is missing, its names resolve to placeholders; an
    older regex (Debian 13 has 2024.11.6, 5.6 asks for 2025.10.22) is let
    through. None of this touches the planning code."""
    real = importlib.metadata.version
    answers = {"regex": "2025.10.22", "tokenizers": "0.22.1"}

    def version(name):
        try:
            got = real(name)
            return answers.get(name, got) if name == "regex" else got
        except importlib.metadata.PackageNotFoundError:
            if name in answers:
                return answers[name]
            if name in ("huggingface-hub", "huggingface_hub", "accelerate"):
                return __import__(name.replace("-", "_")).__version__
            raise

    importlib.metadata.version = version
    try:
        real("tokenizers")
        return
    except importlib.metadata.PackageNotFoundError:
        pass

    class Placeholder:
        def __init__(self, *a, **k):
            pass

        def __call__(self, *a, **k):
            return Placeholder()

        def __getattr__(self, n):
            return Placeholder()

    class Module(types.ModuleType):
        __path__ = []

        def __getattr__(self, n):
            if n.startswith("__"):
                raise AttributeError(n)
            return type(n, (Placeholder,), {})

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name == "tokenizers" or name.startswith("tokenizers."):
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            m = Module(spec.name)
            m.__version__ = answers["tokenizers"]
            return m

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, Finder())


planning_only_shims()

import torch  # noqa: E402
import transformers  # noqa: E402
import transformers.modeling_utils as modeling_utils  # noqa: E402
from transformers.core_model_loading import revert_weight_conversion  # noqa: E402
from transformers.integrations.accelerate import compute_module_sizes  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STRATEGIES = ["auto", "balanced", "balanced_low_0", "sequential"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Budgets as shares of the model's size at the dtype (what they leave goes
# to disk): one GPU and RAM; two GPUs and RAM, tight and with room to spare
# (where balanced and sequential part); three GPUs of different sizes, tight
# and roomy (where balanced_low_0 parts); RAM only.
BUDGETS = {
    "1gpu": {0: 0.35, "cpu": 0.35},
    "2gpu": {0: 0.3, 1: 0.3, "cpu": 0.6},
    "2gpu_roomy": {0: 0.8, 1: 0.8, "cpu": 1.0},
    "3gpu": {0: 0.2, 1: 0.25, 2: 0.3, "cpu": 0.5},
    "3gpu_roomy": {0: 0.5, 1: 0.6, 2: 0.7, "cpu": 1.0},
    "cpu": {"cpu": 0.5},
}


class Stop(Exception):
    pass


def model_class(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return getattr(transformers, json.load(f)["architectures"][0])


def write_index(folder):
    """The weight names the Hub stores: 5.6's state dict with its load-time
    conversions reverted (experts one tensor each again), tied copies left
    out, as save_pretrained writes them."""
    cls = model_class(folder)
    config = transformers.AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = cls(config)
    tied = set(getattr(model, "all_tied_weights_keys", {}).keys())
    state = {k: v for k, v in model.state_dict().items() if k not in tied}
    state = revert_weight_conversion(model, state)
    total = sum(v.numel() * 2 for v in state.values())
    index = {"metadata": {"total_size": total},
             "weight_map": {k: "model-00001-of-00001.safetensors" for k in sorted(state)}}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=0, sort_keys=True)
        f.write("\n")


def plans_for(folder, dtype_name):
    cls = model_class(folder)
    original = modeling_utils._get_device_map
    out = {}

    def record(model, device_map, max_memory, hf_quantizer):
        sizes, _ = compute_module_sizes(model, hf_quantizer)
        modules = dict(model.named_modules())
        out["sizes"] = {k: int(v) for k, v in sizes.items() if k in modules}
        out["no_split"] = sorted(model._no_split_modules or [])
        total = sizes[""]
        out["maps"] = []
        for budget_name, shares in BUDGETS.items():
            budget = {k: int(total * v) for k, v in shares.items()}
            for strategy in STRATEGIES:
                if strategy != "sequential" and budget_name == "cpu":
                    continue  # no GPU to balance: the same map as sequential
                dm = original(model, strategy, dict(budget), hf_quantizer)
                out["maps"].append({"budget": budget_name,
                                    "max_memory": {str(k): v for k, v in budget.items()},
                                    "strategy": strategy,
                                    "device_map": [[k, v] for k, v in dm.items()]})
        raise Stop()

    modeling_utils._get_device_map = record
    try:
        cls.from_pretrained(folder, device_map="auto", dtype=DTYPES[dtype_name])
    except Stop:
        pass
    finally:
        modeling_utils._get_device_map = original
    return out


def main():
    names = sys.argv[1:] or sorted(os.listdir(os.path.join(HERE, "configs")))
    generator = {"transformers": transformers.__version__, "torch": torch.__version__,
                 "accelerate": __import__("accelerate").__version__}
    for name in names:
        folder = os.path.join(HERE, "configs", name)
        write_index(folder)
        result = {"generator": generator, "dtypes": {d: plans_for(folder, d) for d in DTYPES}}
        with open(os.path.join(folder, "transformers-5.6.json"), "w") as f:
            json.dump(result, f, indent=0, sort_keys=True)
            f.write("\n")
        print(name, {d: len(c["maps"]) for d, c in result["dtypes"].items()}, flush=True)


if __name__ == "__main__":
    main()
