// gpt-oss (model_type gpt_oss) before download: the tree transformers 5.6
// builds for gpt-oss-20b's config.json and index, and the maps its planner
// makes of it. Every expected value is derived by hand from 5.6's
// modeling_gpt_oss.py / configuration_gpt_oss.py and integrations/
// accelerate.py (docs/planner.md), the arithmetic beside it.
#include "fixtures.h"
#include "planfixtures.h"
#include "gptossfixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/families.h"
#include "stowage/planner.h"

#include <QtTest>

#include <filesystem>

using namespace stowage;
using fixtures::budgets;
using fixtures::mapText;
namespace fs = std::filesystem;

namespace {

// gpt-oss-20b in bf16 (2 bytes a value), hidden 2880, 64 heads of 64, 8 kv
// heads, 32 experts of width 2880, vocab 201,088, 24 layers:
//   embed_tokens, lm_head: 201,088 x 2,880 = 579,133,440 values each.
//   a layer: q_proj 4,096 x 2,880 + 4,096 and o_proj 2,880 x 4,096 + 2,880;
//     k_proj, v_proj 512 x 2,880 + 512 each; sinks 64: 26,550,144 values;
//     router 32 x 2,880 + 32 = 92,192;
//     experts gate_up_proj 32 x 2,880 x 5,760 = 530,841,600, its bias
//     32 x 5,760 = 184,320, down_proj 32 x 2,880 x 2,880 = 265,420,800, its
//     bias 32 x 2,880 = 92,160: 796,538,880;
//     two norms 5,760: in all 823,186,976 values.
//   model.norm 2,880; rotary_emb: inv_freq and original_inv_freq, 32 float32
//   each (yarn keeps head_dim / 2), 256 bytes.
//   total 2 x 579,133,440 + 24 x 823,186,976 + 2,880 = 20,914,757,184 values.
constexpr uint64_t kEmbed = 1'158'266'880; // bytes, bf16
constexpr uint64_t kLayer = 1'646'373'952;
constexpr uint64_t kExperts = 1'593'077'760;
constexpr uint64_t kTotal = 41'829'514'624; // 20,914,757,184 x 2 + 256

// "model.layers.a:dev, ..., model.layers.b:dev"
std::string layers(int from, int to, const char* dev)
{
    std::string s;
    for (int i = from; i <= to; ++i)
        s += (s.empty() ? "" : ", ") + std::string("model.layers.") + std::to_string(i) + ":" + dev;
    return s;
}

std::string planned(const ModuleTree& t, Budgets b, Strategy s)
{
    PlanOptions o;
    o.strategy = s;
    o.maxMemory = std::move(b);
    return mapText(planDeviceMap(t, o).deviceMap);
}

} // namespace

class TestFamilyGptOss : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    ModuleTree tree(const char* name, fixtures::GptOssShape s, std::optional<DType> dt)
    {
        const std::string d = m_tmp.path().toStdString() + "/" + name;
        if (!fs::exists(d + "/config.json")) {
            fs::create_directories(d);
            fixtures::writeSharded(d, fixtures::gptOssTensors(s, DType::BF16), 3, false, /*writeShards=*/false);
            fixtures::writeJson(d + "/config.json", fixtures::gptOssConfig(s, DType::BF16));
        }
        Checkpoint ck = Checkpoint::open(d);
        if (!ck.indexOnly())
            throw std::logic_error("expected an index-only checkpoint");
        return buildModuleTree(ck, dt);
    }
private slots:
    void registryRow();
    void treeBeforeDownload();
    void sizesInFloat32();
    void mxfp4IndexPlans();
    void sequentialMaps();
    void balancedMaps();
};

void TestFamilyGptOss::registryRow()
{
    QCOMPARE(familyOf("gpt_oss"), std::optional<std::string>("gpt_oss"));
    QVERIFY(!addsBosByDefault("gpt_oss")); // o200k_harmony: no BOS
}

void TestFamilyGptOss::treeBeforeDownload()
{
    ModuleTree t = tree("20b", {}, std::nullopt); // config.json says bfloat16
    QCOMPARE(*t.dtype(), DType::BF16);
    QVERIFY(t.missing().empty());
    QVERIFY(t.unexpected().empty());
    // Layer 0 in definition order (modeling_gpt_oss.py): self_attn (its four
    // projections), mlp (router, then experts), then the two norms.
    std::vector<std::string> got;
    const Module& l0 = t.modules()[size_t(t.find("model.layers.0"))];
    QCOMPARE(QString::fromStdString(l0.className), QString("GptOssDecoderLayer"));
    for (int m = t.find("model.layers.0") + 1; m < l0.end; ++m)
        got.push_back(t.modules()[size_t(m)].name.substr(15) + " " + t.modules()[size_t(m)].className);
    QCOMPARE(got, (std::vector<std::string>{"self_attn GptOssAttention", "self_attn.q_proj Linear",
                                            "self_attn.k_proj Linear", "self_attn.v_proj Linear",
                                            "self_attn.o_proj Linear", "mlp GptOssMLP",
                                            "mlp.router GptOssTopKRouter", "mlp.experts GptOssExperts",
                                            "input_layernorm GptOssRMSNorm",
                                            "post_attention_layernorm GptOssRMSNorm"}));
    // The model's children, and the root's.
    std::vector<std::string> top;
    for (int c : t.modules()[size_t(t.find("model"))].children)
        top.push_back(t.modules()[size_t(c)].name + " " + t.modules()[size_t(c)].className);
    for (int c : t.root().children)
        top.push_back(t.modules()[size_t(c)].name + " " + t.modules()[size_t(c)].className);
    QCOMPARE(top, (std::vector<std::string>{"model.embed_tokens Embedding", "model.layers ModuleList",
                                            "model.norm GptOssRMSNorm", "model.rotary_emb GptOssRotaryEmbedding",
                                            "model GptOssModel", "lm_head Linear"}));
    QCOMPARE(QString::fromStdString(t.root().className), QString("GptOssForCausalLM"));
    // named_parameters: the attention's own sinks before its projections'.
    const Module& attn = t.modules()[size_t(t.find("model.layers.0.self_attn"))];
    QCOMPARE(attn.params.size(), size_t(1));
    QCOMPARE(QString::fromStdString(t.params()[size_t(attn.params[0])].name), QString("model.layers.0.self_attn.sinks"));
    QCOMPARE(t.params()[size_t(attn.params[0]) + 1].name, std::string("model.layers.0.self_attn.q_proj.weight"));
    // The fused experts as 5.6 builds them ([E, in, out]) and as the BF16 files store them.
    const auto shape = [&](const char* p) { return t.params()[size_t(t.findParam(p))].shape; };
    QCOMPARE(shape("model.layers.3.mlp.experts.gate_up_proj"), (std::vector<int64_t>{32, 2880, 5760}));
    QCOMPARE(shape("model.layers.3.mlp.experts.gate_up_proj_bias"), (std::vector<int64_t>{32, 5760}));
    QCOMPARE(shape("model.layers.3.mlp.experts.down_proj"), (std::vector<int64_t>{32, 2880, 2880}));
    QCOMPARE(shape("model.layers.3.mlp.experts.down_proj_bias"), (std::vector<int64_t>{32, 2880}));
    QCOMPARE(shape("model.layers.3.mlp.router.bias"), (std::vector<int64_t>{32}));
    QCOMPARE(shape("model.layers.3.self_attn.q_proj.weight"), (std::vector<int64_t>{4096, 2880}));
    QCOMPARE(shape("model.layers.3.self_attn.o_proj.bias"), (std::vector<int64_t>{2880}));
    QCOMPARE(shape("model.layers.3.self_attn.sinks"), (std::vector<int64_t>{64}));
    QVERIFY(t.params()[size_t(t.findParam("model.layers.3.mlp.experts.gate_up_proj"))].tensor >= 0); // read 1:1
    QVERIFY(t.params()[size_t(t.findParam("model.layers.3.mlp.experts.gate_up_proj"))].parts.empty());
    QCOMPARE(t.params()[size_t(t.findParam("model.layers.3.mlp.experts.down_proj"))].experts, int64_t(32));
    QCOMPARE(t.params()[size_t(t.findParam("model.layers.3.mlp.router.weight"))].experts, int64_t(0));
    // Buffers: only the rotary pair, float32, 32 values.
    QCOMPARE(t.buffers().size(), size_t(2));
    QCOMPARE(t.buffers()[0].name, std::string("model.rotary_emb.inv_freq"));
    QCOMPARE(t.buffers()[0].shape, std::vector<int64_t>{32});
    QCOMPARE(t.buffers()[1].dtype, DType::F32);
    QVERIFY(t.tiedGroups().empty()); // tie_word_embeddings false
    QCOMPARE(t.noSplitClasses(), std::vector<std::string>{"GptOssDecoderLayer"});
    // Sizes (the header's arithmetic).
    const auto bytes = [&](const char* m) { return t.modules()[size_t(t.find(m))].bytes; };
    QCOMPARE(bytes("model.embed_tokens"), kEmbed);
    QCOMPARE(bytes("lm_head"), kEmbed);
    QCOMPARE(bytes("model.layers.23"), kLayer);
    QCOMPARE(bytes("model.layers.0.mlp.experts"), kExperts);
    QCOMPARE(bytes("model.layers.0.self_attn"), uint64_t(53'100'288)); // 26,550,144 x 2
    QCOMPARE(bytes("model.layers.0.mlp.router"), uint64_t(184'384));   // 92,192 x 2
    QCOMPARE(bytes("model.rotary_emb"), uint64_t(256));
    QCOMPARE(t.root().bytes, kTotal);
    QCOMPARE(t.root().paramCount, uint64_t(20'914'757'184));
    QCOMPARE(executionUnits(t).size(), size_t(1 + 24 + 2));
    QCOMPARE(executionUnits(t)[1], std::string("model.layers.0"));
}

void TestFamilyGptOss::sizesInFloat32()
{
    ModuleTree t = tree("20b", {}, DType::F32);
    // 20,914,757,184 x 4 + 256; a layer 823,186,976 x 4.
    QCOMPARE(t.root().bytes, uint64_t(83'659'028'992));
    QCOMPARE(t.modules()[size_t(t.find("model.layers.5"))].bytes, uint64_t(3'292'747'904));
    // Defaults: a config with only model_type is GptOssConfig's 120b-like
    // shape (36 layers, 128 experts): per layer experts 128 x (2,880 x 5,760
    // + 5,760 + 2,880 x 2,880 + 2,880) = 3,186,155,520 values.
    const std::string d = m_tmp.path().toStdString() + "/defaults";
    fs::create_directories(d);
    fixtures::writeJson(d + "/config.json", {{"model_type", "gpt_oss"}});
    nlohmann::json map = nlohmann::json::object(); // one norm a layer: enough tensors for 36 layers
    for (int i = 0; i < 36; ++i)
        map["model.layers." + std::to_string(i) + ".input_layernorm.weight"] = "model-00001-of-00001.safetensors";
    fixtures::writeJson(d + "/model.safetensors.index.json",
                        {{"metadata", nlohmann::json::object()}, {"weight_map", map}});
    ModuleTree def = buildModuleTree(Checkpoint::open(d), DType::BF16);
    QCOMPARE(def.modules()[size_t(def.find("model.layers"))].children.size(), size_t(36));
    QCOMPARE(def.modules()[size_t(def.find("model.layers.35.mlp.experts"))].bytes, uint64_t(6'372'311'040));
}

void TestFamilyGptOss::mxfp4IndexPlans()
{
    // OpenAI's own files: experts as MXFP4 blocks and scales. The blocks are
    // the fused parameters' stored form and the scales their state, so
    // nothing is missing or unexpected; with no target named the tree is
    // sized dequantized (5.6 on a CPU), as the bf16 save. tst_quantization
    // sizes and plans it quantized.
    fixtures::GptOssShape s;
    s.mxfp4 = true;
    ModuleTree t = tree("20b-mxfp4", s, std::nullopt);
    QCOMPARE(t.root().bytes, kTotal);
    QVERIFY(t.missing().empty());
    QVERIFY(t.unexpected().empty());
    QCOMPARE(t.params()[size_t(t.findParam("model.layers.0.mlp.experts.gate_up_proj"))].tensor >= 0, true);
    QVERIFY(!planned(t, budgets({{"0", 10e9}, {"cpu", 20e9}}), Strategy::Sequential).empty());
}

void TestFamilyGptOss::sequentialMaps()
{
    ModuleTree t = tree("20b", {}, std::nullopt);
    // GPU 0 = 10 GB, cpu = 20 GB. The largest layer still to place is a
    // decoder layer (1,646,373,952, no-split) until the last one is placed;
    // the main devices keep room for it.
    //   GPU 0 offers 10e9 - 1,646,373,952 = 8,353,626,048: model does not fit
    //   and splits; embed_tokens 1,158,266,880 + 4 layers = 7,743,762,688 fit,
    //   a fifth (9,390,136,640) does not: layers.4 moves on (no-split).
    //   cpu offers 20e9 - 1,646,373,952 = 18,353,626,048: 11 layers
    //   (18,110,113,472) fit, a twelfth (19,756,487,424) does not.
    //   Everything from layers.15 on goes to disk.
    const std::string oneGpu = "model.embed_tokens:0, " + layers(0, 3, "0") + ", " + layers(4, 14, "cpu") + ", " +
                               layers(15, 23, "disk") + ", model.norm:disk, model.rotary_emb:disk, lm_head:disk";
    QCOMPARE(planned(t, budgets({{"0", 10e9}, {"cpu", 20e9}}), Strategy::Sequential), oneGpu);
    // auto with one GPU: get_balanced_memory changes no budget (only GPUs
    // before the last are capped), so the map is sequential's.
    QCOMPARE(planned(t, budgets({{"0", 10e9}, {"cpu", 20e9}}), Strategy::Auto), oneGpu);
    // Two GPUs of 10 GB and cpu = 10 GB, sequential: GPU 0 as above; GPU 1 is
    // not a main device (no reserve): 6 layers (9,878,243,712), not 7; cpu
    // offers 10e9 - 1,646,373,952 = 8,353,626,048: 5 layers (8,231,869,760).
    QCOMPARE(planned(t, budgets({{"0", 10e9}, {"1", 10e9}, {"cpu", 10e9}}), Strategy::Sequential),
             "model.embed_tokens:0, " + layers(0, 3, "0") + ", " + layers(4, 9, "1") + ", " + layers(10, 14, "cpu") +
                 ", " + layers(15, 23, "disk") + ", model.norm:disk, model.rotary_emb:disk, lm_head:disk");
    // fp32 (each size doubled but the buffers), GPU 0 = cpu = 40 GB: GPU 0
    // offers 40e9 - 3,292,747,904 = 36,707,252,096: embed 2,316,533,760 + 10
    // layers = 35,244,012,800; cpu offers the same: 11 layers
    // (36,220,226,944); the rest on disk.
    ModuleTree t32 = tree("20b", {}, DType::F32);
    QCOMPARE(planned(t32, budgets({{"0", 40e9}, {"cpu", 40e9}}), Strategy::Sequential),
             "model.embed_tokens:0, " + layers(0, 9, "0") + ", " + layers(10, 20, "cpu") + ", " +
                 layers(21, 23, "disk") + ", model.norm:disk, model.rotary_emb:disk, lm_head:disk");
}

void TestFamilyGptOss::balancedMaps()
{
    ModuleTree t = tree("20b", {}, std::nullopt);
    // get_balanced_memory, two GPUs of 40 GB, cpu 40 GB:
    //   per_gpu = 41,829,514,624 // 2 = 20,914,757,312;
    //   buffer: the first GptOssDecoderLayer (1,646,373,952) against the mean
    //   leaf: 220 modules hold tensors directly (embed, 24 x 9: self_attn
    //   (sinks), q/k/v/o, router, experts, two norms; norm, rotary_emb,
    //   lm_head), 41,829,514,624 / 220 = 190,134,157; int(1.25 x
    //   1,646,373,952) = 2,057,967,440. GPU 0 gets min(22,972,724,752, 40e9).
    //   GPU 0 then offers 22,972,724,752 - 1,646,373,952 = 21,326,350,800:
    //   embed + 12 layers = 20,914,754,304 fit, a thirteenth does not;
    //   GPU 1 (no reserve) takes the rest: 12 layers, norm, rotary_emb and
    //   lm_head, 20,914,760,320 <= 40e9.
    const std::string two = "model.embed_tokens:0, " + layers(0, 11, "0") + ", " + layers(12, 23, "1") +
                            ", model.norm:1, model.rotary_emb:1, lm_head:1";
    const Budgets b = budgets({{"0", 40e9}, {"1", 40e9}, {"cpu", 40e9}});
    QCOMPARE(planned(t, b, Strategy::Balanced), two);
    QCOMPARE(planned(t, b, Strategy::Auto), two);
    // balanced_low_0: GPU 0 gets max(0, 41,829,514,624 - 40e9) =
    // 1,829,514,624, which less the layer reserve (183,140,672) holds not even
    // embed_tokens (no children): everything starts on GPU 1. GPU 1 takes
    // embed + 23 layers (39,024,867,776; a 24th would make 40,671,241,728).
    // layers.23 goes to the cpu, whose reserve is now lm_head's
    // (1,158,266,880, the largest left), then norm, rotary_emb and lm_head.
    QCOMPARE(planned(t, b, Strategy::BalancedLow0),
             "model.embed_tokens:1, " + layers(0, 22, "1") +
                 ", model.layers.23:cpu, model.norm:cpu, model.rotary_emb:cpu, lm_head:cpu");
}

QTEST_APPLESS_MAIN(TestFamilyGptOss)
#include "tst_family_gptoss.moc"
