"""gpt-oss (model_type gpt_oss): the tiny checkpoint make_checkpoint.py writes and the
plain-torch forward pass ref_models.py runs, written from transformers 5.6's
models/gpt_oss (modeling_gpt_oss.py, configuration_gpt_oss.py) and
modeling_rope_utils._compute_yarn_parameters.

Checkpoint layout (the Hub's unquantized saves, e.g. the BF16 re-uploads of
gpt-oss-20b; 5.6 reads them 1:1, conversion_mapping.py has no gpt_oss entry):
  model.embed_tokens.weight [V, H]
  model.layers.N.input_layernorm.weight [H], .post_attention_layernorm.weight [H]
  model.layers.N.self_attn.{q,k,v}_proj.{weight,bias}, .o_proj.{weight,bias}
  model.layers.N.self_attn.sinks [heads]
  model.layers.N.mlp.router.weight [E, H], .mlp.router.bias [E]
  model.layers.N.mlp.experts.gate_up_proj [E, H, 2I]   (x @ W; columns gate, up, gate, up, ...)
  model.layers.N.mlp.experts.gate_up_proj_bias [E, 2I]
  model.layers.N.mlp.experts.down_proj [E, I, H], .down_proj_bias [E, H]
  model.norm.weight [H], lm_head.weight [V, H] (untied)
"""
import math

import torch
import torch.nn.functional as F

ALPHA = 1.702  # GptOssExperts.alpha
LIMIT = 7.0    # GptOssExperts.limit (fixed in 5.6; config.json's swiglu_limit is not read)


def config(tied):
    """The fields a GptOssConfig save writes (gpt-oss-20b's config.json, scaled down):
    4.x-style rope_scaling (yarn) beside rope_theta, alternating layer_types, a
    sliding window shorter than the test's sequence."""
    L = 3
    return {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 179,
        "experts_per_token": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 40,
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 24,
        "layer_types": ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)],
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": L,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "output_router_logits": False,
        "pad_token_id": 178,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 4,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": tied,
        "use_cache": True,
        "vocab_size": 180,
    }


def layout(c, prefix, tied):
    """(name, shape, kind) in the order the Hub's files list them (sorted per layer)."""
    H, V, I, E = c["hidden_size"], c["vocab_size"], c["intermediate_size"], c["num_local_experts"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    p = "model." if prefix else ""
    t = [(p + "embed_tokens.weight", [V, H], "embed")]
    for i in range(c["num_hidden_layers"]):
        l = "%slayers.%d." % (p, i)
        t += [(l + "input_layernorm.weight", [H], "norm"),
              (l + "mlp.experts.down_proj", [E, I, H], "expert_down"),
              (l + "mlp.experts.down_proj_bias", [E, H], "bias"),
              (l + "mlp.experts.gate_up_proj", [E, H, 2 * I], "expert_gate_up"),
              (l + "mlp.experts.gate_up_proj_bias", [E, 2 * I], "bias"),
              (l + "mlp.router.bias", [E], "router_bias"),
              (l + "mlp.router.weight", [E, H], "linear"),
              (l + "post_attention_layernorm.weight", [H], "norm"),
              (l + "self_attn.k_proj.bias", [nkv * hd], "bias"),
              (l + "self_attn.k_proj.weight", [nkv * hd, H], "linear"),
              (l + "self_attn.o_proj.bias", [H], "bias"),
              (l + "self_attn.o_proj.weight", [H, nh * hd], "linear"),
              (l + "self_attn.q_proj.bias", [nh * hd], "bias"),
              (l + "self_attn.q_proj.weight", [nh * hd, H], "linear"),
              (l + "self_attn.sinks", [nh], "sinks"),
              (l + "self_attn.v_proj.bias", [nkv * hd], "bias"),
              (l + "self_attn.v_proj.weight", [nkv * hd, H], "linear")]
    t.append((p + "norm.weight", [H], "norm"))
    if not tied:
        t.append(("lm_head.weight", [V, H], "embed"))
    return t


def make_tensor(shape, kind, gen, common):
    """The kinds only gpt-oss has; `common` (make_checkpoint.make_tensor) makes the others."""
    if kind == "expert_gate_up":  # [E, in, out]: large enough that the clamp at 7 bites
        return torch.randn(shape, generator=gen) * (4.0 / math.sqrt(shape[1]))
    if kind == "expert_down":     # [E, in, out]
        return torch.randn(shape, generator=gen) * (1.0 / math.sqrt(shape[1]))
    if kind == "router_bias":
        return torch.randn(shape, generator=gen) * 0.5
    if kind == "sinks":           # a sink about as large as a score: it takes a real share
        return torch.randn(shape, generator=gen) + 0.5
    return common(shape, kind, gen)


def yarn_inv_freq(cfg, dim):
    """(inv_freq, attention_factor): _compute_yarn_parameters, or the default rope."""
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {
        "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        "original_max_position_embeddings": 4096}
    base = rp.get("rope_theta", cfg.get("rope_theta", 150000.0))
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    rtype = rp.get("rope_type", rp.get("type", "default"))
    if rtype == "default":
        return 1.0 / pos_freqs, 1.0
    if rtype != "yarn":
        raise NotImplementedError("rope_type " + rtype)
    orig = rp.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    factor = rp.get("factor") or cfg["max_position_embeddings"] / orig

    def get_mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
    attention_factor = rp.get("attention_factor")
    if attention_factor is None:
        if rp.get("mscale") and rp.get("mscale_all_dim"):
            attention_factor = get_mscale(factor, rp["mscale"]) / get_mscale(factor, rp["mscale_all_dim"])
        else:
            attention_factor = get_mscale(factor)
    beta_fast = rp.get("beta_fast") or 32
    beta_slow = rp.get("beta_slow") or 1

    def correction_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))
    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rp.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv, attention_factor


class GptOss:
    """GptOssForCausalLM (transformers 5.6), eager attention with sinks."""

    kv_dtype = None  # the cache's dtype where it differs

    def __init__(self, cfg, tensors, dtype):
        w = {}
        for k, v in tensors.items():
            w[k[len("model."):] if k.startswith("model.") else k] = v.to(dtype)
        self.w, self.cfg, self.dtype = w, cfg, dtype
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg["num_key_value_heads"]
        self.hd = cfg["head_dim"]
        self.L = cfg["num_hidden_layers"]
        self.E = cfg["num_local_experts"]
        self.k = cfg["num_experts_per_tok"]
        self.eps = cfg["rms_norm_eps"]
        self.window = cfg.get("sliding_window")
        self.types = cfg.get("layer_types") or [
            "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(self.L)]
        self.inv_freq, self.attention_scaling = yarn_inv_freq(cfg, self.hd)
        self.lm_head = w["embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]

    def rms(self, x, weight):
        # GptOssRMSNorm: weight times the fp32 normalised value, then the input dtype
        f = x.float()
        f = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.eps)
        return (weight * f).to(x.dtype)

    def lin(self, x, p):
        return F.linear(x, self.w[p + ".weight"], self.w.get(p + ".bias"))

    def rope(self, x, cos, sin):
        # _apply_rotary_emb: the two halves rotated by cos/sin of dim/2 frequencies
        a, b = torch.chunk(x, 2, dim=-1)
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)

    def attention(self, i, p, q, k, v, T, S):
        groups = self.nh // self.nkv
        kr = k[:, None].expand(self.nkv, groups, S, self.hd).reshape(self.nh, S, self.hd)
        vr = v[:, None].expand(self.nkv, groups, S, self.hd).reshape(self.nh, S, self.hd)
        a = torch.matmul(q, kr.transpose(1, 2)) * self.hd ** -0.5
        # create_causal_mask / create_sliding_window_causal_mask: query at absolute
        # position S - T + t sees key j iff j <= pos and (sliding) j > pos - window
        qpos = torch.arange(S - T, S).unsqueeze(1)
        kpos = torch.arange(S).unsqueeze(0)
        hidden = kpos > qpos
        if self.types[i] == "sliding_attention" and self.window:
            hidden = hidden | (kpos <= qpos - self.window)
        a = a + torch.zeros(T, S, dtype=a.dtype).masked_fill(hidden, torch.finfo(a.dtype).min)
        sinks = self.w[p + "self_attn.sinks"].reshape(-1, 1, 1).expand(-1, T, 1)
        combined = torch.cat([a, sinks], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = F.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1]
        return torch.matmul(probs.to(vr.dtype), vr)

    def moe(self, p, x):
        # GptOssTopKRouter: logits with bias, top-k of the logits, softmax over them
        logits = F.linear(x, self.w[p + "mlp.router.weight"], self.w[p + "mlp.router.bias"])
        top, index = torch.topk(logits, self.k, dim=-1)
        scores = F.softmax(top, dim=1, dtype=top.dtype)
        gu, gub = self.w[p + "mlp.experts.gate_up_proj"], self.w[p + "mlp.experts.gate_up_proj_bias"]
        dn, dnb = self.w[p + "mlp.experts.down_proj"], self.w[p + "mlp.experts.down_proj_bias"]
        out = torch.zeros_like(x)
        mask = F.one_hot(index, num_classes=self.E).permute(2, 1, 0)
        for e in range(self.E):
            pos, tok = torch.where(mask[e])
            if tok.numel() == 0:
                continue
            h = x[tok] @ gu[e] + gub[e]
            gate, up = h[..., ::2], h[..., 1::2]
            gate = gate.clamp(min=None, max=LIMIT)
            up = up.clamp(min=-LIMIT, max=LIMIT)
            glu = gate * torch.sigmoid(gate * ALPHA)
            y = ((up + 1) * glu) @ dn[e] + dnb[e]
            out.index_add_(0, tok, (y * scores[tok, pos, None]).to(x.dtype))
        return out

    def forward(self, ids, cache, start):
        T = ids.shape[0]
        h = self.w["embed_tokens.weight"][ids]
        pos = torch.arange(start, start + T).float()
        freqs = torch.outer(pos, self.inv_freq.float())
        cos = (freqs.cos() * self.attention_scaling).to(h.dtype)
        sin = (freqs.sin() * self.attention_scaling).to(h.dtype)
        new_cache = []
        for i in range(self.L):
            p = "layers.%d." % i
            r = h
            x = self.rms(h, self.w[p + "input_layernorm.weight"])
            q = self.lin(x, p + "self_attn.q_proj").view(T, self.nh, self.hd).transpose(0, 1)
            k = self.lin(x, p + "self_attn.k_proj").view(T, self.nkv, self.hd).transpose(0, 1)
            v = self.lin(x, p + "self_attn.v_proj").view(T, self.nkv, self.hd).transpose(0, 1)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            if self.kv_dtype is not None:
                k, v = k.to(self.kv_dtype).to(k.dtype), v.to(self.kv_dtype).to(v.dtype)
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=1)
                v = torch.cat([cache[i][1], v], dim=1)
            new_cache.append((k, v))
            o = self.attention(i, p, q, k, v, T, k.shape[1])
            o = o.transpose(0, 1).reshape(T, self.nh * self.hd)
            h = r + self.lin(o, p + "self_attn.o_proj")
            h = h + self.moe(p, self.rms(h, self.w[p + "post_attention_layernorm.weight"]))
        h = self.rms(h, self.w["norm.weight"])
        return F.linear(h, self.lm_head).float(), new_cache
