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
import re
import sys
import types


def planning_only_shims():
    """transformers 5.6 checks at import that its pinned dependencies are
    installed (dependency_versions_check.py) and imports the Rust tokenizers
    package at module level, but planning tokenizes nothing; the FP8
    integration imports Triton at module level for its GPU kernels
    (integrations/finegrained_fp8.py:16), which planning never calls. Where a
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
    stand_ins = []
    for package in ("tokenizers", "triton"):
        try:
            real(package)
        except importlib.metadata.PackageNotFoundError:
            stand_ins.append(package)
    if not stand_ins:
        return

    class Named(type):  # a placeholder class whose attributes are placeholder classes too
        def __getattr__(cls, n):
            if n.startswith("__"):
                raise AttributeError(n)
            return Named(n, (Placeholder,), {})

        def __getitem__(cls, key):
            return cls

    class Placeholder(metaclass=Named):
        def __init__(self, *a, **k):
            pass

        def __call__(self, *a, **k):
            return Placeholder()

        def __getattr__(self, n):
            return Placeholder()

        def __getitem__(self, key):
            return Placeholder()

    class Module(types.ModuleType):
        __path__ = []

        def __getattr__(self, n):
            if n.startswith("__"):
                raise AttributeError(n)
            return Named(n, (Placeholder,), {})

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in stand_ins:
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            m = Module(spec.name)
            m.__version__ = answers.get(spec.name, "0")
            if spec.name == "triton":  # FP8Experts sizes its scales with it
                m.cdiv = lambda a, b: -(-a // b)
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
# The machine a quantized checkpoint is planned for, as its quantizer asks
# about it: no GPU (this CPU), or a CUDA GPU of this compute capability with
# Triton and the kernels package installed. Unquantized models plan alike on
# all of them and are run for "cpu" only.
TARGETS = {"cpu": None, "h100": (9, 0), "rtx4090": (8, 9), "a100": (8, 0), "v100": (7, 0)}
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


class EmulatedGpu:
    """What a CUDA machine with Triton and the kernels package answers to the
    quantizers' environment checks (quantizer_mxfp4.py:65-159,
    quantizer_finegrained_fp8.py:30-77) and to get_max_memory's allocator
    queries, and the Hub kernel replace_with_mxfp4_linear fetches (used only
    by forward passes; a stand-in here). The planning code itself runs
    unchanged."""

    def __init__(self, capability):
        self.capability = capability
        self.saved = []

    def patch(self, owner, name, value):
        self.saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def __enter__(self):
        if self.capability is None:
            # torch >= 2.7 answers None on a machine without an accelerator;
            # Debian 13's 2.6 raises instead (quantizer_mxfp4.py:78 asks).
            self.patch(torch.accelerator, "current_accelerator", lambda *a, **k: None)
            return self
        import transformers.quantizers.quantizer_mxfp4 as mx
        self.patch(torch.cuda, "is_available", lambda: True)
        self.patch(torch.cuda, "device_count", lambda: 3)
        self.patch(torch.cuda, "get_device_capability", lambda *a: self.capability)
        self.patch(torch.cuda, "memory_reserved", lambda *a: 0)
        self.patch(torch.cuda, "memory_allocated", lambda *a: 0)
        self.patch(torch.accelerator, "current_accelerator", lambda *a: torch.device("cuda"))
        self.patch(mx, "is_triton_available", lambda *a: True)
        self.patch(mx, "is_kernels_available", lambda *a: True)
        import transformers.integrations.hub_kernels as hub
        self.patch(hub, "get_kernel", lambda *a, **k: types.SimpleNamespace())
        return self

    def __exit__(self, *exc):
        for owner, name, value in reversed(self.saved):
            setattr(owner, name, value)
        self.saved = []
        return False


def model_class(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return getattr(transformers, json.load(f)["architectures"][0])


def write_index(folder, quantized_modules):
    """The weight names the Hub stores: 5.6's state dict with its load-time
    conversions reverted (experts one tensor each again), tied copies left
    out, as save_pretrained writes them. A quantized release stores its
    quantized weights as the format names them: MXFP4 experts as
    `_blocks` and `_scales`, each FP8 projection with its `weight_scale_inv`,
    a bitsandbytes 4-bit weight with its `absmax`, `quant_map`, nested
    statistics and `quant_state`, an 8-bit one with `SCB` and `weight_format`
    (the names quantizer_bnb_4bit.py:174-181 and quantizer_bnb_8bit.py:173
    read; `quantized_modules`: the modules 5.6's quantizer replaced on a
    GPU)."""
    cls = model_class(folder)
    config = transformers.AutoConfig.from_pretrained(folder)
    method = (getattr(config, "quantization_config", None) or {}).get("quant_method")
    with torch.device("meta"):
        model = cls(config)
    tied = set(getattr(model, "all_tied_weights_keys", {}).keys())
    state = {k: v for k, v in model.state_dict().items() if k not in tied}
    state = revert_weight_conversion(model, state)
    names = set(state)
    if method == "mxfp4":
        for n in list(names):
            module, leaf = n.rsplit(".", 1)
            if module in quantized_modules and leaf in ("gate_up_proj", "down_proj"):
                names.remove(n)
                names.update({n + "_blocks", n + "_scales"})
    elif method == "bitsandbytes":
        q = config.quantization_config
        four = q.get("load_in_4bit", False)
        stats = ["absmax", "quant_map", "nested_absmax", "nested_quant_map",
                 "quant_state.bitsandbytes__" + q.get("bnb_4bit_quant_type", "fp4")]
        for n in list(names):
            module, leaf = n.rsplit(".", 1)
            if module in quantized_modules and leaf == "weight":
                names.update([n + "." + s for s in stats] if four else [module + ".SCB", n + "_format"])
    elif method == "fp8":
        for n in list(names):
            if not n.endswith(".weight"):
                continue
            module = n[: -len(".weight")]
            fused = re.sub(r"\.experts\.\d+\.\w+$", ".experts", module)
            if module in quantized_modules or fused in quantized_modules:
                names.add(n + "_scale_inv")
    total = sum(v.numel() * 2 for v in state.values())
    index = {"metadata": {"total_size": total},
             "weight_map": {k: "model-00001-of-00001.safetensors" for k in sorted(names)}}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=0, sort_keys=True)
        f.write("\n")


def plans_for(folder, dtype_name, target):
    cls = model_class(folder)
    original = modeling_utils._get_device_map
    out = {}

    def record(model, device_map, max_memory, hf_quantizer):
        sizes, _ = compute_module_sizes(model, hf_quantizer)
        modules = dict(model.named_modules())
        out["sizes"] = {k: int(v) for k, v in sizes.items() if k in modules}
        out["no_split"] = sorted(model._no_split_modules or [])
        if hf_quantizer is not None:
            out["dequantized"] = bool(getattr(hf_quantizer.quantization_config, "dequantize", False))
            out["quantized_modules"] = sorted(n for n, m in modules.items()
                                              if type(m).__name__.startswith(("FP8", "Mxfp4", "Linear4bit",
                                                                              "Linear8bitLt")))
        total = sizes[""]
        out["maps"] = []
        for budget_name, shares in BUDGETS.items():
            budget = {k: int(total * v) for k, v in shares.items()}
            for strategy in STRATEGIES:
                if strategy != "sequential" and budget_name == "cpu":
                    continue  # no GPU to balance: the same map as sequential
                refused = []
                if hf_quantizer is not None:
                    # The map _get_device_map computes, and whether the
                    # quantizer's check of it at the end refuses it.
                    check = hf_quantizer.validate_environment

                    def validate(*a, **k):
                        try:
                            check(*a, **k)
                        except (ValueError, RuntimeError) as e:
                            refused.append(str(e))

                    hf_quantizer.validate_environment = validate
                try:
                    dm = original(model, strategy, dict(budget), hf_quantizer)
                finally:
                    if hf_quantizer is not None:
                        hf_quantizer.validate_environment = check
                case = {"budget": budget_name, "max_memory": {str(k): v for k, v in budget.items()},
                        "strategy": strategy, "device_map": [[k, v] for k, v in dm.items()]}
                if refused:
                    case["refused"] = refused[0]
                out["maps"].append(case)
        raise Stop()

    modeling_utils._get_device_map = record
    try:
        with EmulatedGpu(TARGETS[target]):
            cls.from_pretrained(folder, device_map="auto", dtype=DTYPES[dtype_name])
    except Stop:
        pass
    finally:
        modeling_utils._get_device_map = original
    return out


def plans_or_error(folder, dtype_name, target):
    """plans_for, or the error from_pretrained stops with before it has a
    map (what a user of that machine would see)."""
    try:
        return plans_for(folder, dtype_name, target)
    except Exception as e:  # noqa: BLE001 - recorded as the reference's answer
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    names = sys.argv[1:] or sorted(os.listdir(os.path.join(HERE, "configs")))
    generator = {"transformers": transformers.__version__, "torch": torch.__version__,
                 "accelerate": __import__("accelerate").__version__}
    for name in names:
        folder = os.path.join(HERE, "configs", name)
        with open(os.path.join(folder, "config.json")) as f:
            quantized = "quantization_config" in json.load(f)
        if quantized:
            # The index first, from the modules the quantizer replaces where
            # it stays a quantizer; then every target, in the checkpoint's
            # own bfloat16.
            write_index(folder, [])
            try:
                replaced = plans_for(folder, "bfloat16", "h100")["quantized_modules"]
            except AttributeError:
                # 5.6's FP8Experts reads config.num_experts, which
                # DeepseekV3Config lacks (finegrained_fp8.py:599): the GPU
                # load fails, recorded below as that target's answer. Only
                # to learn which modules it would replace (the index's
                # weight_scale_inv names) is the name lent here.
                config_class = type(transformers.AutoConfig.from_pretrained(folder))
                config_class.num_experts = property(lambda c: c.n_routed_experts)
                try:
                    replaced = plans_for(folder, "bfloat16", "h100")["quantized_modules"]
                finally:
                    del config_class.num_experts
            write_index(folder, set(replaced))
            result = {"generator": generator,
                      "targets": {t: {"bfloat16": plans_or_error(folder, "bfloat16", t)} for t in TARGETS}}
        else:
            write_index(folder, set())
            result = {"generator": generator, "targets": {"cpu": {d: plans_for(folder, d, "cpu") for d in DTYPES}}}
        with open(os.path.join(folder, "transformers-5.6.json"), "w") as f:
            json.dump(result, f, indent=0, sort_keys=True)
            f.write("\n")
        print(name, {t: {d: (len(c.get("maps", [])), c.get("dequantized"), c.get("error")) for d, c in ds.items()}
                     for t, ds in result["targets"].items()}, flush=True)


if __name__ == "__main__":
    main()
