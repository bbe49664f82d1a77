// The module tree transformers would build, and its sizes under a dtype:
// GPT-2, Llama, OPT and Qwen, dtypes, the family registry and execution
// units (the newer families' trees are in tst_moduletree_families).
#include "fixtures.h"
#include "gemmafixtures.h"
#include "moefixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/moduletree.h"
#include "treefixtures.h"

#include <QtTest>

#include <filesystem>

using namespace stowage;
namespace fs = std::filesystem;
using fixtures::bytesOf;
using fixtures::gemma3Config;
using fixtures::gemma3TextConfig;

class TestModuleTree : public QObject, fixtures::TreeScratch {
    Q_OBJECT

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
    // Accelerate called with dtype=float32 on the model built from config.json
    // (float32 parameters whatever the shards store) counts min(4, 4): 4 bytes
    // a parameter, the float32 buffers 4 (issue 32: sized as stored, 2 bytes,
    // it put a tied fp32 Qwen2-0.5B wholly on a 1 GB GPU 0).
    QCOMPARE(buildModuleTree(Checkpoint::open(d), DType::F32, Reference::Accelerate).root().bytes,
             uint64_t(4 * 1'235'814'400ull + 256));
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
    QCOMPARE(knownModelTypes(), (std::vector<std::string>{"gpt2", "llama", "mistral", "qwen2", "qwen3", "mixtral",
                                                          "opt", "gemma3_text", "gemma3", "phi3", "qwen3_moe", "gpt_oss", "deepseek_v3"}));
    QCOMPARE(archOf("gemma3_text"), std::optional<Arch>(Arch::gemma3));
    QCOMPARE(archOf("gemma3"), std::optional<Arch>(Arch::gemma3));
    QCOMPARE(familyOf("gemma3_text"), std::optional<std::string>("gemma3"));
    QVERIFY(!archOf("gemma2"));
    // Gemma's tokenizer puts <bos> first (add_bos_token true)
    QVERIFY(addsBosByDefault("gemma3_text"));
    QVERIFY(addsBosByDefault("gemma3"));
    QCOMPARE(archOf("phi3"), std::optional<Arch>(Arch::phi3));
    QCOMPARE(familyOf("phi3"), std::optional<std::string>("phi3"));
    // Phi-3's tokenizer is the Llama one (add_bos_token defaults to True).
    QVERIFY(addsBosByDefault("phi3"));
    QCOMPARE(archOf("mixtral"), std::optional<Arch>(Arch::mixtral));
    QCOMPARE(archOf("qwen3_moe"), std::optional<Arch>(Arch::qwen3_moe));
    QCOMPARE(familyOf("qwen3_moe"), std::optional<std::string>("qwen3_moe"));
    QVERIFY(addsBosByDefault("mixtral"));    // LlamaTokenizerFast
    QVERIFY(!addsBosByDefault("qwen3_moe")); // Qwen2TokenizerFast
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
    // MoE layers are one unit each, router and experts inside: the experts
    // are fetched within the layer's unit once its router has picked them.
    fixtures::MoeShape mixtral;
    QTest::newRow("mixtral") << QByteArray::fromStdString(fixtures::moeConfig(mixtral, DType::F32).dump()) << llamaUnits;
    fixtures::MoeShape qwenMoe;
    qwenMoe.type = "qwen3_moe";
    qwenMoe.layers = 3;
    qwenMoe.mlpOnly = {1};
    QTest::newRow("qwen3_moe, one dense layer")
        << QByteArray::fromStdString(fixtures::moeConfig(qwenMoe, DType::F32).dump())
        << QStringList{"model.embed_tokens", "model.layers.0", "model.layers.1", "model.layers.2", "model.norm",
                       "lm_head"};
    QTest::newRow("unknown family") << QByteArray(R"({"model_type": "mamba"})") << QStringList{};
    // Gemma 3: the text model's units; the composite's vision tower and
    // projector do not run for text prompts and lie in none (idle below).
    QTest::newRow("gemma3_text") << QByteArray::fromStdString(gemma3TextConfig().dump())
                                 << QStringList{"model.embed_tokens", "model.layers.0", "model.layers.1",
                                                "model.layers.2", "model.norm", "lm_head"};
    QTest::newRow("gemma3") << QByteArray::fromStdString(gemma3Config(true).dump())
                            << QStringList{"model.language_model.embed_tokens", "model.language_model.layers.0",
                                           "model.language_model.layers.1", "model.language_model.layers.2",
                                           "model.language_model.norm", "lm_head"};
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
        const bool idle = p.name.rfind("model.vision_tower.", 0) == 0 ||
                          p.name.rfind("model.multi_modal_projector.", 0) == 0; // Gemma 3's, never run
        QVERIFY2(in == (idle ? 0 : 1), p.name.c_str());
    }
}

QTEST_APPLESS_MAIN(TestModuleTree)
#include "tst_moduletree.moc"
