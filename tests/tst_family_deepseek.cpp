// DeepSeek-V3 (model_type deepseek_v3): the tree transformers 5.6 builds, its
// sizes before download (config.json and the index only), planned maps, the
// KV-cache reserve of each family's cache shape (MLA's compressed cache,
// sliding windows), and a decode step reading only the experts its router
// picked. Every expected value is derived by hand beside it; the Hub layout
// below is written from DeepSeek-V3's safetensors index, not from the skeleton.
#include "fixtures.h"
#include "planfixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/kvcache.h"
#include "stowage/model.h"
#include "stowage/planner.h"
#include "stowage/quantization.h"

#include <QtTest>

#include <filesystem>

using namespace stowage;
using fixtures::budgets;
using fixtures::mapText;
namespace fs = std::filesystem;

namespace {

struct DsShape {
    int64_t vocab = 100, hidden = 16, inter = 32, moeInter = 8, layers = 3, heads = 2;
    int64_t qLora = 12; // 0: q_lora_rank null (q_proj)
    int64_t kvLora = 8, rope = 4, nope = 4, vDim = 6;
    int64_t experts = 4, shared = 1, dense = 1, groups = 2, topGroups = 1, topK = 2;
    int64_t mtp = 0;   // multi-token-prediction layers stored after the decoder layers
    bool fp8 = false;  // DeepSeek-V3's own files: weight_scale_inv beside each projection
};

// The Hub's names (DeepSeek-V3's model.safetensors.index.json), experts one
// by one; e_score_correction_bias float32.
std::vector<fixtures::Tensor> hubTensors(const DsShape& s, DType dt)
{
    std::vector<fixtures::Tensor> t;
    const auto add = [&](const std::string& n, std::vector<int64_t> shape, DType d) {
        t.push_back({n, d, std::move(shape)});
    };
    const auto proj = [&](const std::string& n, int64_t out, int64_t in) {
        add(n + ".weight", {out, in}, dt);
        if (s.fp8)
            add(n + ".weight_scale_inv", {(out + 127) / 128, (in + 127) / 128}, DType::F32);
    };
    const auto mlp = [&](const std::string& p, int64_t inner) {
        proj(p + "gate_proj", inner, s.hidden);
        proj(p + "up_proj", inner, s.hidden);
        proj(p + "down_proj", s.hidden, inner);
    };
    add("model.embed_tokens.weight", {s.vocab, s.hidden}, dt);
    for (int64_t i = 0; i < s.layers + s.mtp; ++i) {
        const std::string l = "model.layers." + std::to_string(i) + ".";
        if (s.qLora) {
            proj(l + "self_attn.q_a_proj", s.qLora, s.hidden);
            add(l + "self_attn.q_a_layernorm.weight", {s.qLora}, dt);
            proj(l + "self_attn.q_b_proj", s.heads * (s.nope + s.rope), s.qLora);
        } else {
            proj(l + "self_attn.q_proj", s.heads * (s.nope + s.rope), s.hidden);
        }
        proj(l + "self_attn.kv_a_proj_with_mqa", s.kvLora + s.rope, s.hidden);
        add(l + "self_attn.kv_a_layernorm.weight", {s.kvLora}, dt);
        proj(l + "self_attn.kv_b_proj", s.heads * (s.nope + s.vDim), s.kvLora);
        proj(l + "self_attn.o_proj", s.hidden, s.heads * s.vDim);
        if (i < s.dense) {
            mlp(l + "mlp.", s.inter);
        } else {
            for (int64_t e = 0; e < s.experts; ++e)
                mlp(l + "mlp.experts." + std::to_string(e) + ".", s.moeInter);
            add(l + "mlp.gate.weight", {s.experts, s.hidden}, dt);
            add(l + "mlp.gate.e_score_correction_bias", {s.experts}, DType::F32);
            mlp(l + "mlp.shared_experts.", s.moeInter * s.shared);
        }
        add(l + "input_layernorm.weight", {s.hidden}, dt);
        add(l + "post_attention_layernorm.weight", {s.hidden}, dt);
        if (i >= s.layers) { // the MTP layer's own parts
            add(l + "enorm.weight", {s.hidden}, dt);
            add(l + "hnorm.weight", {s.hidden}, dt);
            add(l + "eh_proj.weight", {s.hidden, 2 * s.hidden}, dt);
            add(l + "shared_head.norm.weight", {s.hidden}, dt);
            add(l + "shared_head.head.weight", {s.vocab, s.hidden}, dt);
            add(l + "embed_tokens.weight", {s.vocab, s.hidden}, dt);
        }
    }
    add("model.norm.weight", {s.hidden}, dt);
    add("lm_head.weight", {s.vocab, s.hidden}, dt);
    return t;
}

nlohmann::json hubConfig(const DsShape& s, DType dt)
{
    nlohmann::json c = {{"architectures", {"DeepseekV3ForCausalLM"}},
                        {"model_type", "deepseek_v3"},
                        {"vocab_size", s.vocab},
                        {"hidden_size", s.hidden},
                        {"intermediate_size", s.inter},
                        {"moe_intermediate_size", s.moeInter},
                        {"num_hidden_layers", s.layers},
                        {"num_attention_heads", s.heads},
                        {"num_key_value_heads", s.heads},
                        {"kv_lora_rank", s.kvLora},
                        {"qk_rope_head_dim", s.rope},
                        {"qk_nope_head_dim", s.nope},
                        {"v_head_dim", s.vDim},
                        {"n_routed_experts", s.experts},
                        {"n_shared_experts", s.shared},
                        {"first_k_dense_replace", s.dense},
                        {"n_group", s.groups},
                        {"topk_group", s.topGroups},
                        {"num_experts_per_tok", s.topK},
                        {"num_nextn_predict_layers", s.mtp},
                        {"norm_topk_prob", true},
                        {"routed_scaling_factor", 2.5},
                        {"rms_norm_eps", 1e-6},
                        {"rope_theta", 10000},
                        {"tie_word_embeddings", false},
                        {"torch_dtype", dtypeTorchName(dt)}};
    c["q_lora_rank"] = s.qLora ? nlohmann::json(s.qLora) : nlohmann::json();
    if (s.fp8)
        c["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                    {"weight_block_size", {128, 128}}};
    return c;
}

std::string planText(const ModuleTree& t, Budgets b, Strategy s, std::optional<KvReserve> kv = std::nullopt)
{
    PlanOptions o;
    o.strategy = s;
    o.maxMemory = std::move(b);
    o.kv = std::move(kv);
    return mapText(planDeviceMap(t, o).deviceMap);
}

} // namespace

class TestFamilyDeepseek : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string write(const std::string& name, const DsShape& s, DType dt, bool shards)
    {
        const std::string d = m_tmp.path().toStdString() + "/" + name;
        fs::create_directories(d);
        if (shards)
            fixtures::writeRandomSafetensors(d + "/model.safetensors", hubTensors(s, dt), 5);
        else
            fixtures::writeSharded(d, hubTensors(s, dt), 3, false, /*writeShards=*/false);
        fixtures::writeJson(d + "/config.json", hubConfig(s, dt));
        return d;
    }
    ModuleTree tiny(DType dt) { return buildModuleTree(Checkpoint::open(write("tiny", {}, DType::F32, false)), dt); }
private slots:
    void registry();
    void tinyTree();
    void deepseekV3BeforeDownload();
    void fp8PlansAndUnscaledFp8IsRefused();
    void plannedMaps();
    void kvReservePerLayer();
    void decodeReadsOnlyPickedExperts();
};

void TestFamilyDeepseek::registry()
{
    QCOMPARE(familyOf("deepseek_v3"), std::optional<std::string>("deepseek_v3"));
    QCOMPARE(archOf("deepseek_v3"), std::optional<Arch>(Arch::deepseek_v3));
    QVERIFY(addsBosByDefault("deepseek_v3")); // LlamaTokenizerFast, add_bos_token true
}

void TestFamilyDeepseek::tinyTree()
{
    // vocab 100, hidden 16, intermediate 32, moe_intermediate 8, 3 layers (the
    // first dense), 2 heads, q_lora 12, kv_lora 8, rope 4, nope 4, v 6, 4 experts,
    // 1 shared. Parameters:
    //   attention: q_a 16x12 = 192, q_a_layernorm 12, q_b 12 x 2(4+4) = 192,
    //     kv_a 16 x (8+4) = 192, kv_a_layernorm 8, kv_b 8 x 2(4+6) = 160,
    //     o 2x6 x 16 = 192: 948; two norms 32
    //   dense layer: mlp 3 x 16 x 32 = 1,536: 2,516
    //   MoE layer: experts gate_up 4 x 16 x 16 = 1,024, down 4 x 16 x 8 = 512;
    //     router 4 x 16 = 64; shared 3 x 16 x 8 = 384: 1,984 + 980 = 2,964
    //   embed 1,600, norm 16, lm_head 1,600
    //   total 1,600 + 2,516 + 2 x 2,964 + 16 + 1,600 = 11,660.
    // Buffers: e_score_correction_bias 4 per MoE layer in the model's dtype
    // (torch.zeros under the dtype: 16 bytes in fp32, 8 in bf16), rotary
    // inv_freq + original_inv_freq of rope/2 = 2 each, float32 (16).
    // fp32: 46,640 + 32 + 16 = 46,688; bf16: 23,320 + 16 + 16 = 23,352.
    ModuleTree t = tiny(DType::F32);
    QCOMPARE(t.root().paramCount, uint64_t(11'660));
    QCOMPARE(t.root().bytes, uint64_t(46'688));
    QCOMPARE(tiny(DType::BF16).root().bytes, uint64_t(23'352));
    QVERIFY(t.missing().empty());
    QVERIFY(t.unexpected().empty());
    QCOMPARE(t.noSplitClasses(), std::vector<std::string>{"DeepseekV3DecoderLayer"});
    // Layer 1, in definition order, with classes.
    std::vector<std::string> got;
    for (const auto& m : t.modules())
        if (m.name.rfind("model.layers.1.", 0) == 0)
            got.push_back(m.name.substr(15) + " " + m.className);
    const std::vector<std::string> want{
        "self_attn DeepseekV3Attention", "self_attn.q_a_proj Linear", "self_attn.q_a_layernorm DeepseekV3RMSNorm",
        "self_attn.q_b_proj Linear", "self_attn.kv_a_proj_with_mqa Linear", "self_attn.kv_a_layernorm DeepseekV3RMSNorm",
        "self_attn.kv_b_proj Linear", "self_attn.o_proj Linear", "mlp DeepseekV3MoE", "mlp.experts DeepseekV3NaiveMoe",
        "mlp.experts.act_fn SiLU", "mlp.gate DeepseekV3TopkRouter", "mlp.shared_experts DeepseekV3MLP",
        "mlp.shared_experts.gate_proj Linear", "mlp.shared_experts.up_proj Linear",
        "mlp.shared_experts.down_proj Linear", "mlp.shared_experts.act_fn SiLU", "input_layernorm DeepseekV3RMSNorm",
        "post_attention_layernorm DeepseekV3RMSNorm"};
    QCOMPARE(got, want);
    QCOMPARE(t.modules()[size_t(t.find("model.layers.0.mlp"))].className, std::string("DeepseekV3MLP"));
    QCOMPARE(t.modules()[size_t(t.find("model.rotary_emb"))].className, std::string("DeepseekV3RotaryEmbedding"));
    // Module sizes (fp32): layer 0 2,516 x 4 = 10,064; a MoE layer 2,964 x 4 + 16 = 11,872.
    QCOMPARE(t.modules()[size_t(t.find("model.layers.0"))].bytes, uint64_t(10'064));
    QCOMPARE(t.modules()[size_t(t.find("model.layers.2"))].bytes, uint64_t(11'872));
    QCOMPARE(t.modules()[size_t(t.find("model.layers.1.mlp.gate"))].bytes, uint64_t(64 * 4 + 16));
    // Without q LoRA: q_proj 16 x 16 = 256 replaces 192 + 12 + 192 = 396: 140 fewer a layer.
    DsShape noLora;
    noLora.qLora = 0;
    ModuleTree q = buildModuleTree(Checkpoint::open(write("no-lora", noLora, DType::F32, false)), DType::F32);
    QCOMPARE(q.root().paramCount, uint64_t(11'660 - 3 * 140));
    QVERIFY(q.find("model.layers.0.self_attn.q_proj") >= 0);
    QVERIFY(q.find("model.layers.0.self_attn.q_a_proj") < 0);
    QCOMPARE(executionUnits(t), (std::vector<std::string>{"model.embed_tokens", "model.layers.0", "model.layers.1",
                                                          "model.layers.2", "model.norm", "lm_head"}));
}

void TestFamilyDeepseek::deepseekV3BeforeDownload()
{
    // deepseek-ai/DeepSeek-V3's config (bf16 conversion), index only, with the
    // MTP layer (model.layers.61.*) that transformers ignores. Per layer:
    //   attention q_a 7168 x 1536 = 11,010,048, q_a_layernorm 1,536,
    //     q_b 1536 x 128 x 192 = 37,748,736, kv_a 7168 x 576 = 4,128,768,
    //     kv_a_layernorm 512, kv_b 512 x 128 x 256 = 16,777,216,
    //     o 128 x 128 x 7168 = 117,440,512: 187,107,328; norms 14,336
    //   dense (layers 0-2): 3 x 7168 x 18432 = 396,361,728 -> 583,483,392
    //   MoE (58 layers): experts 256 x 3 x 2048 x 7168 = 11,274,289,152, router
    //     256 x 7168 = 1,835,008, shared 3 x 7168 x 2048 = 44,040,192
    //     -> 11,507,286,016
    //   3 x 583,483,392 + 58 x 11,507,286,016 = 669,173,039,104; embed and head
    //   2 x 129280 x 7168 = 1,853,358,080; norm 7,168: 671,026,404,352 (the 671B).
    // bf16 bytes: 1,342,052,808,704 + correction biases 58 x 256 x 2 = 29,696 +
    // rotary 2 x 32 x 4 = 256: 1,342,052,838,656 (transformers 5.6's own
    // compute_module_sizes gives the same: tests/reference/hf56).
    DsShape s{129280, 7168, 18432, 2048, 61, 128, 1536, 512, 64, 128, 128, 256, 1, 3, 8, 4, 8, 1, false};
    ModuleTree t = buildModuleTree(Checkpoint::open(write("deepseek-v3", s, DType::BF16, false)), std::nullopt);
    QCOMPARE(t.root().paramCount, uint64_t(671'026'404'352ull));
    QCOMPARE(t.root().bytes, uint64_t(1'342'052'838'656ull));
    QVERIFY(t.missing().empty());
    QVERIFY2(t.unexpected().empty(), t.unexpected().empty() ? "" : t.unexpected()[0].c_str());
    QCOMPARE(t.modules()[size_t(t.find("model.layers"))].children.size(), size_t(61));
    // Sequential over 8 x 80 GB GPUs: the largest layer is a MoE layer,
    // 11,507,286,016 x 2 + 512 = 23,014,572,544 bytes, kept free on GPU 0.
    // GPU 0 takes embed (1,853,358,080), layers 0-2 (1,166,966,784 each) and
    // MoE layers while used + layer <= 80e9 - 23,014,572,544 = 56,985,427,456:
    // 1,853,358,080 + 3 x 1,166,966,784 = 5,354,258,432; + 2 x 23,014,572,544
    // = 51,383,403,520 (layers 3, 4); a third would make 74,397,976,064. GPUs 1-7
    // take 3 MoE layers each (69,043,717,632 <= 80e9; 4 would be 92.06e9):
    // layers 5-7, 8-10, ..., 23-25; the CPU (1e12, keeping 23,014,572,544) takes
    // layers 26-60 (35 x 23,014,572,544 = 805,510,039,040), norm, rotary, head.
    const std::string m = planText(t, budgets({{"0", 80e9}, {"1", 80e9}, {"2", 80e9}, {"3", 80e9}, {"4", 80e9},
                                               {"5", 80e9}, {"6", 80e9}, {"7", 80e9}, {"cpu", 1e12}}),
                                   Strategy::Sequential);
    std::string want = "model.embed_tokens:0";
    for (int i = 0; i <= 60; ++i)
        want += ", model.layers." + std::to_string(i) + ":" +
                (i <= 4 ? "0" : i <= 25 ? std::to_string((i - 5) / 3 + 1) : std::string("cpu"));
    want += ", model.norm:cpu, model.rotary_emb:cpu, lm_head:cpu";
    QCOMPARE(QString::fromStdString(m), QString::fromStdString(want));
}

void TestFamilyDeepseek::fp8PlansAndUnscaledFp8IsRefused()
{
    // DeepSeek-V3 as its authors ship it: fp8 projections with a
    // weight_scale_inv each. Each scale is its weight's quantizer state
    // (tst_quantization sizes FP8); sized dequantized until a plan names a
    // GPU that computes in FP8.
    DsShape s;
    s.fp8 = true;
    const std::string d = write("fp8", s, DType::F8_E4M3, true);
    Checkpoint ck = Checkpoint::open(d);
    ModuleTree t = buildModuleTree(ck, DType::F32);
    QCOMPARE(t.root().paramCount, uint64_t(11'660));
    QVERIFY(t.unexpected().empty());
    QVERIFY(t.quantization() && t.quantization()->kind == Quantization::Kind::Fp8);
    QVERIFY(!t.quantApplied());
    // Running it: one clear input error naming the shard and the tensor, no crash.
    LoadOptions lo;
    lo.dtype = DType::F32;
    lo.deviceMap = {{"", Device::cpu()}};
    try {
        auto model = Model::load(ck, t, lo);
        model->forward({1, 2});
        QFAIL("an fp8 DeepSeek-V3 ran");
    } catch (const InputError& e) {
        const std::string what = e.what();
        // These files store the embedding and norms in fp8 too, with no
        // weight_scale_inv: the weight store names the first such tensor.
        // (Checkpoints quantized as the Hub's are run in tst_reference.)
        QVERIFY2(what.find("model.safetensors") != std::string::npos &&
                     what.find("model.embed_tokens.weight_scale_inv") != std::string::npos &&
                     what.find("float8_e4m3fn") != std::string::npos,
                 e.what());
    }
}

void TestFamilyDeepseek::plannedMaps()
{
    // The tiny tree in fp32 (tinyTree): embed 6,400, layers.0 10,064, layers.1
    // and .2 11,872, norm 64, rotary 16, lm_head 6,400; model 40,288, total 46,688.
    // Rules: docs/planner.md "Placement". Popping a module drops the
    // largest-layer names under it and recomputes from what is still queued;
    // only GPU 0 and the CPU keep that reserve.
    ModuleTree t = tiny(DType::F32);
    // GPU 0 = 46,688: popping `model` drops layers.1/.2 (under it), leaving
    // lm_head's 6,400: 40,288 <= 40,288 fits; lm_head then needs none. One device.
    for (Strategy st : {Strategy::Sequential, Strategy::Auto})
        QCOMPARE(QString::fromStdString(planText(t, budgets({{"0", 46'688}, {"cpu", 1e9}}), st)), QString("'':0"));
    // GPU 0 = 30,000: model 40,288 > 23,600: split, reserve 11,872 (layers.1/.2);
    // embed 6,400 <= 18,128; layers 40,208 > 23,600 (lm_head's reserve): split;
    // layers.0 16,464 <= 18,128; layers.1 28,336 > 18,128, no-split: cpu for the rest.
    const QString gpuCpu("model.embed_tokens:0, model.layers.0:0, model.layers.1:cpu, model.layers.2:cpu, "
                         "model.norm:cpu, model.rotary_emb:cpu, lm_head:cpu");
    for (Strategy st : {Strategy::Sequential, Strategy::Auto})
        QCOMPARE(QString::fromStdString(planText(t, budgets({{"0", 30'000}, {"cpu", 1e9}}), st)), gpuCpu);
    // Sequential, 0 = 20,000, 1 = 15,000, cpu = 12,000: embed on 0 (6,400 <=
    // 8,128); layers.0 16,464 > 8,128: GPU 1 (no reserve) 10,064; layers.1 21,936
    // > 15,000: cpu, which keeps 11,872: 11,872 > 128: disk with the rest.
    QCOMPARE(QString::fromStdString(
                 planText(t, budgets({{"0", 20'000}, {"1", 15'000}, {"cpu", 12'000}}), Strategy::Sequential)),
             QString("model.embed_tokens:0, model.layers.0:1, model.layers.1:disk, model.layers.2:disk, "
                     "model.norm:disk, model.rotary_emb:disk, lm_head:disk"));
    // Balanced over 2 GPUs of 40,000: per_gpu = 46,688 // 2 + int(1.25 x
    // max(first DeepseekV3DecoderLayer 10,064, mean leaf 46,688 / 44 leaves))
    // = 23,344 + 12,580 = 35,924 for GPU 0; GPU 1 keeps 40,000. Leaves: embed;
    // layer 0's 7 attention + 3 MLP + 2 norms; each MoE layer's 7 attention,
    // experts, gate, 3 shared, 2 norms; norm, rotary_emb, lm_head: 1+12+2x14+3.
    // model 40,288 > 29,524: split; embed 6,400 <= 24,052; layers split; layers.0
    // 16,464 <= 24,052; layers.1 28,336 > 24,052: GPU 1 takes the rest (30,224).
    const QString twoGpus("model.embed_tokens:0, model.layers.0:0, model.layers.1:1, model.layers.2:1, "
                          "model.norm:1, model.rotary_emb:1, lm_head:1");
    for (Strategy st : {Strategy::Balanced, Strategy::Auto})
        QCOMPARE(QString::fromStdString(planText(t, budgets({{"0", 40'000}, {"1", 40'000}, {"cpu", 1e9}}), st)),
                 twoGpus);
    // Three GPUs: per_gpu = 15,562 + 12,580 = 28,142 for GPUs 0 and 1. model
    // 40,288 > 21,742: split; embed 6,400 <= 16,270; layers.0 16,464 > 16,270:
    // GPU 1: layers.0, layers.1 (21,936); layers.2 33,808 > 28,142: GPU 2.
    QCOMPARE(QString::fromStdString(planText(
                 t, budgets({{"0", 40'000}, {"1", 40'000}, {"2", 40'000}, {"cpu", 1e9}}), Strategy::Balanced)),
             QString("model.embed_tokens:0, model.layers.0:1, model.layers.1:1, model.layers.2:2, "
                     "model.norm:2, model.rotary_emb:2, lm_head:2"));
    // A per-layer KV reserve: 20,000 for layer 0's cache alone. Every layer
    // computes on GPU 0 (the ones in RAM too), so GPU 0 keeps the 20,000 and
    // offers 26,688 to the weights: popping `model` (40,288) leaves lm_head's
    // 6,400 as the largest-layer reserve: it does not fit, splits; then
    // layers.1's 11,872: embed (6,400 <= 14,816) fits, layers.0 (16,464)
    // does not, no-split: cpu for the rest, where model.layers merges
    // (33,808).
    KvReserve kv;
    kv.layerClass = "DeepseekV3DecoderLayer";
    kv.layerBytes = {20'000, 0, 0};
    kv.bytesPerLayer = 20'000;
    PlanOptions o;
    o.maxMemory = budgets({{"0", 46'688}, {"cpu", 1e9}});
    o.kv = kv;
    const Plan p = planDeviceMap(t, o);
    QCOMPARE(QString::fromStdString(mapText(p.deviceMap)),
             QString("model.embed_tokens:0, model.norm:cpu, model.rotary_emb:cpu, lm_head:cpu, model.layers:cpu"));
    QCOMPARE(p.entries.back().bytes, uint64_t(33'808));
    QCOMPARE(p.devices.size(), size_t(2));
    QCOMPARE(p.devices[0].device, Device::gpu(0));
    QCOMPARE(p.devices[0].reservedKv, uint64_t(20'000)); // the caches, where the layers compute
    QCOMPARE(p.devices[1].reservedKv, uint64_t(0));
}

void TestFamilyDeepseek::kvReservePerLayer()
{
    // DeepSeek-V3, bf16, 4096 positions: the runner caches the normalised latent
    // (512) and the rotated key part (64) a position, for all heads at once:
    // 4096 x 576 x 2 = 4,718,592 bytes a layer, every layer. transformers'
    // cache would be 128 heads x (192 + 128) x 2 x 4096 = 335,544,320.
    const auto ds = ModelConfig::parse(hubConfig({129280, 7168, 18432, 2048, 61, 128, 1536, 512, 64, 128, 128, 256,
                                                  1, 3, 8, 4, 8, 1, false},
                                                 DType::BF16)
                                           .dump(),
                                       "config.json");
    ModuleTree t = tiny(DType::BF16); // any deepseek tree: its no-split class names the layers
    auto r = kvReserveFor(ds, t, 4096, 1, DType::BF16);
    QVERIFY(r);
    QCOMPARE(r->bytesPerLayer, uint64_t(4'718'592));
    QCOMPARE(r->layerBytes, std::vector<uint64_t>(61, 4'718'592));
    QCOMPARE(r->layerClass, std::string("DeepseekV3DecoderLayer"));

    // Gemma 3 text, 6 layers, sliding_window 4, the default pattern (every 6th
    // global): 1 KV head of 8, fp32, context 10, batch 2. Sliding layers keep 4
    // positions: 2 x 4 x 2 x 8 x 4 = 512; the global one 10: 2 x 10 x 16 x 4 = 1,280.
    const auto g = ModelConfig::parse(R"({"model_type": "gemma3_text", "hidden_size": 32, "num_hidden_layers": 6,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 64,
        "vocab_size": 50, "sliding_window": 4})",
                                      "config.json");
    r = kvReserveFor(g, t, 10, 2, DType::F32);
    QCOMPARE(r->layerBytes, (std::vector<uint64_t>{512, 512, 512, 512, 512, 1280}));
    QCOMPARE(r->bytesPerLayer, uint64_t(1280));
    // layer_types decide where given; a window wider than the context keeps it all.
    auto gj = nlohmann::json::parse(g.raw().dump());
    gj["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention", "full_attention",
                         "sliding_attention", "sliding_attention"};
    r = kvReserveFor(ModelConfig::parse(gj.dump(), "config.json"), t, 10, 2, DType::F32);
    QCOMPARE(r->layerBytes, (std::vector<uint64_t>{1280, 512, 512, 1280, 512, 512}));
    r = kvReserveFor(ModelConfig::parse(gj.dump(), "config.json"), t, 3, 1, DType::F32);
    QCOMPARE(r->layerBytes, std::vector<uint64_t>(6, 3 * 16 * 4)); // min(3, 4) = 3 positions everywhere

    // Phi-3 with sliding_window 3: every layer keeps 3 positions (2 KV heads of 8):
    // 3 x 2 x 2 x 8 x 4 = 384. With sliding_window null: the uniform 2 x 10 x 32 x 4.
    auto pj = nlohmann::json::parse(R"({"model_type": "phi3", "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 50,
        "sliding_window": 3})");
    r = kvReserveFor(ModelConfig::parse(pj.dump(), "config.json"), t, 10, 1, DType::F32);
    QCOMPARE(r->layerBytes, (std::vector<uint64_t>{384, 384}));
    pj["sliding_window"] = nullptr;
    r = kvReserveFor(ModelConfig::parse(pj.dump(), "config.json"), t, 10, 1, DType::F32);
    QVERIFY(r->layerBytes.empty());
    QCOMPARE(r->bytesPerLayer, uint64_t(2 * 10 * 2 * 8 * 4));
    // Mistral: sliding_window absent is MistralConfig's 4096, so context 5,000
    // keeps 4,096 positions a layer: 2 x 4,096 x 2 x 16 x 2 (bf16) = 524,288;
    // null keeps all 5,000: 2 x 5,000 x 2 x 16 x 2 = 640,000, the uniform form.
    auto mj = nlohmann::json::parse(R"({"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 50})");
    r = kvReserveFor(ModelConfig::parse(mj.dump(), "config.json"), t, 5000, 1, DType::BF16);
    QCOMPARE(r->layerBytes, (std::vector<uint64_t>{524'288, 524'288}));
    mj["sliding_window"] = nullptr;
    r = kvReserveFor(ModelConfig::parse(mj.dump(), "config.json"), t, 5000, 1, DType::BF16);
    QVERIFY(r->layerBytes.empty());
    QCOMPARE(r->bytesPerLayer, uint64_t(640'000));
    // Mixtral: no window unless sliding_window is set (here 8: 2 x 8 x 2 x 16 x 2 = 1,024).
    auto xj = mj;
    xj["model_type"] = "mixtral";
    xj.erase("sliding_window");
    r = kvReserveFor(ModelConfig::parse(xj.dump(), "config.json"), t, 5000, 1, DType::BF16);
    QVERIFY(r->layerBytes.empty());
    xj["sliding_window"] = 8;
    r = kvReserveFor(ModelConfig::parse(xj.dump(), "config.json"), t, 5000, 1, DType::BF16);
    QCOMPARE(r->layerBytes, (std::vector<uint64_t>{1'024, 1'024}));
    // Qwen2, 3 layers, sliding_window 8: ignored without use_sliding_window;
    // with it, layers from max_window_layers (1) on slide: 1,024 each, layer 0
    // all 5,000 positions (640,000).
    auto qj = mj;
    qj["model_type"] = "qwen2";
    qj["num_hidden_layers"] = 3;
    qj["sliding_window"] = 8;
    qj["max_window_layers"] = 1;
    r = kvReserveFor(ModelConfig::parse(qj.dump(), "config.json"), t, 5000, 1, DType::BF16);
    QVERIFY(r->layerBytes.empty());
    qj["use_sliding_window"] = true;
    r = kvReserveFor(ModelConfig::parse(qj.dump(), "config.json"), t, 5000, 1, DType::BF16);
    QCOMPARE(r->layerBytes, (std::vector<uint64_t>{640'000, 1'024, 1'024}));
    // Qwen3-MoE with use_sliding_window and no sliding_window: every layer, 4,096 positions.
    auto q3 = mj;
    q3.erase("sliding_window");
    q3["model_type"] = "qwen3_moe";
    q3["use_sliding_window"] = true;
    r = kvReserveFor(ModelConfig::parse(q3.dump(), "config.json"), t, 5000, 1, DType::BF16);
    QCOMPARE(r->layerBytes, (std::vector<uint64_t>{524'288, 524'288}));
    // A family without windows keeps its old number and no per-layer list.
    const auto llama = ModelConfig::parse(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 50})",
                                          "config.json");
    r = kvReserveFor(llama, t, 100, 3, DType::BF16);
    QVERIFY(r->layerBytes.empty());
    QCOMPARE(r->bytesPerLayer, uint64_t(2 * 3 * 100 * 2 * 16 * 2));
}

void TestFamilyDeepseek::decodeReadsOnlyPickedExperts()
{
    // The tiny model, 2 layers (layer 1 MoE), all layers on disk, fp32, no
    // prefetch. Bytes read from disk per decoded token:
    //   layer 0: attention 948 + norms 32 + MLP 1,536 = 2,516 x 4 = 10,064
    //   layer 1: attention 948 + norms 32 + router 64 + shared 384 = 1,428 x 4
    //     = 5,712 always, and per picked expert 3 x 16 x 8 x 4 = 1,536; two picked.
    //   10,064 + 5,712 + 2 x 1,536 = 18,848 (all four experts: 21,920).
    DsShape s;
    s.layers = 2;
    const std::string d = write("run", s, DType::F32, true);
    Checkpoint ck = Checkpoint::open(d);
    ModuleTree tree = buildModuleTree(ck, DType::F32);
    LoadOptions lo;
    lo.dtype = DType::F32;
    lo.policy = ExecutionPolicy::AccelerateLike;
    lo.deviceMap = {{"model.embed_tokens", Device::cpu()},
                    {"model.layers", Device::disk()},
                    {"model.norm", Device::cpu()},
                    {"model.rotary_emb", Device::cpu()},
                    {"lm_head", Device::cpu()}};
    auto model = Model::load(ck, tree, lo);
    Telemetry& t = model->telemetry();
    model->forward({3, 17, 5, 42});
    constexpr int kSteps = 5;
    const uint64_t before = t.diskReadBytes(), cursor = t.eventCount();
    int32_t next = 9;
    for (int i = 0; i < kSteps; ++i) {
        const std::vector<float> logits = model->forward({next});
        QVERIFY(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
        next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    QCOMPARE(t.diskReadBytes() - before, uint64_t(kSteps * 18'848));
    int expertMoves = 0;
    for (const TraceEvent& e : t.traceSince(cursor).items)
        if ((e.kind == TraceKind::Fetch || e.kind == TraceKind::Map) && e.tensor.find(".mlp.experts.") != std::string::npos)
            ++expertMoves;
    QCOMPARE(expertMoves, kSteps * 2 * 3); // two experts' gate, up and down a token
}

QTEST_APPLESS_MAIN(TestFamilyDeepseek)
#include "tst_family_deepseek.moc"
