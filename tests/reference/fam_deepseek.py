"""DeepSeek-V3 for the reference scripts: a small config and the Hub's tensor layout
(make_checkpoint.py), and the forward pass in plain torch (ref_models.py), written
from transformers 5.6's modeling_deepseek_v3.py (eager attention, the DynamicCache
keeping every head's decompressed keys and values, as transformers does; the engine
caches MLA's compressed latent instead, so the two caches are independent).

Families:
  deepseek_v3      q LoRA (q_a_proj, q_a_layernorm, q_b_proj), yarn rope with mscale
                   and mscale_all_dim, interleaved rope dims, norm_topk_prob, 2 shared
                   experts, one multi-token-prediction layer stored after the decoder
                   layers (model.layers.3.*, which transformers ignores)
  deepseek_v3-mha  q_proj (q_lora_rank null), attention_bias, default rope, rope dims
                   not interleaved, norm_topk_prob false
"""
import math

import torch
import torch.nn.functional as F

from ref_models import _causal_bias, _kept, _strip, _up, fuse_experts, run_experts

FAMILIES = ["deepseek_v3", "deepseek_v3-mha"]


def config(family, tied):
    """The fields a DeepseekV3Config save writes, at a tiny size: 3 layers, the first
    dense, 8 routed experts in 4 groups of which 2 are kept, 2 picked per token."""
    mha = family == "deepseek_v3-mha"
    c = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": mha,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 48,
        "kv_lora_rank": 16,
        "max_position_embeddings": 64,
        "model_type": "deepseek_v3",
        "moe_intermediate_size": 20,
        "n_group": 4,
        "n_routed_experts": 8,
        "n_shared_experts": 2,
        "norm_topk_prob": not mha,
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_key_value_heads": 4,
        "num_nextn_predict_layers": 0 if mha else 1,
        "q_lora_rank": None if mha else 24,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 8,
        "rms_norm_eps": 1e-06,
        "rope_interleave": not mha,
        "rope_theta": 10000.0,
        "routed_scaling_factor": 2.5,
        "tie_word_embeddings": tied,
        "topk_group": 2,
        "use_cache": True,
        "v_head_dim": 12,
        "vocab_size": 180,
    }
    # DeepSeek-V3's own rope_scaling (factor 40, original 4096), scaled down so that
    # the ramp between interpolation and extrapolation falls inside the 4 frequencies.
    c["rope_scaling"] = None if mha else {"beta_fast": 32, "beta_slow": 1, "factor": 4.0, "mscale": 1.0,
                                          "mscale_all_dim": 1.0, "original_max_position_embeddings": 16,
                                          "type": "yarn"}
    return c


def layout(c, prefix, tied):
    """The Hub's names in state_dict order: experts one by one (mlp.experts.E.*), the
    router's weight and its e_score_correction_bias, the shared experts; then the
    multi-token-prediction layers transformers drops."""
    H, V = c["hidden_size"], c["vocab_size"]
    nh, E = c["num_attention_heads"], c["n_routed_experts"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    kvl, rope, vd = c["kv_lora_rank"], c["qk_rope_head_dim"], c["v_head_dim"]
    I, M = c["intermediate_size"], c["moe_intermediate_size"]
    S = M * c["n_shared_experts"]
    bias = c["attention_bias"]
    p = "model." if prefix else ""
    t = [(p + "embed_tokens.weight", [V, H], "embed")]

    def mlp(x, inner):
        return [(x + "gate_proj.weight", [inner, H], "linear"), (x + "up_proj.weight", [inner, H], "linear"),
                (x + "down_proj.weight", [H, inner], "linear")]

    for i in range(c["num_hidden_layers"]):
        a = "%slayers.%d.self_attn." % (p, i)
        if c["q_lora_rank"] is None:
            t.append((a + "q_proj.weight", [nh * qk, H], "linear"))
        else:
            ql = c["q_lora_rank"]
            t.append((a + "q_a_proj.weight", [ql, H], "linear"))
            if bias:
                t.append((a + "q_a_proj.bias", [ql], "bias"))
            t += [(a + "q_a_layernorm.weight", [ql], "norm"), (a + "q_b_proj.weight", [nh * qk, ql], "linear")]
        t.append((a + "kv_a_proj_with_mqa.weight", [kvl + rope, H], "linear"))
        if bias:
            t.append((a + "kv_a_proj_with_mqa.bias", [kvl + rope], "bias"))
        t += [(a + "kv_a_layernorm.weight", [kvl], "norm"),
              (a + "kv_b_proj.weight", [nh * (c["qk_nope_head_dim"] + vd), kvl], "linear"),
              (a + "o_proj.weight", [H, nh * vd], "linear")]
        if bias:
            t.append((a + "o_proj.bias", [H], "bias"))
        m = "%slayers.%d.mlp." % (p, i)
        if i < c["first_k_dense_replace"]:
            t += mlp(m, I)
        else:
            for e in range(E):
                t += mlp("%sexperts.%d." % (m, e), M)
            t += [(m + "gate.weight", [E, H], "linear"), (m + "gate.e_score_correction_bias", [E], "bias")]
            t += mlp(m + "shared_experts.", S)
        l = "%slayers.%d." % (p, i)
        t += [(l + "input_layernorm.weight", [H], "norm"), (l + "post_attention_layernorm.weight", [H], "norm")]
    t.append((p + "norm.weight", [H], "norm"))
    for j in range(c["num_nextn_predict_layers"]):  # a few of DeepSeek-V3's MTP tensors
        l = "%slayers.%d." % (p, c["num_hidden_layers"] + j)
        t += [(l + "enorm.weight", [H], "norm"), (l + "hnorm.weight", [H], "norm"),
              (l + "eh_proj.weight", [H, 2 * H], "linear"), (l + "shared_head.norm.weight", [H], "norm")]
    if not tied:
        t.append(("lm_head.weight", [V, H], "embed"))
    return t


def stored_dtype(name, dtype):
    """The router's correction bias stays float32 in any save (_keep_in_fp32_modules_strict)."""
    return torch.float32 if name.endswith("e_score_correction_bias") else dtype


def yarn_get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


class DeepseekV3:
    """modeling_deepseek_v3.DeepseekV3ForCausalLM (transformers 5.6), eager."""

    kv_dtype = None  # the cache's dtype where it differs (_kept)

    def __init__(self, cfg, tensors, dtype):
        self.w = {k: (v.float() if k.endswith("e_score_correction_bias") else v.to(dtype))
                  for k, v in _strip(tensors, ["model."]).items()}
        self.cfg, self.dtype = cfg, dtype
        self.L = cfg["num_hidden_layers"]
        self.nh = cfg["num_attention_heads"]
        self.nope, self.rope_dim, self.vd = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.qk = self.nope + self.rope_dim
        self.kvl = cfg["kv_lora_rank"]
        self.eps = cfg["rms_norm_eps"]
        self.dense = cfg["first_k_dense_replace"]
        self.E, self.k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
        self.groups, self.topk_group = cfg["n_group"], cfg["topk_group"]
        self.interleave = cfg.get("rope_interleave", True)
        self.lm_head = self.w["embed_tokens.weight"] if cfg["tie_word_embeddings"] else self.w["lm_head.weight"]
        # experts fused on load as conversion_mapping.py's qwen2_moe entry does
        self.fused = {i: fuse_experts(self.w, "layers.%d.mlp.experts." % i, self.E, ("gate_proj", "up_proj", "down_proj"))
                      for i in range(self.dense, self.L)}
        self._rope_init()

    def _rope_init(self):
        # DeepseekV3RotaryEmbedding with head_dim = qk_rope_head_dim; modeling_rope_utils'
        # default and yarn inits; DeepseekV3Attention.scaling.
        cfg, dim = self.cfg, self.rope_dim
        base = cfg.get("rope_theta", 10000.0)
        rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
        rtype = rs.get("rope_type", rs.get("type", "default"))
        pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
        self.attention_scaling = 1.0
        self.scaling = self.qk ** -0.5
        if rtype == "default":
            self.inv_freq = 1.0 / pos_freqs
            return
        assert rtype == "yarn", rtype
        factor = rs["factor"]
        orig = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
        mscale, mscale_all = rs.get("mscale"), rs.get("mscale_all_dim")
        if rs.get("attention_factor") is not None:
            self.attention_scaling = rs["attention_factor"]
        elif mscale and mscale_all:
            self.attention_scaling = float(yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all))
        else:
            self.attention_scaling = yarn_get_mscale(factor)
        beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

        def corr_dim(rot):
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))
        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extra = 1 - ramp
        self.inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
        if mscale_all:
            m = yarn_get_mscale(factor, mscale_all)
            self.scaling = self.scaling * m * m

    def rms(self, x, weight, eps):
        input_dtype = x.dtype
        x = x.to(_up(input_dtype))
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return weight * x.to(input_dtype)

    def lin(self, x, p):
        return F.linear(x, self.w[p + ".weight"], self.w.get(p + ".bias"))

    @staticmethod
    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def apply_rope(self, x, cos, sin):
        if self.interleave:  # apply_rotary_pos_emb_interleave
            h, s, d = x.shape
            x = x.view(h, s, d // 2, 2).transpose(3, 2).reshape(h, s, d)
        return x * cos + self.rotate_half(x) * sin

    def mlp(self, p, x):
        return self.lin(F.silu(self.lin(x, p + "gate_proj")) * self.lin(x, p + "up_proj"), p + "down_proj")

    def moe(self, i, p, x):
        # DeepseekV3TopkRouter (float32 logits), route_tokens_to_experts, DeepseekV3NaiveMoe
        up = _up(x.dtype)  # float32 (float64 in the fp64 diagnostic mode)
        logits = F.linear(x.to(up), self.w[p + "gate.weight"].to(up))
        scores = logits.sigmoid()
        choice = scores + self.w[p + "gate.e_score_correction_bias"].to(up)
        per = self.E // self.groups
        group_scores = choice.view(-1, self.groups, per).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, self.groups, per).reshape(-1, self.E)
        masked = choice.masked_fill(~score_mask.bool(), float("-inf"))
        index = torch.topk(masked, k=self.k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, index)
        if self.cfg.get("norm_topk_prob", True):
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        weights = weights * self.cfg.get("routed_scaling_factor", 1.0)
        out = run_experts(x, index, weights, *self.fused[i], self.E)
        return out + self.mlp(p + "shared_experts.", x)

    def forward(self, ids, cache, start):
        T = ids.shape[0]
        h = self.w["embed_tokens.weight"][ids]
        pos = torch.arange(start, start + T)
        up = _up(h.dtype)
        freqs = (self.inv_freq[:, None].to(up) @ pos[None, :].to(up)).transpose(0, 1)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.attention_scaling).to(h.dtype).unsqueeze(0)
        sin = (emb.sin() * self.attention_scaling).to(h.dtype).unsqueeze(0)
        new_cache = []
        for i in range(self.L):
            p = "layers.%d." % i
            a = p + "self_attn."
            x = self.rms(h, self.w[p + "input_layernorm.weight"], self.eps)
            if self.cfg.get("q_lora_rank") is None:
                q = self.lin(x, a + "q_proj")
            else:
                q = self.lin(self.rms(self.lin(x, a + "q_a_proj"), self.w[a + "q_a_layernorm.weight"], 1e-6),
                             a + "q_b_proj")
            q = q.view(T, self.nh, self.qk).transpose(0, 1)  # [H, T, qk]
            q_pass, q_rot = torch.split(q, [self.nope, self.rope_dim], dim=-1)
            ckv = self.lin(x, a + "kv_a_proj_with_mqa")
            k_pass, k_rot = torch.split(ckv, [self.kvl, self.rope_dim], dim=-1)
            k_pass = self.lin(self.rms(k_pass, self.w[a + "kv_a_layernorm.weight"], 1e-6), a + "kv_b_proj")
            k_pass = k_pass.view(T, self.nh, self.nope + self.vd).transpose(0, 1)
            k_pass, v = torch.split(k_pass, [self.nope, self.vd], dim=-1)
            k_rot = k_rot.view(1, T, self.rope_dim)
            q_rot, k_rot = self.apply_rope(q_rot, cos, sin), self.apply_rope(k_rot, cos, sin)
            k = torch.cat((k_pass, k_rot.expand(self.nh, T, self.rope_dim)), dim=-1)
            q = torch.cat((q_pass, q_rot), dim=-1)
            k, v = _kept(k, self.kv_dtype), _kept(v, self.kv_dtype)
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=1)
                v = torch.cat([cache[i][1], v], dim=1)
            new_cache.append((k, v))
            S = k.shape[1]
            s = torch.matmul(q, k.transpose(1, 2)) * self.scaling
            s = s + _causal_bias(T, S, s.dtype)
            s = torch.softmax(s, dim=-1, dtype=_up(q.dtype)).to(q.dtype)
            o = torch.matmul(s, v).transpose(0, 1).reshape(T, self.nh * self.vd)
            h = h + self.lin(o, a + "o_proj")
            x = self.rms(h, self.w[p + "post_attention_layernorm.weight"], self.eps)
            h = h + (self.mlp(p + "mlp.", x) if i < self.dense else self.moe(i, p + "mlp.", x))
        h = self.rms(h, self.w["norm.weight"], self.eps)
        return F.linear(h, self.lm_head).float(), new_cache
