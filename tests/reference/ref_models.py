"""Plain-torch forward passes that follow transformers' eager code paths.

Each model exposes forward(input_ids[T], cache, start) -> (logits[T, V], cache),
batch size 1, where cache is a per-layer list of (k, v) tensors shaped
[heads, seq, head_dim] (None before the prefill), rounded to the model's
kv_dtype where one is set. forward(ids, None, 0) on a
whole sequence is the no-cache path. A model with drops_cache(past, new)
(Phi-3's longrope) has generate() rerun the whole sequence where it says so.
"""
import math

import torch
import torch.nn.functional as F

import fam_gptoss


def _strip(tensors, prefixes):
    """Maps checkpoint names to names without the model prefix."""
    out = {}
    for name, t in tensors.items():
        for p in prefixes:
            if name.startswith(p):
                name = name[len(p):]
                break
        out[name] = t
    return out


def _up(dtype):
    """transformers' "upcast to float32" spots (RMSNorm, rotary, softmax); float64
    (a diagnostic mode of this reference only) stays float64 instead of being
    rounded down to float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _kept(t, kv_dtype):
    """New keys or values as the cache keeps them: rounded to kv_dtype (an fp16
    checkpoint computed in fp32 keeps its cache in fp16), else as they are."""
    return t if kv_dtype is None else t.to(kv_dtype).to(t.dtype)


def _causal_bias(q_len, k_len, dtype):
    """Additive mask: 0 where key j <= query i (positions offset by k_len - q_len)."""
    past = k_len - q_len
    i = torch.arange(q_len).unsqueeze(1) + past
    j = torch.arange(k_len).unsqueeze(0)
    m = torch.zeros(q_len, k_len, dtype=dtype)
    return m.masked_fill(j > i, torch.finfo(dtype).min)


# ============================================================================ GPT-2

class GPT2:
    """modeling_gpt2.GPT2LMHeadModel: wte + wpe, pre-LN blocks, Conv1D, gelu_new."""

    kv_dtype = None  # the cache's dtype where it differs (_kept)

    def __init__(self, cfg, tensors, dtype):
        w = {k: v.to(dtype) for k, v in _strip(tensors, ["transformer."]).items()}
        self.w, self.cfg, self.dtype = w, cfg, dtype
        self.H = cfg["n_embd"]
        self.nh = cfg["n_head"]
        self.hd = self.H // self.nh
        self.L = cfg["n_layer"]
        self.eps = cfg.get("layer_norm_epsilon", 1e-5)
        if cfg.get("scale_attn_by_inverse_layer_idx") or cfg.get("reorder_and_upcast_attn"):
            raise NotImplementedError("scale_attn_by_inverse_layer_idx/reorder_and_upcast_attn")
        if cfg.get("activation_function", "gelu_new") != "gelu_new":
            raise NotImplementedError(cfg.get("activation_function"))
        self.scale_attn = cfg.get("scale_attn_weights", True)
        tied = cfg.get("tie_word_embeddings", True)
        self.lm_head = w["wte.weight"] if tied or "lm_head.weight" not in w else w["lm_head.weight"]
        if not tied and "lm_head.weight" not in w:
            raise ValueError("tie_word_embeddings is false but lm_head.weight is missing")

    @staticmethod
    def gelu_new(x):
        # NewGELUActivation
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    def ln(self, x, p):
        return F.layer_norm(x, (self.H,), self.w[p + ".weight"], self.w[p + ".bias"], self.eps)

    def conv1d(self, x, p):
        # Conv1D: weight is [in, out]; y = b + x @ W
        return torch.addmm(self.w[p + ".bias"], x, self.w[p + ".weight"])

    def forward(self, ids, cache, start):
        T = ids.shape[0]
        pos = torch.arange(start, start + T)
        h = self.w["wte.weight"][ids] + self.w["wpe.weight"][pos]
        new_cache = []
        for i in range(self.L):
            p = "h.%d." % i
            r = h
            x = self.ln(h, p + "ln_1")
            qkv = self.conv1d(x, p + "attn.c_attn")
            q, k, v = qkv.split(self.H, dim=-1)
            q = q.view(T, self.nh, self.hd).transpose(0, 1)
            k = k.view(T, self.nh, self.hd).transpose(0, 1)
            v = v.view(T, self.nh, self.hd).transpose(0, 1)
            k, v = _kept(k, self.kv_dtype), _kept(v, self.kv_dtype)
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=1)
                v = torch.cat([cache[i][1], v], dim=1)
            new_cache.append((k, v))
            a = torch.matmul(q, k.transpose(-1, -2))
            if self.scale_attn:
                a = a / torch.full([], v.size(-1) ** 0.5, dtype=a.dtype)
            S = k.shape[1]
            keep = torch.tril(torch.ones(S, S, dtype=torch.bool))[S - T:S, :S]
            a = torch.where(keep, a, torch.full([], torch.finfo(a.dtype).min, dtype=a.dtype))
            a = torch.softmax(a, dim=-1).type(v.dtype)
            o = torch.matmul(a, v).transpose(0, 1).reshape(T, self.H)
            o = self.conv1d(o, p + "attn.c_proj")
            h = r + o
            r = h
            x = self.ln(h, p + "ln_2")
            x = self.conv1d(self.gelu_new(self.conv1d(x, p + "mlp.c_fc")), p + "mlp.c_proj")
            h = r + x
        h = self.ln(h, "ln_f")
        return F.linear(h, self.lm_head).float(), new_cache


# ============================================================================ Llama family

def llama3_inv_freq(inv_freq, rs):
    """modeling_rope_utils._compute_llama3_parameters."""
    factor = rs["factor"]
    low_ff = rs["low_freq_factor"]
    high_ff = rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    low_freq_wavelen = old_ctx / low_ff
    high_freq_wavelen = old_ctx / high_ff
    wavelen = 2 * math.pi / inv_freq
    out = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, out)


class LlamaLike:
    """modeling_llama / mistral / qwen2 / qwen3 *ForCausalLM, eager attention."""

    kv_dtype = None  # the cache's dtype where it differs (_kept)

    def __init__(self, cfg, tensors, dtype):
        w = {k: v.to(dtype) for k, v in _strip(tensors, ["model."]).items()}
        self.w, self.cfg, self.dtype = w, cfg, dtype
        self.type = cfg["model_type"]
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or self.H // self.nh
        self.L = cfg["num_hidden_layers"]
        self.eps = cfg["rms_norm_eps"]
        self.scaling = self.hd ** -0.5
        if cfg.get("hidden_act", "silu") != "silu":
            raise NotImplementedError(cfg.get("hidden_act"))
        # Rotary: rope_theta (4.x configs) or rope_parameters (5.x configs)
        rp = cfg.get("rope_parameters") or {}
        theta = cfg.get("rope_theta", rp.get("rope_theta", 10000.0))
        rs = cfg.get("rope_scaling") or (rp if rp.get("rope_type", "default") != "default" else None)
        dim = int(self.hd * cfg.get("partial_rotary_factor", 1.0))
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.attention_scaling = 1.0
        if rs is not None:
            rtype = rs.get("rope_type", rs.get("type", "default"))
            if rtype == "llama3":
                inv_freq = llama3_inv_freq(inv_freq, rs)
            elif rtype != "default":
                raise NotImplementedError("rope_type " + rtype)
        self.inv_freq = inv_freq
        self.windows = self.sliding_windows(cfg)
        tied = cfg.get("tie_word_embeddings", False)
        if tied or "lm_head.weight" not in w:
            if not tied:
                raise ValueError("tie_word_embeddings is false but lm_head.weight is missing")
            self.lm_head = w["embed_tokens.weight"]
        else:
            self.lm_head = w["lm_head.weight"]

    def sliding_windows(self, cfg):
        """Per layer, the window its mask and cache use (None: all positions), read from
        5.6's config classes: MistralConfig.sliding_window defaults to 4096 and slides every
        layer (null: none); MixtralConfig's defaults to None; Qwen2/Qwen3 Config and
        Qwen3MoeConfig keep sliding_window (default 4096) only with use_sliding_window, and
        Qwen2/Qwen3 slide the layers layer_types names, else those from max_window_layers
        (default 28) on; Llama has no window."""
        L = cfg["num_hidden_layers"]
        if self.type in ("mistral", "mixtral"):
            w = cfg.get("sliding_window", 4096 if self.type == "mistral" else None)
            return [w] * L
        if self.type in ("qwen2", "qwen3", "qwen3_moe") and cfg.get("use_sliding_window", False):
            w = cfg.get("sliding_window", 4096)
            if self.type == "qwen3_moe":
                return [w] * L
            types = cfg.get("layer_types") or ["sliding_attention" if i >= cfg.get("max_window_layers", 28)
                                               else "full_attention" for i in range(L)]
            return [w if t == "sliding_attention" else None for t in types]
        return [None] * L

    def rms(self, x, weight):
        # LlamaRMSNorm: fp32 variance, back to the input dtype, then weight *
        input_dtype = x.dtype
        x = x.to(_up(input_dtype))
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return weight * x.to(input_dtype)

    def rope(self, pos, dtype):
        # LlamaRotaryEmbedding.forward: fp32 outer product, cat(freqs, freqs)
        up = _up(dtype)
        freqs = (self.inv_freq[:, None].to(up) @ pos[None, :].to(up)).transpose(0, 1)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype), sin.to(dtype)

    @staticmethod
    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def lin(self, x, p):
        return F.linear(x, self.w[p + ".weight"], self.w.get(p + ".bias"))

    def forward(self, ids, cache, start):
        T = ids.shape[0]
        h = self.w["embed_tokens.weight"][ids]
        pos = torch.arange(start, start + T)
        cos, sin = self.rope(pos, h.dtype)
        cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)  # unsqueeze_dim=1 over heads
        groups = self.nh // self.nkv
        new_cache = []
        for i in range(self.L):
            p = "layers.%d." % i
            r = h
            x = self.rms(h, self.w[p + "input_layernorm.weight"])
            q = self.lin(x, p + "self_attn.q_proj").view(T, self.nh, self.hd)
            k = self.lin(x, p + "self_attn.k_proj").view(T, self.nkv, self.hd)
            v = self.lin(x, p + "self_attn.v_proj").view(T, self.nkv, self.hd)
            if self.type in ("qwen3", "qwen3_moe"):
                q = self.rms(q, self.w[p + "self_attn.q_norm.weight"])
                k = self.rms(k, self.w[p + "self_attn.k_norm.weight"])
            q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            k, v = _kept(k, self.kv_dtype), _kept(v, self.kv_dtype)
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=1)
                v = torch.cat([cache[i][1], v], dim=1)
            window = self.windows[i]
            # DynamicSlidingWindowLayer keeps the last window - 1 positions for the next step
            new_cache.append((k, v) if window is None else (k[:, k.shape[1] - (window - 1):], v[:, v.shape[1] - (window - 1):])
                             if k.shape[1] > window - 1 else (k, v))
            # repeat_kv: [nkv, S, d] -> [nkv * groups, S, d], kv head j serves q heads j*g..j*g+g-1
            S = k.shape[1]
            kr = k[:, None].expand(self.nkv, groups, S, self.hd).reshape(self.nh, S, self.hd)
            vr = v[:, None].expand(self.nkv, groups, S, self.hd).reshape(self.nh, S, self.hd)
            a = torch.matmul(q, kr.transpose(1, 2)) * self.scaling
            a = a + _causal_bias(T, S, a.dtype)
            if window is not None:
                # sliding_window_overlay: key j visible from query i only when j > i - window
                qi = torch.arange(start, start + T)[:, None]
                kj = torch.arange(start + T - S, start + T)[None, :]
                a = a.masked_fill(kj <= qi - window, torch.finfo(a.dtype).min)
            a = torch.softmax(a, dim=-1, dtype=_up(q.dtype)).to(q.dtype)
            o = torch.matmul(a, vr).transpose(0, 1).reshape(T, self.nh * self.hd)
            h = r + self.lin(o, p + "self_attn.o_proj")
            r = h
            x = self.rms(h, self.w[p + "post_attention_layernorm.weight"])
            h = r + self.mlp(i, p, x)
        h = self.rms(h, self.w["norm.weight"])
        return F.linear(h, self.lm_head).float(), new_cache

    def mlp(self, i, p, x):
        # LlamaMLP: down(silu(gate(x)) * up(x))
        return self.lin(F.silu(self.lin(x, p + "mlp.gate_proj")) * self.lin(x, p + "mlp.up_proj"), p + "mlp.down_proj")


# ============================================================================ Mixture of experts

class MoE(LlamaLike):
    """modeling_mixtral.MixtralForCausalLM and modeling_qwen3_moe.Qwen3MoeForCausalLM
    (transformers 5.6): Mistral / Qwen3 attention, and sparse MoE blocks whose experts
    are fused on load as conversion_mapping.py does it (per-expert tensors stacked with
    MergeModulelist(dim=0), gate and up joined with Concatenate(dim=1)), then run by
    the eager *Experts.forward."""

    def __init__(self, cfg, tensors, dtype):
        super().__init__(cfg, tensors, dtype)
        self.mixtral = self.type == "mixtral"
        self.E = cfg["num_local_experts"] if self.mixtral else cfg["num_experts"]
        self.k = cfg["num_experts_per_tok"]
        # MixtralTopKRouter always renormalises; Qwen3MoeTopKRouter iff norm_topk_prob.
        self.norm_topk = True if self.mixtral else cfg.get("norm_topk_prob", False)
        src_names = ("w1", "w3", "w2") if self.mixtral else ("gate_proj", "up_proj", "down_proj")
        self.fused = {}
        for i in range(self.L):
            fused = "layers.%d.mlp." % i
            if fused + "experts.gate_up_proj" in self.w:  # stored as 5.x names it
                self.fused[i] = (self.w[fused + "gate.weight"], self.w[fused + "experts.gate_up_proj"],
                                 self.w[fused + "experts.down_proj"])
                continue
            src = "layers.%d.%s" % (i, "block_sparse_moe." if self.mixtral else "mlp.")
            if src + "gate.weight" not in self.w:
                continue  # a dense layer (mlp_only_layers)
            self.fused[i] = (self.w[src + "gate.weight"],) + fuse_experts(self.w, src + "experts.", self.E, src_names)

    def mlp(self, i, p, x):
        if i not in self.fused:
            return super().mlp(i, p, x)
        router, gate_up, down = self.fused[i]
        router_logits = F.linear(x, router)
        probs = torch.softmax(router_logits.float(), dim=-1)
        top, index = torch.topk(probs, self.k, dim=-1)
        if self.norm_topk:
            top = top / top.sum(dim=-1, keepdim=True)
        if not self.mixtral:
            top = top.to(router_logits.dtype)  # Qwen3MoeTopKRouter casts back; Mixtral's stay float32
        return run_experts(x, index, top, gate_up, down, self.E)


def fuse_experts(w, src, E, names):
    """conversion_mapping.py's MergeModulelist(dim=0) + Concatenate(dim=1) of the experts
    stored as src + "E.<name>.weight": (gate_up [E, 2I, H], down [E, H, I]); names are
    the gate, up and down pieces' names."""
    def stack(n):
        return torch.stack([w["%s%d.%s.weight" % (src, e, n)] for e in range(E)], dim=0)
    return torch.cat([stack(names[0]), stack(names[1])], dim=1), stack(names[2])


def run_experts(x, index, weights, gate_up, down, E):
    """The eager fused *Experts.forward of 5.6 (Mixtral, Qwen3-MoE, DeepSeek-V3): for each
    expert some token picked, in increasing order, silu(gate) * up -> down, times the
    token's weight, rounded to x's dtype and summed per token (index_add_)."""
    out = torch.zeros_like(x)
    mask = F.one_hot(index, num_classes=E).permute(2, 1, 0)  # [E, k, T]
    for e in range(E):
        pos, tok = torch.where(mask[e])
        if tok.numel() == 0:
            continue
        g, u = F.linear(x[tok], gate_up[e]).chunk(2, dim=-1)
        y = F.linear(F.silu(g) * u, down[e])
        y = y * weights[tok, pos, None]
        out.index_add_(0, tok, y.to(out.dtype))
    return out


# ============================================================================ Phi-3

class Phi3:
    """modeling_phi3.Phi3ForCausalLM (transformers 5.6), eager attention: a Llama with
    fused projections (qkv_proj rows = q heads, k heads, v heads; gate_up_proj rows =
    gate, up), partial rotary and the default or longrope rope."""

    kv_dtype = None  # the cache's dtype where it differs (_kept)

    def __init__(self, cfg, tensors, dtype):
        w = {k: v.to(dtype) for k, v in _strip(tensors, ["model."]).items()}
        self.w, self.cfg, self.dtype = w, cfg, dtype
        self.H = cfg.get("hidden_size", 3072)
        self.nh = cfg.get("num_attention_heads", 32)
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or self.H // self.nh
        self.I = cfg.get("intermediate_size", 8192)
        self.L = cfg.get("num_hidden_layers", 32)
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.scaling = self.hd ** -0.5
        # Phi3Model: create_sliding_window_causal_mask when sliding_window is set
        self.window = cfg.get("sliding_window")
        if cfg.get("hidden_act", "silu") != "silu":
            raise NotImplementedError(cfg.get("hidden_act"))
        # Phi3Config.convert_rope_params_to_dict: `rope_scaling or rope_parameters`;
        # rope_theta and partial_rotary_factor set in it by default from the top level.
        rp = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
        rtype = rp.get("rope_type", rp.get("type", "default"))
        if rtype in ("su", "yarn"):
            rtype = "longrope"
        if rtype not in ("default", "longrope"):
            raise NotImplementedError("rope_type " + rtype)
        self.longrope = rtype == "longrope"
        theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
        top = cfg.get("partial_rotary_factor")
        if self.longrope and top is not None:
            # _compute_longrope_parameters -> standardize_rope_params(): the config
            # attribute (config.json's top-level value) overwrites the dict's.
            partial = top
        else:
            partial = rp.get("partial_rotary_factor", 1.0 if top is None else top)
        self.rot = int(self.hd * partial)
        shape = torch.arange(0, self.rot, 2, dtype=torch.int64).float() / self.rot
        self.attention_scaling = 1.0
        if not self.longrope:
            self.inv_short = 1.0 / (theta ** shape)
            self.inv_long = self.inv_short
            self.orig = None
        else:
            # _compute_longrope_parameters; Phi3Config's own original_max_position_embeddings
            # (default 4096) replaces the dict's in standardize_rope_params.
            self.orig = cfg.get("original_max_position_embeddings", 4096)
            factor = rp.get("factor")
            if factor is None:
                factor = cfg.get("max_position_embeddings", 4096) / self.orig
            af = rp.get("attention_factor")
            if af is None:
                af = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(self.orig))
            self.attention_scaling = af
            for key in ("short_factor", "long_factor"):
                if len(rp[key]) != shape.shape[0]:
                    raise ValueError("%s has %d entries, rotary dims / 2 = %d" % (key, len(rp[key]), shape.shape[0]))
            self.inv_short = 1.0 / (torch.tensor(rp["short_factor"], dtype=torch.float32) * theta ** shape)
            self.inv_long = 1.0 / (torch.tensor(rp["long_factor"], dtype=torch.float32) * theta ** shape)
        tied = cfg.get("tie_word_embeddings", False)
        if tied or "lm_head.weight" not in w:
            if not tied:
                raise ValueError("tie_word_embeddings is false but lm_head.weight is missing")
            self.lm_head = w["embed_tokens.weight"]
        else:
            self.lm_head = w["lm_head.weight"]

    def drops_cache(self, past, new):
        """Phi3ForCausalLM.prepare_inputs_for_generation: the first time the sequence
        reaches original_max_position_embeddings + 1 with at most that many positions
        cached, the cache is dropped and the whole sequence is run again."""
        return self.longrope and 0 < past <= self.orig < past + new

    def rms(self, x, weight):
        input_dtype = x.dtype
        x = x.to(_up(input_dtype))
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return weight * x.to(input_dtype)

    def rope(self, pos, dtype):
        # dynamic_rope_update: long_factor when max(position_ids) + 1 passes the original length
        inv = self.inv_long if self.longrope and int(pos[-1]) + 1 > self.orig else self.inv_short
        up = _up(dtype)
        freqs = (inv[:, None].to(up) @ pos[None, :].to(up)).transpose(0, 1)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(dtype), (emb.sin() * self.attention_scaling).to(dtype)

    def rotate(self, x, cos, sin):
        # apply_rotary_pos_emb with rotary_dim = cos.shape[-1]; the rest passes through
        r, rest = x[..., :self.rot], x[..., self.rot:]
        half = r.shape[-1] // 2
        rot_half = torch.cat((-r[..., half:], r[..., :half]), dim=-1)
        return torch.cat([r * cos + rot_half * sin, rest], dim=-1)

    def forward(self, ids, cache, start):
        T = ids.shape[0]
        h = self.w["embed_tokens.weight"][ids]
        cos, sin = self.rope(torch.arange(start, start + T), h.dtype)
        cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)
        groups = self.nh // self.nkv
        qn, kn = self.nh * self.hd, self.nkv * self.hd
        new_cache = []
        for i in range(self.L):
            p = "layers.%d." % i
            r = h
            x = self.rms(h, self.w[p + "input_layernorm.weight"])
            qkv = F.linear(x, self.w[p + "self_attn.qkv_proj.weight"])
            q = qkv[..., :qn].view(T, self.nh, self.hd).transpose(0, 1)
            k = qkv[..., qn:qn + kn].view(T, self.nkv, self.hd).transpose(0, 1)
            v = qkv[..., qn + kn:].view(T, self.nkv, self.hd).transpose(0, 1)
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            k, v = _kept(k, self.kv_dtype), _kept(v, self.kv_dtype)
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=1)
                v = torch.cat([cache[i][1], v], dim=1)
            new_cache.append((k, v))
            S = k.shape[1]
            kr = k[:, None].expand(self.nkv, groups, S, self.hd).reshape(self.nh, S, self.hd)
            vr = v[:, None].expand(self.nkv, groups, S, self.hd).reshape(self.nh, S, self.hd)
            a = torch.matmul(q, kr.transpose(1, 2)) * self.scaling
            bias = _causal_bias(T, S, a.dtype)
            if self.window is not None:
                # sliding_window_overlay: key j visible from query i only when j > i - window
                qi = torch.arange(T).unsqueeze(1) + (S - T)
                kj = torch.arange(S).unsqueeze(0)
                bias = bias.masked_fill(kj <= qi - self.window, torch.finfo(a.dtype).min)
            a = a + bias
            a = torch.softmax(a, dim=-1, dtype=_up(q.dtype)).to(q.dtype)
            o = torch.matmul(a, vr).transpose(0, 1).reshape(T, qn)
            h = r + F.linear(o, self.w[p + "self_attn.o_proj.weight"])  # resid_attn_dropout: identity
            r = h
            x = self.rms(h, self.w[p + "post_attention_layernorm.weight"])
            gate, up = F.linear(x, self.w[p + "mlp.gate_up_proj.weight"]).chunk(2, dim=-1)
            h = r + F.linear(up * F.silu(gate), self.w[p + "mlp.down_proj.weight"])
        h = self.rms(h, self.w["norm.weight"])
        return F.linear(h, self.lm_head).float(), new_cache


# ============================================================================ OPT

class OPT:
    """modeling_opt.OPTForCausalLM: learned positions (offset 2), ReLU, optional
    project_in/project_out, pre-LN (do_layer_norm_before) or post-LN."""

    OFFSET = 2

    kv_dtype = None  # the cache's dtype where it differs (_kept)

    def __init__(self, cfg, tensors, dtype):
        w = {k: v.to(dtype) for k, v in _strip(tensors, ["model.decoder.", "decoder."]).items()}
        self.w, self.cfg, self.dtype = w, cfg, dtype
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.hd = self.H // self.nh
        self.L = cfg["num_hidden_layers"]
        self.scaling = self.hd ** -0.5
        self.pre_ln = cfg.get("do_layer_norm_before", True)
        self.final_ln = self.pre_ln and not cfg.get("_remove_final_layer_norm", False)
        self.proj = cfg.get("word_embed_proj_dim", self.H) != self.H
        if cfg.get("activation_function", "relu") != "relu":
            raise NotImplementedError(cfg.get("activation_function"))
        if not cfg.get("layer_norm_elementwise_affine", True) or not cfg.get("enable_bias", True):
            raise NotImplementedError("layer_norm_elementwise_affine/enable_bias false")
        tied = cfg.get("tie_word_embeddings", True)
        if tied or "lm_head.weight" not in w:
            if not tied:
                raise ValueError("tie_word_embeddings is false but lm_head.weight is missing")
            self.lm_head = w["embed_tokens.weight"]
        else:
            self.lm_head = w["lm_head.weight"]

    def ln(self, x, p):
        return F.layer_norm(x, (self.H,), self.w[p + ".weight"], self.w[p + ".bias"], 1e-5)

    def lin(self, x, p):
        return F.linear(x, self.w[p + ".weight"], self.w.get(p + ".bias"))

    def forward(self, ids, cache, start):
        T = ids.shape[0]
        # OPTDecoder: attention_mask of ones over past + current tokens;
        # positions = cumsum(mask) * mask - 1, sliced to the new tokens, + offset 2
        mask = torch.ones(1, start + T, dtype=torch.long)
        positions = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() - 1
        positions = positions[0, start:]
        x = self.w["embed_tokens.weight"][ids]
        if self.proj:
            x = self.lin(x, "project_in")
        h = x + self.w["embed_positions.weight"][positions + self.OFFSET]
        new_cache = []
        for i in range(self.L):
            p = "layers.%d." % i
            r = h
            if self.pre_ln:
                h = self.ln(h, p + "self_attn_layer_norm")
            q = self.lin(h, p + "self_attn.q_proj") * self.scaling
            k = self.lin(h, p + "self_attn.k_proj")
            v = self.lin(h, p + "self_attn.v_proj")
            q = q.view(T, self.nh, self.hd).transpose(0, 1)
            k = k.view(T, self.nh, self.hd).transpose(0, 1)
            v = v.view(T, self.nh, self.hd).transpose(0, 1)
            k, v = _kept(k, self.kv_dtype), _kept(v, self.kv_dtype)
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=1)
                v = torch.cat([cache[i][1], v], dim=1)
            new_cache.append((k, v))
            S = k.shape[1]
            a = torch.matmul(q, k.transpose(1, 2))
            a = a + _causal_bias(T, S, a.dtype)
            a = torch.softmax(a, dim=-1, dtype=_up(q.dtype)).to(q.dtype)
            o = torch.matmul(a, v).transpose(0, 1).reshape(T, self.H)
            h = r + self.lin(o, p + "self_attn.out_proj")
            if not self.pre_ln:
                h = self.ln(h, p + "self_attn_layer_norm")
            r = h
            if self.pre_ln:
                h = self.ln(h, p + "final_layer_norm")
            h = self.lin(torch.relu(self.lin(h, p + "fc1")), p + "fc2")
            h = r + h
            if not self.pre_ln:
                h = self.ln(h, p + "final_layer_norm")
        if self.final_ln:
            h = self.ln(h, "final_layer_norm")
        if self.proj:
            h = self.lin(h, "project_out")
        return F.linear(h, self.lm_head).float(), new_cache


# ============================================================================ Gemma 3

class Gemma3:
    """modeling_gemma3.Gemma3ForCausalLM (gemma3_text) and the language model of
    Gemma3ForConditionalGeneration (gemma3; text-only prompts, so the vision
    tower and projector never run), eager attention, transformers 5.6.

    Embedding times sqrt(hidden) (a buffer in the model dtype); Gemma3RMSNorm
    (fp32, times 1 + weight, then back); per layer input_layernorm -> attention
    (q_norm/k_norm over head_dim before rotary, scores * query_pre_attn_scalar^-0.5,
    optional tanh softcap, causal mask, sliding layers also hide keys at or
    beyond `sliding_window` positions back) -> post_attention_layernorm ->
    residual, pre_feedforward_layernorm -> down(gelu_tanh(gate) * up) ->
    post_feedforward_layernorm -> residual. Sliding layers keep only the last
    sliding_window - 1 positions in their cache (DynamicSlidingWindowLayer).
    Rotary per layer type: full_attention rope_theta (+ linear rope_scaling),
    sliding_attention rope_local_base_freq."""

    kv_dtype = None  # the cache's dtype where it differs (_kept)

    # Gemma3TextConfig's defaults for keys a config.json may leave out
    DEFAULTS = {"head_dim": 256, "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256, "sliding_window": 4096,
                "rope_theta": 1e6, "rope_local_base_freq": 1e4, "attn_logit_softcapping": None,
                "final_logit_softcapping": None, "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False}

    def __init__(self, cfg, tensors, dtype):
        composite = cfg["model_type"] == "gemma3"
        tc = dict(self.DEFAULTS)
        tc.update((cfg.get("text_config") or {}) if composite else cfg)
        if composite:
            # the Hub's names (language_model.model.*) and transformers 5's (model.language_model.*)
            w = _strip({k: v for k, v in tensors.items() if "language_model" in k or k == "lm_head.weight"},
                       ["language_model.model.", "model.language_model.", "language_model."])
            tied = cfg.get("tie_word_embeddings", True)  # Gemma3Config's, not text_config's
        else:
            w = _strip(tensors, ["model."])
            tied = tc.get("tie_word_embeddings", True)
        self.w = {k: v.to(dtype) for k, v in w.items()}
        self.cfg, self.dtype = tc, dtype  # run_reference reads cfg["vocab_size"]
        if tc["hidden_activation"] != "gelu_pytorch_tanh" or tc["attention_bias"]:
            raise NotImplementedError("hidden_activation/attention_bias")
        if tc.get("use_bidirectional_attention"):
            raise NotImplementedError("use_bidirectional_attention")
        self.H, self.nh, self.nkv = tc["hidden_size"], tc["num_attention_heads"], tc["num_key_value_heads"]
        self.hd, self.L, self.eps = tc["head_dim"], tc["num_hidden_layers"], tc["rms_norm_eps"]
        self.scaling = tc["query_pre_attn_scalar"] ** -0.5
        self.window = tc["sliding_window"]
        self.attn_cap, self.final_cap = tc["attn_logit_softcapping"], tc["final_logit_softcapping"]
        pattern = tc.get("sliding_window_pattern", 6)
        self.types = tc.get("layer_types") or [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(self.L)]
        self.inv_freq = {}
        for t in ("sliding_attention", "full_attention"):
            theta = tc["rope_local_base_freq"] if t == "sliding_attention" else tc["rope_theta"]
            inv = 1.0 / (theta ** (torch.arange(0, self.hd, 2, dtype=torch.int64).float() / self.hd))
            rs = tc.get("rope_scaling") if t == "full_attention" else None
            if rs:
                kind = rs.get("rope_type", rs.get("type"))
                if kind == "linear":
                    inv = inv / rs["factor"]
                elif kind != "default":
                    raise NotImplementedError("rope_type " + kind)
            self.inv_freq[t] = inv
        if tied or "lm_head.weight" not in self.w:
            if not tied:
                raise ValueError("tie_word_embeddings is false but lm_head.weight is missing")
            self.lm_head = self.w["embed_tokens.weight"]
        else:
            self.lm_head = self.w["lm_head.weight"]

    def norm(self, x, weight):
        up = _up(x.dtype)
        y = x.to(up)
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + weight.to(up))).type_as(x)

    def rope(self, t, pos, dtype):
        up = _up(dtype)
        freqs = (self.inv_freq[t][:, None].to(up) @ pos[None, :].to(up)).transpose(0, 1)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def lin(self, x, p):
        return F.linear(x, self.w[p + ".weight"])

    def forward(self, ids, cache, start):
        T = ids.shape[0]
        h = self.w["embed_tokens.weight"][ids] * torch.tensor(self.H ** 0.5, dtype=self.dtype)
        pos = torch.arange(start, start + T)
        ropes = {t: self.rope(t, pos, h.dtype) for t in set(self.types)}
        groups = self.nh // self.nkv
        new_cache = []
        for i in range(self.L):
            p = "layers.%d." % i
            sliding = self.types[i] == "sliding_attention"
            cos, sin = ropes[self.types[i]]
            r = h
            x = self.norm(h, self.w[p + "input_layernorm.weight"])
            q = self.lin(x, p + "self_attn.q_proj").view(T, self.nh, self.hd).transpose(0, 1)
            k = self.lin(x, p + "self_attn.k_proj").view(T, self.nkv, self.hd).transpose(0, 1)
            v = self.lin(x, p + "self_attn.v_proj").view(T, self.nkv, self.hd).transpose(0, 1)
            q = self.norm(q, self.w[p + "self_attn.q_norm.weight"])
            k = self.norm(k, self.w[p + "self_attn.k_norm.weight"])
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            k, v = _kept(k, self.kv_dtype), _kept(v, self.kv_dtype)
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=1)
                v = torch.cat([cache[i][1], v], dim=1)
            S = k.shape[1]
            # absolute positions: queries start..start+T-1, the S keys end at start+T-1
            qpos = torch.arange(start, start + T).unsqueeze(1)
            kpos = torch.arange(start + T - S, start + T).unsqueeze(0)
            hide = kpos > qpos
            if sliding and self.window is not None:
                hide = hide | (kpos <= qpos - self.window)
                new_cache.append((k[:, -(self.window - 1):] if self.window > 1 else k[:, :0],
                                  v[:, -(self.window - 1):] if self.window > 1 else v[:, :0]))
            else:
                new_cache.append((k, v))
            kr = k[:, None].expand(self.nkv, groups, S, self.hd).reshape(self.nh, S, self.hd)
            vr = v[:, None].expand(self.nkv, groups, S, self.hd).reshape(self.nh, S, self.hd)
            a = torch.matmul(q, kr.transpose(1, 2)) * self.scaling
            if self.attn_cap is not None:
                a = torch.tanh(a / self.attn_cap) * self.attn_cap
            a = a + torch.zeros(T, S, dtype=a.dtype).masked_fill(hide, torch.finfo(a.dtype).min)
            a = torch.softmax(a, dim=-1, dtype=_up(q.dtype)).to(q.dtype)
            o = torch.matmul(a, vr).transpose(0, 1).reshape(T, self.nh * self.hd)
            o = self.lin(o, p + "self_attn.o_proj")
            h = r + self.norm(o, self.w[p + "post_attention_layernorm.weight"])
            r = h
            x = self.norm(h, self.w[p + "pre_feedforward_layernorm.weight"])
            x = self.lin(F.gelu(self.lin(x, p + "mlp.gate_proj"), approximate="tanh") * self.lin(x, p + "mlp.up_proj"),
                         p + "mlp.down_proj")
            h = r + self.norm(x, self.w[p + "post_feedforward_layernorm.weight"])
        h = self.norm(h, self.w["norm.weight"])
        logits = F.linear(h, self.lm_head)
        if self.final_cap is not None:
            logits = torch.tanh(logits / self.final_cap) * self.final_cap
        return logits.float(), new_cache


def build_model(cfg, tensors, dtype=torch.float32):
    mt = cfg["model_type"]
    if mt == "gpt2":
        return GPT2(cfg, tensors, dtype)
    if mt in ("llama", "mistral", "qwen2", "qwen3"):
        return LlamaLike(cfg, tensors, dtype)
    if mt == "opt":
        return OPT(cfg, tensors, dtype)
    if mt in ("gemma3_text", "gemma3"):
        return Gemma3(cfg, tensors, dtype)
    if mt == "phi3":
        return Phi3(cfg, tensors, dtype)
    if mt in ("mixtral", "qwen3_moe"):
        return MoE(cfg, tensors, dtype)
    if mt == "gpt_oss":
        return fam_gptoss.GptOss(cfg, tensors, dtype)
    if mt == "deepseek_v3":
        import fam_deepseek  # its own module: this file is long enough
        return fam_deepseek.DeepseekV3(cfg, tensors, dtype)
    raise NotImplementedError("model_type " + mt)


@torch.no_grad()
def generate(model, prompt_ids, max_new_tokens):
    """Prefill + greedy decode with the KV cache. Returns (token_ids, prefill_logits,
    step_logits); step_logits[i] are the logits at the input position of token_ids[i],
    from which token_ids[i + 1] was chosen (so there are max_new_tokens - 1 of them)."""
    ids = torch.tensor(prompt_ids, dtype=torch.long)
    logits, cache = model.forward(ids, None, 0)
    prefill = logits
    tokens, steps = [], []
    pos = ids.shape[0]
    drops_cache = getattr(model, "drops_cache", None)
    for n in range(max_new_tokens):
        nxt = int(torch.argmax(logits[-1]))
        tokens.append(nxt)
        if n == max_new_tokens - 1:
            break
        if drops_cache is not None and drops_cache(pos, 1):
            logits, cache = model.forward(torch.tensor(list(prompt_ids) + tokens, dtype=torch.long), None, 0)
            logits = logits[-1:]
        else:
            logits, cache = model.forward(torch.tensor([nxt], dtype=torch.long), cache, pos)
        steps.append(logits[0])
        pos += 1
    return tokens, prefill, steps


@torch.no_grad()
def full_logits(model, ids):
    """No-cache path: the whole sequence in one forward."""
    logits, _ = model.forward(torch.tensor(ids, dtype=torch.long), None, 0)
    return logits
