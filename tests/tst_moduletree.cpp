// The module tree transformers would build, and its sizes under a dtype.
#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/moduletree.h"

#include <QtTest>

#include <filesystem>

using namespace stowage;
namespace fs = std::filesystem;

class TestModuleTree : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string dir(const std::string& name)
    {
        std::string d = m_tmp.path().toStdString() + "/" + name;
        fs::create_directories(d);
        return d;
    }
    uint64_t bytesOf(const ModuleTree& t, const std::string& name)
    {
        int i = t.find(name);
        if (i < 0)
            qFatal("no module %s", name.c_str());
        return t.modules()[size_t(i)].bytes;
    }
    // The tree for a config.json alone: weights holding no tensor of the
    // model (enough of them for the layer count to be believable).
    ModuleTree skeletonOf(const std::string& name, const nlohmann::json& config)
    {
        auto d = dir("skeleton-" + name);
        fixtures::writeJson(d + "/config.json", config);
        std::vector<fixtures::Tensor> ts;
        for (int i = 0; i < 16; ++i)
            ts.push_back({"unused." + std::to_string(i), DType::F32, {1}});
        fixtures::writeSharded(d, ts, 1, false);
        return buildModuleTree(Checkpoint::open(d), DType::F32);
    }

private slots:
    void distilgpt2SizesInFloat16_data();
    void distilgpt2SizesInFloat16();
    void gpt2DefinitionOrder();
    void shapeDisagreeingWithConfigIsAnError();
    void shardedBf16Llama32();
    void indexOnlyLlama70b();
    void indexOnlyUnknownFamilyNeedsShards();
    void unknownFamilyFromNames();
    void optWithoutModelPrefix();
    void qwenVariants();
    void phi3Tree();
    void phi4MiniLikeTree();
    void phi3RealSizes();
    void defaultDTypeAsTransformers();
    void impossibleConfigValues_data();
    void impossibleConfigValues();
    void familyRegistry();
    void executionUnits_data();
    void executionUnits();
};

void TestModuleTree::distilgpt2SizesInFloat16_data()
{
    QTest::addColumn<QString>("prefix");
    QTest::addColumn<bool>("maskBuffers");
    QTest::newRow("GPT2LMHeadModel save") << "transformer." << false;
    // distilgpt2 on the Hub: saved from GPT2Model, with attn.bias masks.
    QTest::newRow("base-model save with masks") << "" << true;
}
void TestModuleTree::distilgpt2SizesInFloat16()
{
    QFETCH(QString, prefix);
    QFETCH(bool, maskBuffers);
    auto d = dir("distil" + prefix.toStdString());
    fixtures::writeSafetensorsFile(d + "/model.safetensors",
                                   fixtures::gpt2Tensors({}, DType::F32, prefix.toStdString(), maskBuffers), true);
    fixtures::writeJson(d + "/config.json", fixtures::gpt2Config({}, DType::F32));
    ModuleTree t = buildModuleTree(Checkpoint::open(d), DType::F16);
    QCOMPARE(t.root().bytes, uint64_t(163'825'152));
    QCOMPARE(bytesOf(t, "transformer.h.0"), uint64_t(14'175'744));
    QCOMPARE(bytesOf(t, "transformer.wte"), uint64_t(77'194'752));
    QCOMPARE(bytesOf(t, "transformer.wpe"), uint64_t(1'572'864));
    QCOMPARE(bytesOf(t, "transformer.ln_f"), uint64_t(3'072));
    QCOMPARE(bytesOf(t, "lm_head"), uint64_t(0)); // tied: counted once, under wte
    QCOMPARE(t.root().paramCount, uint64_t(81'912'576));
    QVERIFY(t.unexpected().empty());
    QVERIFY(t.missing().empty());
    QCOMPARE(t.tiedGroups(), (std::vector<std::vector<std::string>>{{"lm_head.weight", "transformer.wte.weight"}}));
    QCOMPARE(t.noSplitClasses(), std::vector<std::string>{"GPT2Block"});
    // Without --dtype the checkpoint's own (float32) applies.
    QCOMPARE(buildModuleTree(Checkpoint::open(d), std::nullopt).root().bytes, uint64_t(2 * 163'825'152));
}
void TestModuleTree::gpt2DefinitionOrder()
{
    auto d = dir("order");
    fixtures::writeSafetensorsFile(d + "/model.safetensors", fixtures::gpt2Tensors({97, 16, 8, 2}, DType::F32), false);
    fixtures::writeJson(d + "/config.json", fixtures::gpt2Config({97, 16, 8, 2}, DType::F32));
    ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
    std::vector<std::string> names;
    for (size_t i = 0; i < 18; ++i)
        names.push_back(t.modules()[i].name + ":" + t.modules()[i].className);
    QCOMPARE(names, (std::vector<std::string>{
                        ":GPT2LMHeadModel", "transformer:GPT2Model", "transformer.wte:Embedding",
                        "transformer.wpe:Embedding", "transformer.drop:Dropout", "transformer.h:ModuleList",
                        "transformer.h.0:GPT2Block", "transformer.h.0.ln_1:LayerNorm",
                        "transformer.h.0.attn:GPT2Attention", "transformer.h.0.attn.c_attn:Conv1D",
                        "transformer.h.0.attn.c_proj:Conv1D", "transformer.h.0.attn.attn_dropout:Dropout",
                        "transformer.h.0.attn.resid_dropout:Dropout", "transformer.h.0.ln_2:LayerNorm",
                        "transformer.h.0.mlp:GPT2MLP", "transformer.h.0.mlp.c_fc:Conv1D",
                        "transformer.h.0.mlp.c_proj:Conv1D", "transformer.h.0.mlp.act:NewGELUActivation"}));
    QCOMPARE(t.modules().back().name, std::string("lm_head"));
    // Subtree ranges are pre-order.
    int h = t.find("transformer.h");
    QCOMPARE(t.modules()[size_t(t.modules()[size_t(h)].end)].name, std::string("transformer.ln_f"));
}
void TestModuleTree::shapeDisagreeingWithConfigIsAnError()
{
    auto d = dir("mismatch");
    fixtures::writeSafetensorsFile(d + "/model.safetensors", fixtures::gpt2Tensors({97, 16, 8, 2}, DType::F32), false);
    fixtures::writeJson(d + "/config.json", fixtures::gpt2Config({97, 16, 16, 2}, DType::F32));
    try {
        buildModuleTree(Checkpoint::open(d), std::nullopt);
        QFAIL("no error");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("tensor 'transformer.wte.weight' has shape [97, 8] but config.json implies [97, 16]"),
                 e.what());
    }
}
void TestModuleTree::shardedBf16Llama32()
{
    // Llama-3.2-1B shape, bf16, tied embeddings, four sparse shards.
    auto d = dir("llama");
    fixtures::LlamaShape s;
    fixtures::writeSharded(d, fixtures::llamaTensors(s, DType::BF16), 4, true);
    fixtures::writeJson(d + "/config.json", fixtures::llamaConfig(s, DType::BF16));
    ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
    QCOMPARE(t.root().paramCount, uint64_t(1'235'814'400));
    // transformers 5.6 adds model.rotary_emb's inv_freq and original_inv_freq:
    // head_dim 2048 / 32 = 64, so 32 float32 each: 2 x 32 x 4 = 256 bytes.
    QCOMPARE(t.root().bytes, uint64_t(2 * 1'235'814'400ull + 256));
    QCOMPARE(bytesOf(t, "model.rotary_emb"), uint64_t(256));
    QCOMPARE(t.buffers().size(), size_t(2));
    QCOMPARE(t.buffers()[0].name, std::string("model.rotary_emb.inv_freq"));
    QCOMPARE(t.buffers()[1].name, std::string("model.rotary_emb.original_inv_freq"));
    QCOMPARE(*t.dtype(), DType::BF16);
    QCOMPARE(bytesOf(t, "model.layers.0"), uint64_t(2 * 60'821'504));
    QCOMPARE(t.modules()[size_t(t.find("model.layers.0"))].className, std::string("LlamaDecoderLayer"));
    QCOMPARE(t.modules()[size_t(t.find("model.rotary_emb"))].className, std::string("LlamaRotaryEmbedding"));
    QCOMPARE(t.modules()[size_t(t.find("model.layers.0.mlp.act_fn"))].className, std::string("SiLU"));
    QVERIFY(t.missing().empty());
    QCOMPARE(t.noSplitClasses(), std::vector<std::string>{"LlamaDecoderLayer"});
    // float32 planning counts four bytes a parameter, as transformers' fp32 meta model does.
    QCOMPARE(buildModuleTree(Checkpoint::open(d), DType::F32).root().bytes, uint64_t(4 * 1'235'814'400ull + 256));
    // Accelerate called with dtype=float32 on the bf16 model caps every floating
    // tensor at min(4, own): parameters stay 2 bytes, the float32 buffers 4.
    QCOMPARE(buildModuleTree(Checkpoint::open(d), DType::F32, Reference::Accelerate).root().bytes,
             uint64_t(2 * 1'235'814'400ull + 256));
    // ... and with dtype=bfloat16 the buffers drop to 2 bytes: 2 x 32 x 2 = 128.
    QCOMPARE(buildModuleTree(Checkpoint::open(d), DType::BF16, Reference::Accelerate).root().bytes,
             uint64_t(2 * 1'235'814'400ull + 128));
}
void TestModuleTree::indexOnlyLlama70b()
{
    auto d = dir("llama70");
    fixtures::LlamaShape s{128256, 8192, 28672, 80, 64, 8, false};
    fixtures::writeSharded(d, fixtures::llamaTensors(s, DType::BF16), 30, true, /*writeShards=*/false);
    fixtures::writeJson(d + "/config.json", fixtures::llamaConfig(s, DType::BF16));
    Checkpoint ck = Checkpoint::open(d);
    QVERIFY(ck.indexOnly());
    ModuleTree t = buildModuleTree(ck, std::nullopt);
    QCOMPARE(t.root().paramCount, uint64_t(70'553'706'496ull)); // Meta-Llama-3-70B
    QVERIFY(t.missing().empty());
}
void TestModuleTree::indexOnlyUnknownFamilyNeedsShards()
{
    auto d = dir("unknownindex");
    fixtures::writeSharded(d, fixtures::gpt2Tensors({97, 16, 8, 2}, DType::F32), 2, false, false);
    fixtures::writeJson(d + "/config.json", {{"model_type", "mamba"}});
    try {
        buildModuleTree(Checkpoint::open(d), std::nullopt);
        QFAIL("no error");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("'mamba' is not a known family") &&
                     QString(e.what()).contains("shard headers are needed"),
                 e.what());
    }
}
void TestModuleTree::unknownFamilyFromNames()
{
    auto d = dir("unknown");
    std::vector<fixtures::Tensor> ts;
    for (int i : {0, 1, 10, 2})
        ts.push_back({"backbone.blocks." + std::to_string(i) + ".mixer.weight", DType::BF16, {4, 4}});
    ts.push_back({"backbone.embed.weight", DType::BF16, {10, 4}});
    ts.push_back({"head.weight", DType::BF16, {10, 4}});
    fixtures::writeSafetensorsFile(d + "/model.safetensors", ts, false);
    fixtures::writeJson(d + "/config.json", {{"model_type", "mamba"}, {"architectures", {"MambaForCausalLM"}}});
    ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
    QVERIFY(!t.knownArchitecture());
    QCOMPARE(t.root().className, std::string("MambaForCausalLM"));
    std::vector<std::string> names;
    for (const auto& m : t.modules())
        names.push_back(m.name);
    QCOMPARE(names, (std::vector<std::string>{"", "backbone", "backbone.blocks", "backbone.blocks.0",
                                              "backbone.blocks.0.mixer", "backbone.blocks.1",
                                              "backbone.blocks.1.mixer", "backbone.blocks.2",
                                              "backbone.blocks.2.mixer", "backbone.blocks.10",
                                              "backbone.blocks.10.mixer", "backbone.embed", "head"}));
    QCOMPARE(t.modules()[2].className, std::string("ModuleList"));
    QCOMPARE(t.noSplitClasses(), std::vector<std::string>{"Layer"});
    QCOMPARE(t.root().bytes, uint64_t((4 * 16 + 2 * 40) * 2));
}
void TestModuleTree::optWithoutModelPrefix()
{
    auto d = dir("opt");
    const int64_t V = 50, H = 16, F = 32, P = 20, L = 2;
    std::vector<fixtures::Tensor> ts{{"decoder.embed_tokens.weight", DType::F16, {V, H}},
                                     {"decoder.embed_positions.weight", DType::F16, {P + 2, H}},
                                     {"decoder.final_layer_norm.weight", DType::F16, {H}},
                                     {"decoder.final_layer_norm.bias", DType::F16, {H}}};
    for (int i = 0; i < L; ++i) {
        std::string p = "decoder.layers." + std::to_string(i) + ".";
        for (auto n : {"self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj", "self_attn.out_proj"}) {
            ts.push_back({p + n + ".weight", DType::F16, {H, H}});
            ts.push_back({p + n + ".bias", DType::F16, {H}});
        }
        for (auto n : {"self_attn_layer_norm", "final_layer_norm"}) {
            ts.push_back({p + n + ".weight", DType::F16, {H}});
            ts.push_back({p + n + ".bias", DType::F16, {H}});
        }
        ts.push_back({p + "fc1.weight", DType::F16, {F, H}});
        ts.push_back({p + "fc1.bias", DType::F16, {F}});
        ts.push_back({p + "fc2.weight", DType::F16, {H, F}});
        ts.push_back({p + "fc2.bias", DType::F16, {H}});
    }
    fixtures::writeSafetensorsFile(d + "/model.safetensors", ts, false);
    fixtures::writeJson(d + "/config.json", {{"model_type", "opt"}, {"vocab_size", V}, {"hidden_size", H},
                                             {"ffn_dim", F}, {"max_position_embeddings", P}, {"num_attention_heads", 4},
                                             {"num_hidden_layers", L}, {"torch_dtype", "float16"}});
    ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
    QVERIFY2(t.missing().empty(), t.missing().empty() ? "" : t.missing()[0].c_str());
    QVERIFY(t.unexpected().empty());
    QCOMPARE(t.modules()[size_t(t.find("model.decoder.embed_positions"))].className,
             std::string("OPTLearnedPositionalEmbedding"));
    QCOMPARE(t.modules()[size_t(t.find("model.decoder.layers.1"))].className, std::string("OPTDecoderLayer"));
    QCOMPARE(t.tiedGroups()[0], (std::vector<std::string>{"lm_head.weight", "model.decoder.embed_tokens.weight"}));
}
void TestModuleTree::qwenVariants()
{
    for (const char* type : {"qwen2", "qwen3", "mistral"}) {
        ModelConfig c = ModelConfig::parse(
            nlohmann::json{{"model_type", type}, {"vocab_size", 10}, {"hidden_size", 8}, {"intermediate_size", 16},
                           {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                           {"head_dim", 4}}
                .dump(),
            "config.json");
        auto d = dir(std::string("idx") + type);
        fixtures::writeJson(d + "/config.json", c.raw());
        // index-only keeps this test about the skeleton alone
        std::vector<fixtures::Tensor> ts{{"model.embed_tokens.weight", DType::F32, {10, 8}}};
        fixtures::writeSharded(d, ts, 1, false, false);
        ModuleTree t = buildModuleTree(Checkpoint::open(d), DType::F32);
        bool q2 = std::string(type) == "qwen2", q3 = std::string(type) == "qwen3";
        QCOMPARE(t.findParam("model.layers.0.self_attn.q_proj.bias") >= 0, q2);
        QCOMPARE(t.findParam("model.layers.0.self_attn.o_proj.bias") >= 0, false);
        QCOMPARE(t.find("model.layers.0.self_attn.k_norm") >= 0, q3);
        QCOMPARE(t.params()[size_t(t.findParam("model.layers.0.self_attn.k_proj.weight"))].shape,
                 (std::vector<int64_t>{4, 8}));
    }
}

void TestModuleTree::phi3Tree()
{
    // Phi3ForCausalLM as transformers 5.6 builds it (modeling_phi3.py): no
    // embedding dropout; Phi3Attention defines o_proj before qkv_proj; the
    // decoder layer ends with its two residual dropouts; rotary_emb after norm.
    auto d = dir("phi3");
    fixtures::Phi3Shape s{100, 32, 48, 2, 4, 4, false};
    fixtures::writeSharded(d, fixtures::phi3Tensors(s, DType::F32), 1, false, /*writeShards=*/false);
    fixtures::writeJson(d + "/config.json", fixtures::phi3Config(s, DType::F32));
    ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
    std::vector<std::string> names;
    for (size_t i = 0; i < 20; ++i)
        names.push_back(t.modules()[i].name + ":" + t.modules()[i].className);
    QCOMPARE(names, (std::vector<std::string>{
                        ":Phi3ForCausalLM", "model:Phi3Model", "model.embed_tokens:Embedding",
                        "model.layers:ModuleList", "model.layers.0:Phi3DecoderLayer",
                        "model.layers.0.self_attn:Phi3Attention", "model.layers.0.self_attn.o_proj:Linear",
                        "model.layers.0.self_attn.qkv_proj:Linear", "model.layers.0.mlp:Phi3MLP",
                        "model.layers.0.mlp.gate_up_proj:Linear", "model.layers.0.mlp.down_proj:Linear",
                        "model.layers.0.mlp.activation_fn:SiLU", "model.layers.0.input_layernorm:Phi3RMSNorm",
                        "model.layers.0.post_attention_layernorm:Phi3RMSNorm",
                        "model.layers.0.resid_attn_dropout:Dropout", "model.layers.0.resid_mlp_dropout:Dropout",
                        "model.layers.1:Phi3DecoderLayer", "model.layers.1.self_attn:Phi3Attention",
                        "model.layers.1.self_attn.o_proj:Linear", "model.layers.1.self_attn.qkv_proj:Linear"}));
    const size_t n = t.modules().size();
    QCOMPARE(t.modules()[n - 3].name + ":" + t.modules()[n - 3].className, std::string("model.norm:Phi3RMSNorm"));
    QCOMPARE(t.modules()[n - 2].name + ":" + t.modules()[n - 2].className,
             std::string("model.rotary_emb:Phi3RotaryEmbedding"));
    QCOMPARE(t.modules()[n - 1].name + ":" + t.modules()[n - 1].className, std::string("lm_head:Linear"));
    // head_dim 32 / 4 = 8; qkv_proj (4 + 2 x 4) x 8 = 96 rows; gate_up_proj 2 x 48.
    QCOMPARE(t.params()[size_t(t.findParam("model.layers.0.self_attn.qkv_proj.weight"))].shape,
             (std::vector<int64_t>{96, 32}));
    QCOMPARE(t.params()[size_t(t.findParam("model.layers.0.mlp.gate_up_proj.weight"))].shape,
             (std::vector<int64_t>{96, 32}));
    QVERIFY(t.findParam("model.layers.0.self_attn.qkv_proj.bias") < 0);
    // inv_freq and original_inv_freq: float32, arange(0, 8, 2) = 4 each, not saved.
    QCOMPARE(t.buffers().size(), size_t(2));
    QCOMPARE(t.buffers()[0].name, std::string("model.rotary_emb.inv_freq"));
    QCOMPARE(t.buffers()[1].name, std::string("model.rotary_emb.original_inv_freq"));
    for (const Buffer& b : t.buffers()) {
        QCOMPARE(b.shape, std::vector<int64_t>{4});
        QCOMPARE(b.dtype, DType::F32);
        QVERIFY(!b.persistent);
    }
    // Untied (Phi3Config's default): embed 100 x 32 = 3,200; a layer o 1,024 +
    // qkv 3,072 + gate_up 3,072 + down 1,536 + 2 norms 64 = 8,768; norm 32;
    // lm_head 3,200: 23,968 parameters, 4 bytes each, + 2 x 4 x 4 buffer bytes.
    QVERIFY(t.tiedGroups().empty());
    QCOMPARE(t.root().paramCount, uint64_t(23'968));
    QCOMPARE(t.root().bytes, uint64_t(4 * 23'968 + 32));
    QCOMPARE(bytesOf(t, "model.layers.0"), uint64_t(4 * 8'768));
    QCOMPARE(t.noSplitClasses(), std::vector<std::string>{"Phi3DecoderLayer"});
    QVERIFY(t.missing().empty());
}

void TestModuleTree::phi4MiniLikeTree()
{
    // Phi-4-mini's traits at a small size: grouped-query attention, tied
    // embeddings, partial_rotary_factor 0.75 and longrope.
    auto d = dir("phi4mini");
    fixtures::Phi3Shape s{100, 32, 48, 2, 4, 2, true, 0.75, true};
    fixtures::writeSharded(d, fixtures::phi3Tensors(s, DType::BF16), 1, false, /*writeShards=*/false);
    fixtures::writeJson(d + "/config.json", fixtures::phi3Config(s, DType::BF16));
    ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
    QCOMPARE(*t.dtype(), DType::BF16);
    // qkv_proj (4 + 2 x 2) x 8 = 64 rows.
    QCOMPARE(t.params()[size_t(t.findParam("model.layers.1.self_attn.qkv_proj.weight"))].shape,
             (std::vector<int64_t>{64, 32}));
    // rotary dims int(8 x 0.75) = 6: arange(0, 6, 2) = 3 frequencies, float32 in a bf16 model.
    QCOMPARE(t.buffers().size(), size_t(2));
    for (const Buffer& b : t.buffers()) {
        QCOMPARE(b.shape, std::vector<int64_t>{3});
        QCOMPARE(b.dtype, DType::F32);
    }
    QCOMPARE(bytesOf(t, "model.rotary_emb"), uint64_t(2 * 3 * 4));
    // Tied: lm_head.weight is embed_tokens.weight, counted once and absent from the files.
    QCOMPARE(t.tiedGroups(), (std::vector<std::vector<std::string>>{{"lm_head.weight", "model.embed_tokens.weight"}}));
    QVERIFY(t.missing().empty());
    // embed 3,200; a layer o 1,024 + qkv 2,048 + gate_up 3,072 + down 1,536 +
    // norms 64 = 7,744; norm 32; lm_head tied: 18,720 parameters, 2 bytes each
    // in bf16, + 24 bytes of float32 buffers.
    QCOMPARE(t.root().paramCount, uint64_t(18'720));
    QCOMPARE(t.root().bytes, uint64_t(2 * 18'720 + 24));
    QCOMPARE(bytesOf(t, "lm_head"), uint64_t(0));

    // The rope dict's partial_rotary_factor beats the top level for the default
    // rope (setdefault in Phi3Config.convert_rope_params_to_dict); for longrope
    // the top level wins (standardize_rope_params, run again by
    // _compute_longrope_parameters, copies the attribute over the dict's).
    nlohmann::json c = fixtures::phi3Config(s, DType::BF16);
    c["rope_scaling"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
    auto d2 = dir("phi4mini-default-rope");
    fixtures::writeSharded(d2, fixtures::phi3Tensors(s, DType::BF16), 1, false, false);
    fixtures::writeJson(d2 + "/config.json", c);
    QCOMPARE(buildModuleTree(Checkpoint::open(d2), std::nullopt).buffers()[0].shape, std::vector<int64_t>{2}); // 8 x 0.5
    c["rope_scaling"] = fixtures::phi3Config(s, DType::BF16)["rope_scaling"];
    c["rope_scaling"]["partial_rotary_factor"] = 0.5;
    fixtures::writeJson(d2 + "/config.json", c);
    QCOMPARE(buildModuleTree(Checkpoint::open(d2), std::nullopt).buffers()[0].shape, std::vector<int64_t>{3}); // 8 x 0.75
}

void TestModuleTree::phi3RealSizes()
{
    // Parameter counts of the real checkpoints, index only.
    // Phi-3-mini-4k-instruct: embed 32,064 x 3,072 = 98,500,608 (and lm_head
    // again, untied); a layer o 9,437,184 + qkv 9,216 x 3,072 = 28,311,552 +
    // gate_up 50,331,648 + down 25,165,824 + norms 6,144 = 113,252,352, x 32;
    // norm 3,072: 3,821,079,552.
    auto d = dir("phi3-mini");
    fixtures::Phi3Shape mini{32064, 3072, 8192, 32, 32, 32, false};
    fixtures::writeSharded(d, fixtures::phi3Tensors(mini, DType::BF16), 2, true, false);
    fixtures::writeJson(d + "/config.json", fixtures::phi3Config(mini, DType::BF16));
    QCOMPARE(buildModuleTree(Checkpoint::open(d), std::nullopt).root().paramCount, uint64_t(3'821'079'552ull));
    // Phi-4-mini-instruct: embed 200,064 x 3,072 = 614,596,608 (tied); a layer
    // o 9,437,184 + qkv (24 + 16) x 128 x 3,072 = 15,728,640 + gate_up
    // 50,331,648 + down 25,165,824 + norms 6,144 = 100,669,440, x 32; norm
    // 3,072: 3,836,021,760. Rotary dims 128 x 0.75 = 96: 48 float32 each.
    auto d4 = dir("phi4-mini");
    fixtures::Phi3Shape four{200064, 3072, 8192, 32, 24, 8, true, 0.75, true};
    fixtures::writeSharded(d4, fixtures::phi3Tensors(four, DType::BF16), 2, true, false);
    fixtures::writeJson(d4 + "/config.json", fixtures::phi3Config(four, DType::BF16));
    ModuleTree t = buildModuleTree(Checkpoint::open(d4), std::nullopt);
    QCOMPARE(t.root().paramCount, uint64_t(3'836'021'760ull));
    QCOMPARE(t.buffers()[0].shape, std::vector<int64_t>{48});
    QCOMPARE(t.root().bytes, uint64_t(2 * 3'836'021'760ull + 2 * 48 * 4));
}

void TestModuleTree::defaultDTypeAsTransformers()
{
    // No dtype asked for (transformers' dtype="auto"): config.json's `dtype`, then
    // `torch_dtype`; without either, the first floating tensor of the first
    // weights file, whatever holds most bytes (here float32: 40,000 of 40,016).
    auto d = dir("autodtype");
    fixtures::writeSafetensorsFile(d + "/model.safetensors",
                                   {{"step", DType::I64, {1}},
                                    {"x.a.weight", DType::F16, {2, 2}},
                                    {"x.b.weight", DType::F32, {100, 100}}},
                                   false);
    fixtures::writeJson(d + "/config.json", {{"model_type", "mamba"}});
    QCOMPARE(checkpointDType(Checkpoint::open(d)), DType::F16);
    QCOMPARE(*buildModuleTree(Checkpoint::open(d), std::nullopt).dtype(), DType::F16);
    fixtures::writeJson(d + "/config.json", {{"model_type", "mamba"}, {"torch_dtype", "float32"}});
    QCOMPARE(checkpointDType(Checkpoint::open(d)), DType::F32);
    fixtures::writeJson(d + "/config.json",
                        {{"model_type", "mamba"}, {"torch_dtype", "float32"}, {"dtype", "bfloat16"}});
    QCOMPARE(checkpointDType(Checkpoint::open(d)), DType::BF16);
    // Only integer tensors: transformers would fail to build the model under an
    // integer dtype; planning falls back to float32.
    auto ints = dir("intsonly");
    fixtures::writeSafetensorsFile(ints + "/model.safetensors", {{"a.idx", DType::I32, {4}}, {"b.idx", DType::I64, {4}}},
                                   false);
    fixtures::writeJson(ints + "/config.json", {{"model_type", "mamba"}});
    QCOMPARE(checkpointDType(Checkpoint::open(ints)), DType::F32);
}
void TestModuleTree::impossibleConfigValues_data()
{
    QTest::addColumn<QString>("key");
    QTest::addColumn<qlonglong>("value");
    QTest::addColumn<QString>("message");
    QTest::newRow("negative width") << "n_embd" << -5LL << "'n_embd' is -5, outside 0..2^40";
    QTest::newRow("zero heads") << "n_head" << 0LL << "'n_head' must be at least 1";
    QTest::newRow("not divisible") << "n_head" << 5LL << "'n_embd' (8) is not a multiple of 'n_head' (5)";
    QTest::newRow("absurd vocab") << "vocab_size" << (1LL << 50) << "'vocab_size' is 1125899906842624, outside 0..2^40";
}

void TestModuleTree::impossibleConfigValues()
{
    QFETCH(QString, key);
    QFETCH(qlonglong, value);
    QFETCH(QString, message);
    auto d = dir("badconfig-" + key.toStdString() + std::to_string(value));
    fixtures::writeSharded(d, fixtures::gpt2Tensors({97, 16, 8, 2}, DType::F32), 1, false, false);
    nlohmann::json c = fixtures::gpt2Config({97, 16, 8, 2}, DType::F32);
    c["n_head"] = 2;
    c[key.toStdString()] = value;
    fixtures::writeJson(d + "/config.json", c);
    try {
        buildModuleTree(Checkpoint::open(d), std::nullopt);
        QFAIL("no error");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("config.json: " + message), e.what());
    }
}

void TestModuleTree::familyRegistry()
{
    QCOMPARE(knownModelTypes(),
             (std::vector<std::string>{"gpt2", "llama", "mistral", "qwen2", "qwen3", "opt", "phi3"}));
    QCOMPARE(archOf("phi3"), std::optional<Arch>(Arch::phi3));
    QCOMPARE(familyOf("phi3"), std::optional<std::string>("phi3"));
    // Phi-3's tokenizer is the Llama one (add_bos_token defaults to True).
    QVERIFY(addsBosByDefault("phi3"));
    QCOMPARE(archOf("gpt2"), std::optional<Arch>(Arch::gpt2));
    QCOMPARE(archOf("mistral"), std::optional<Arch>(Arch::llama));
    QCOMPARE(archOf("qwen3"), std::optional<Arch>(Arch::llama));
    QCOMPARE(archOf("opt"), std::optional<Arch>(Arch::opt));
    QVERIFY(!archOf("mamba"));
    QCOMPARE(familyOf("qwen2"), std::optional<std::string>("llama"));
    QCOMPARE(familyOf("opt"), std::optional<std::string>("opt"));
    QVERIFY(!familyOf("mamba"));
    // transformers' tokenizers: Llama, Mistral and OPT put BOS first, GPT-2 and Qwen do not.
    for (const char* type : {"llama", "mistral", "opt"})
        QVERIFY2(addsBosByDefault(type), type);
    for (const char* type : {"gpt2", "qwen2", "qwen3", "mamba"})
        QVERIFY2(!addsBosByDefault(type), type);
}

void TestModuleTree::executionUnits_data()
{
    QTest::addColumn<QByteArray>("config");
    QTest::addColumn<QStringList>("units");
    const nlohmann::json llama{{"model_type", "llama"},     {"vocab_size", 10},          {"hidden_size", 8},
                               {"intermediate_size", 16},   {"num_hidden_layers", 2},    {"num_attention_heads", 2},
                               {"tie_word_embeddings", true}};
    const nlohmann::json opt{{"model_type", "opt"},  {"vocab_size", 10},           {"hidden_size", 8},
                             {"ffn_dim", 16},        {"num_hidden_layers", 2},     {"num_attention_heads", 2},
                             {"max_position_embeddings", 12}};
    const QStringList llamaUnits{"model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm", "lm_head"};
    QTest::newRow("gpt2") << QByteArray::fromStdString(fixtures::gpt2Config({97, 16, 8, 3}, DType::F32).dump())
                          << QStringList{"transformer.wte",  "transformer.wpe", "transformer.h.0", "transformer.h.1",
                                         "transformer.h.2",  "transformer.ln_f", "lm_head"};
    QTest::newRow("llama, tied") << QByteArray::fromStdString(llama.dump()) << llamaUnits;
    nlohmann::json qwen3 = llama;
    qwen3["model_type"] = "qwen3";
    QTest::newRow("qwen3") << QByteArray::fromStdString(qwen3.dump()) << llamaUnits;
    nlohmann::json phi3 = llama;
    phi3["model_type"] = "phi3";
    QTest::newRow("phi3, tied") << QByteArray::fromStdString(phi3.dump()) << llamaUnits;
    phi3["tie_word_embeddings"] = false;
    phi3["partial_rotary_factor"] = 0.5;
    QTest::newRow("phi3, untied") << QByteArray::fromStdString(phi3.dump()) << llamaUnits;
    QTest::newRow("opt")
        << QByteArray::fromStdString(opt.dump())
        << QStringList{"model.decoder.embed_tokens", "model.decoder.embed_positions", "model.decoder.layers.0",
                       "model.decoder.layers.1", "model.decoder.final_layer_norm", "lm_head"};
    // project_in runs before the positions, project_out after the final norm:
    // run order, which is not the skeleton's definition order.
    nlohmann::json projected = opt;
    projected["word_embed_proj_dim"] = 4;
    QTest::newRow("opt, projected")
        << QByteArray::fromStdString(projected.dump())
        << QStringList{"model.decoder.embed_tokens",     "model.decoder.project_in",  "model.decoder.embed_positions",
                       "model.decoder.layers.0",         "model.decoder.layers.1",    "model.decoder.final_layer_norm",
                       "model.decoder.project_out",      "lm_head"};
    nlohmann::json postLn = opt;
    postLn["do_layer_norm_before"] = false; // OPT-350m: no final norm
    QTest::newRow("opt, post-LN")
        << QByteArray::fromStdString(postLn.dump())
        << QStringList{"model.decoder.embed_tokens", "model.decoder.embed_positions", "model.decoder.layers.0",
                       "model.decoder.layers.1", "lm_head"};
    QTest::newRow("unknown family") << QByteArray(R"({"model_type": "mamba"})") << QStringList{};
}

void TestModuleTree::executionUnits()
{
    QFETCH(QByteArray, config);
    QFETCH(QStringList, units);
    const ModuleTree t = skeletonOf(QTest::currentDataTag(), nlohmann::json::parse(config.toStdString()));
    QStringList got;
    for (const auto& u : stowage::executionUnits(t))
        got << QString::fromStdString(u);
    QCOMPARE(got, units);
    if (units.isEmpty())
        return;
    // Each unit is a module of the skeleton, and every parameter lies in
    // exactly one unit: the weight store fetches nothing twice and nothing
    // is left out of the hooks.
    for (const auto& u : units)
        QVERIFY2(t.find(u.toStdString()) >= 0, qPrintable(u));
    for (const Param& p : t.params()) {
        int in = 0;
        for (const auto& u : units)
            in += QString::fromStdString(p.name).startsWith(u + ".");
        QVERIFY2(in == 1, p.name.c_str());
    }
}

QTEST_APPLESS_MAIN(TestModuleTree)
#include "tst_moduletree.moc"
