// Quantized checkpoints sized and planned as transformers 5.6 does with each
// quantizer (docs/planner.md, "Quantized checkpoints"): MXFP4 (gpt-oss),
// fine-grained FP8 (a Qwen3-FP8-like config), bitsandbytes 4-bit and GPTQ
// (Llama), each quantized where 5.6 applies the quantizer and dequantized
// to the load dtype where it does not. Every expected value is derived by
// hand from 5.6's quantizers and integrations, the arithmetic beside it.
#include "fixtures.h"
#include "planfixtures.h"
#include "gptossfixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/hardware.h"
#include "stowage/planner.h"
#include "stowage/quantization.h"

#include <QtTest>

#include <filesystem>

using namespace stowage;
using fixtures::budgets;
using fixtures::mapText;
namespace fs = std::filesystem;

namespace {

std::string layers(int from, int to, const char* dev)
{
    std::string s;
    for (int i = from; i <= to; ++i)
        s += (s.empty() ? "" : ", ") + std::string("model.layers.") + std::to_string(i) + ":" + dev;
    return s;
}

Plan plan(const ModuleTree& t, Budgets b, Strategy s, QuantTarget target)
{
    PlanOptions o;
    o.strategy = s;
    o.maxMemory = std::move(b);
    o.quantTarget = target;
    return planDeviceMap(t, o);
}

uint64_t bytesOf(const ModuleTree& t, const char* module) { return t.modules()[size_t(t.find(module))].bytes; }

const QuantTarget kCpu{};                 // no CUDA
const QuantTarget kH100{true, 9.0};       // FP8 and MXFP4 kernels
const QuantTarget kA100{true, 8.0};       // MXFP4 yes, FP8 no (below 8.9)
const QuantTarget kT4{true, 7.5};         // MXFP4's floor

// The tiny Llama the FP8, bitsandbytes and GPTQ rows share: vocab 1000,
// hidden 256, MLP 512, 4 heads of 64, 2 KV heads, untied. Its Linears
// (out, in) per layer: q (256, 256), k and v (128, 256), o (256, 256),
// gate and up (512, 256), down (256, 512): 589,824 weights.
fixtures::LlamaShape tinyLlama(int64_t layers)
{
    fixtures::LlamaShape s;
    s.vocab = 1000;
    s.hidden = 256;
    s.intermediate = 512;
    s.layers = layers;
    s.heads = 4;
    s.kvHeads = 2;
    s.tied = false;
    return s;
}

} // namespace

class TestQuantization : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

    // config.json and an index naming `names`, no shard: plan before download.
    ModuleTree indexOnly(const char* name, const nlohmann::json& config, const std::vector<std::string>& names)
    {
        const std::string d = m_tmp.path().toStdString() + "/" + name;
        fs::create_directories(d);
        nlohmann::json map = nlohmann::json::object();
        for (const auto& n : names)
            map[n] = "model-00001-of-00001.safetensors";
        fixtures::writeJson(d + "/model.safetensors.index.json", {{"metadata", nlohmann::json::object()}, {"weight_map", map}});
        fixtures::writeJson(d + "/config.json", config);
        Checkpoint ck = Checkpoint::open(d);
        if (!ck.indexOnly())
            throw std::logic_error("expected an index-only checkpoint");
        return buildModuleTree(ck, std::nullopt);
    }

private slots:
    void readsQuantizationConfig();
    void skipPatternsMatchAsPython();
    void decisionsFollowTheTarget();
    void mxfp4GptOss();
    void fp8Qwen3();
    void bitsandbytes4BitLlama();
    void gptqLlama();
    void cliSizesForTheTarget();
};

void TestQuantization::readsQuantizationConfig()
{
    auto parse = [](const nlohmann::json& q) {
        return quantizationOf(ModelConfig::parse(nlohmann::json{{"model_type", "llama"}, {"quantization_config", q}}.dump(),
                                                 "/m/config.json"));
    };
    QVERIFY(!quantizationOf(ModelConfig::parse(R"({"model_type":"llama"})", "c.json")));
    auto fp8 = parse({{"quant_method", "fp8"}, {"weight_block_size", {128, 64}}, {"activation_scheme", "dynamic"}});
    QVERIFY(fp8 && fp8->kind == Quantization::Kind::Fp8);
    QCOMPARE(fp8->block->second, int64_t(64));
    QCOMPARE(fp8->label(), std::string("FP8 (128x64 blocks)"));
    QVERIFY(!parse({{"quant_method", "fp8"}, {"weight_block_size", nullptr}})->block); // per-tensor scales
    // bitsandbytes: load_in_4bit names it; neither flag: loaded unquantized (auto.py:269-286).
    QVERIFY(parse({{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}})->kind == Quantization::Kind::Bnb4);
    QVERIFY(parse({{"quant_method", "bitsandbytes"}, {"load_in_8bit", true}})->kind == Quantization::Kind::Bnb8);
    QVERIFY(!parse({{"quant_method", "bitsandbytes"}}));
    QVERIFY(!parse({{"quant_method", "mxfp4"}})->skip); // null: the default skips apply
    QCOMPARE(parse({{"quant_method", "awq"}})->kind, Quantization::Kind::Unmodelled);
    // Malformed: one clear error naming config.json.
    for (const nlohmann::json& bad : {nlohmann::json{{"bits", 4}}, nlohmann::json{{"quant_method", "gptq"}, {"bits", 5}},
                                      nlohmann::json{{"quant_method", "fp8"}, {"weight_block_size", {128}}},
                                      nlohmann::json{{"quant_method", "fp8"}, {"activation_scheme", "lazy"}},
                                      nlohmann::json{{"quant_method", "mxfp4"}, {"modules_to_not_convert", "lm_head"}}}) {
        try {
            parse(bad);
            QFAIL(qPrintable(QString::fromStdString("accepted " + bad.dump())));
        } catch (const InputError& e) {
            QCOMPARE(QString::fromStdString(e.file()), QString("/m/config.json"));
            QVERIFY2(QString::fromStdString(e.problem()).contains("quantization_config"), e.what());
        }
    }
}

void TestQuantization::skipPatternsMatchAsPython()
{
    // should_convert_module: re.match(p + "\\."), re.match(p), name.endswith(p).
    const std::vector<std::string> gptOss{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                          "lm_head"};
    QVERIFY(quantizerSkips("model.layers.3.self_attn", gptOss));
    QVERIFY(quantizerSkips("model.layers.3.self_attn.q_proj", gptOss));
    QVERIFY(quantizerSkips("model.layers.0.mlp.router", gptOss));
    QVERIFY(!quantizerSkips("model.layers.0.mlp.experts", gptOss));
    QVERIFY(quantizerSkips("lm_head", gptOss));
    // A prefix match: "model.layers.1" also skips model.layers.10 (re.match).
    QVERIFY(quantizerSkips("model.layers.10.mlp", {"model.layers.1"}));
    // endswith, not a match from the start: "norm" skips "model.norm" only by its end.
    QVERIFY(quantizerSkips("model.norm", {"norm"}));
    QVERIFY(!quantizerSkips("model.norm_out", {"norm"}));
}

void TestQuantization::decisionsFollowTheTarget()
{
    Quantization mx;
    mx.kind = Quantization::Kind::Mxfp4;
    Quantization fp8;
    fp8.kind = Quantization::Kind::Fp8;
    // MXFP4: quantized on CUDA from 7.5 (quantizer_mxfp4.py:65-159), dequantized on a CPU by default.
    QVERIFY(!quantDecision(mx, kCpu).applied);
    QVERIFY(quantDecision(mx, kT4).applied);
    QVERIFY(!quantDecision(mx, {true, 7.0}).applied);
    // FP8: quantized from 8.9 (quantizer_finegrained_fp8.py:30-77).
    QVERIFY(!quantDecision(fp8, kCpu).applied);
    QVERIFY(!quantDecision(fp8, kA100).applied);
    QVERIFY(quantDecision(fp8, {true, 8.9}).applied);
    QVERIFY(quantDecision(fp8, kH100).applied);
    fp8.dequantize = true;
    QVERIFY(!quantDecision(fp8, kH100).applied);
    // The presets carry their GPU's compute capability.
    QCOMPARE(quantTargetOf(hardwarePreset("h100-80gb")).computeCapability, 9.0);
    QCOMPARE(quantTargetOf(hardwarePreset("2xrtx4090")).computeCapability, 8.9);
    QVERIFY(!quantTargetOf(HardwareProfile{}).cuda);
}

void TestQuantization::mxfp4GptOss()
{
    // gpt-oss-20b as OpenAI ships it: experts as MXFP4 _blocks and _scales,
    // config dtype bfloat16 (the gpt-oss family test derives its bf16 sizes:
    // a layer 1,646,373,952 bytes, its experts 1,593,077,760, embed_tokens
    // and lm_head 1,158,266,880 each, all 41,829,514,624).
    const std::string d = m_tmp.path().toStdString() + "/20b-mxfp4";
    fs::create_directories(d);
    fixtures::GptOssShape s;
    s.mxfp4 = true;
    fixtures::writeSharded(d, fixtures::gptOssTensors(s, DType::BF16), 3, false, /*writeShards=*/false);
    fixtures::writeJson(d + "/config.json", fixtures::gptOssConfig(s, DType::BF16));
    ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
    // The blocks are the fused parameters' stored form, the scales their state.
    QVERIFY(t.missing().empty());
    QVERIFY(t.unexpected().empty());
    QVERIFY(t.quantization() && t.quantization()->kind == Quantization::Kind::Mxfp4);
    QVERIFY(!t.quantApplied()); // sized for no target yet: dequantized
    QCOMPARE(t.root().bytes, uint64_t(41'829'514'624));

    // On an H100, Mxfp4GptOssExperts per layer (integrations/mxfp4.py:358-387):
    //   gate_up_proj uint8 [32, 5,760, 90, 16] = 265,420,800;
    //   down_proj uint8 [32, 2,880, 90, 16] = 132,710,400;
    //   biases float32: 32 x 5,760 x 4 = 737,280 and 32 x 2,880 x 4 = 368,640;
    //   399,237,120 in all (the scales are no parameters).
    // A layer: 1,646,373,952 - 1,593,077,760 + 399,237,120 = 452,533,312;
    // the model: 41,829,514,624 - 24 x 1,193,840,640 = 13,177,339,264.
    ModuleTree q = t;
    q.setQuantApplied(true);
    QCOMPARE(bytesOf(q, "model.layers.0.mlp.experts"), uint64_t(399'237'120));
    QCOMPARE(bytesOf(q, "model.layers.23"), uint64_t(452'533'312));
    QCOMPARE(q.root().bytes, uint64_t(13'177'339'264));
    QCOMPARE(bytesOf(q, "model.layers.0.self_attn"), uint64_t(53'100'288)); // skipped: bf16 as before

    // Sequential, GPU 0 = 10 GB, cpu = 20 GB, for an H100: the largest layer
    // is now embed_tokens / lm_head (1,158,266,880 > a layer). GPU 0 offers
    // 10e9 - 1,158,266,880 = 8,841,733,120: embed_tokens and 16 layers
    // (8,398,799,872) fit, a 17th (8,851,333,184) does not. The cpu offers
    // 20e9 - 1,158,266,880: the other 8 layers, norm, rotary_emb, lm_head.
    const Budgets b = budgets({{"0", 10e9}, {"cpu", 20e9}});
    Plan h100 = plan(t, b, Strategy::Sequential, kH100);
    QCOMPARE(QString::fromStdString(mapText(h100.deviceMap)),
             QString::fromStdString("model.embed_tokens:0, " + layers(0, 15, "0") + ", " + layers(16, 23, "cpu") +
                                    ", model.norm:cpu, model.rotary_emb:cpu, lm_head:cpu"));
    QVERIFY2(QString::fromStdString(h100.quantization).startsWith("MXFP4 weights stay quantized"), h100.quantization.c_str());
    QVERIFY(h100.refusal.empty()); // MXFP4 allows offload when pre-quantized
    // On this CPU the experts are dequantized to bf16: the unquantized map
    // of the gpt-oss family test, and the sentence says by how much.
    Plan cpu = plan(t, b, Strategy::Sequential, kCpu);
    QCOMPARE(QString::fromStdString(mapText(cpu.deviceMap)),
             QString::fromStdString("model.embed_tokens:0, " + layers(0, 3, "0") + ", " + layers(4, 14, "cpu") + ", " +
                                    layers(15, 23, "disk") + ", model.norm:disk, model.rotary_emb:disk, lm_head:disk"));
    QCOMPARE(QString::fromStdString(cpu.quantization),
             QString("MXFP4 weights will be dequantized to bfloat16 (no CUDA GPU: on a CPU transformers 5.6 "
                     "dequantizes MXFP4 unless use_kernels is set): 38.96 GiB instead of 12.27 GiB"));
    QCOMPARE(cpu.notes.front(), cpu.quantization);
    // Accelerate's own planner builds the model from config.json: unquantized.
    PlanOptions acc;
    acc.reference = Reference::Accelerate;
    acc.maxMemory = b;
    acc.quantTarget = kH100;
    QVERIFY(QString::fromStdString(planDeviceMap(t, acc).quantization).contains("sized unquantized"));
}

void TestQuantization::fp8Qwen3()
{
    // A Qwen3-FP8-like config (quant_method fp8, 128x128 blocks), 4 layers
    // of the tiny Llama plus q_norm / k_norm (64 each), bf16.
    const fixtures::LlamaShape s = tinyLlama(4);
    nlohmann::json c = fixtures::llamaConfig(s, DType::BF16);
    c["model_type"] = "qwen3";
    c["architectures"] = {"Qwen3ForCausalLM"};
    c["head_dim"] = 64;
    c["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}};
    std::vector<std::string> names;
    for (const auto& x : fixtures::llamaTensors(s, DType::BF16)) {
        names.push_back(x.name);
        if (x.name.find("_proj.weight") != std::string::npos)
            names.push_back(x.name + "_scale_inv");
    }
    for (int i = 0; i < 4; ++i)
        for (const char* n : {"q_norm", "k_norm"})
            names.push_back("model.layers." + std::to_string(i) + ".self_attn." + n + ".weight");
    ModuleTree t = indexOnly("qwen3-fp8", c, names);
    QVERIFY(t.missing().empty());
    QVERIFY(t.unexpected().empty()); // each weight_scale_inv is its weight's state
    // Dequantized (bf16): a layer's Linears 589,824 x 2 = 1,179,648, its four
    // norms (256 + 256 + 64 + 64) x 2 = 1,280: 1,180,928. embed_tokens and
    // lm_head 1000 x 256 x 2 = 512,000 each, norm 512, rotary 2 x 32 x 4:
    // 1,024,000 + 4 x 1,180,928 + 768 = 5,748,480.
    QCOMPARE(t.root().bytes, uint64_t(5'748'480));
    // FP8Linear (integrations/finegrained_fp8.py:211-246): one byte a weight
    // and float32 scales on a ceil(out/128) x ceil(in/128) grid: q 2x2, k and
    // v 1x2, o 2x2, gate and up 4x2, down 2x4: 36 scales, 144 bytes.
    // lm_head is a default skip (modules_to_not_convert is null).
    // A layer: 589,824 + 144 + 1,280 = 591,248; the model 1,024,000 +
    // 4 x 591,248 + 768 = 3,389,760.
    ModuleTree q = t;
    q.setQuantApplied(true);
    QCOMPARE(bytesOf(q, "model.layers.0"), uint64_t(591'248));
    QCOMPARE(bytesOf(q, "model.layers.0.self_attn.q_proj"), uint64_t(65'536 + 16));
    QCOMPARE(bytesOf(q, "lm_head"), uint64_t(512'000));
    QCOMPARE(q.root().bytes, uint64_t(3'389'760));
    QCOMPARE(q.params()[size_t(q.findParam("model.layers.1.mlp.down_proj.weight_scale_inv"))].shape,
             (std::vector<int64_t>{2, 4}));

    // Sequential for an RTX 4090 (8.9), GPU 0 = 2,500,000, cpu = 2,500,000.
    // The largest layer still to place is a decoder layer (591,248 >
    // 512,000). GPU 0 offers 2,500,000 - 591,248 = 1,908,752: embed_tokens,
    // layers 0 and 1 (1,694,496); layer 2 would make 2,285,744. The cpu
    // offers the same for layer 2 (layer 3 still to come); for layer 3, norm
    // and rotary_emb 2,500,000 - 512,000 (lm_head is the largest left); for
    // lm_head, the last, all of it: everything fits (1,695,264).
    const QuantTarget rtx4090 = quantTargetOf(hardwarePreset("rtx4090"));
    Plan fits = plan(t, budgets({{"0", 2.5e6}, {"cpu", 2.5e6}}), Strategy::Sequential, rtx4090);
    QCOMPARE(QString::fromStdString(mapText(fits.deviceMap)),
             QString::fromStdString("model.embed_tokens:0, " + layers(0, 1, "0") + ", " + layers(2, 3, "cpu") +
                                    ", model.norm:cpu, model.rotary_emb:cpu, lm_head:cpu"));
    QVERIFY(fits.refusal.empty());
    // cpu = 1,600,000: layer 2 fits beside the room kept for layer 3
    // (591,248 <= 1,008,752); layer 3 does not beside lm_head's room
    // (1,182,496 > 1,088,000): it and everything after go to disk, and 5.6's
    // FP8 check refuses any disk entry.
    Plan disk = plan(t, budgets({{"0", 2.5e6}, {"cpu", 1.6e6}}), Strategy::Sequential, rtx4090);
    QCOMPARE(QString::fromStdString(mapText(disk.deviceMap)),
             QString::fromStdString("model.embed_tokens:0, " + layers(0, 1, "0") +
                                    ", model.layers.2:cpu, model.layers.3:disk, model.norm:disk, "
                                    "model.rotary_emb:disk, lm_head:disk"));
    QVERIFY2(QString::fromStdString(disk.refusal).contains("FP8 check rejects any module on disk"), disk.refusal.c_str());
    // An A100 (8.0) dequantizes: bf16 sizes, no refusal for the disk entry.
    Plan a100 = plan(t, budgets({{"0", 2.5e6}, {"cpu", 1.6e6}}), Strategy::Sequential, kA100);
    QVERIFY(QString::fromStdString(a100.quantization).contains("below the 8.9 FP8 needs"));
    QVERIFY(a100.refusal.empty());
}

void TestQuantization::bitsandbytes4BitLlama()
{
    // A bitsandbytes 4-bit save of the tiny Llama, 2 layers, bf16, with its
    // shard: each weight stored packed as uint8 [n / 2, 1] with its absmax,
    // quant_map and quant_state.
    const fixtures::LlamaShape s = tinyLlama(2);
    const std::string d = m_tmp.path().toStdString() + "/llama-bnb4";
    fs::create_directories(d);
    std::vector<fixtures::Tensor> tensors;
    for (auto x : fixtures::llamaTensors(s, DType::BF16)) {
        const bool linear = x.name.find("_proj.weight") != std::string::npos;
        if (linear) {
            const int64_t n = x.shape[0] * x.shape[1];
            tensors.push_back({x.name + ".absmax", DType::F32, {n / 64}});
            tensors.push_back({x.name + ".quant_map", DType::F32, {16}});
            tensors.push_back({x.name + ".quant_state.bitsandbytes__nf4", DType::U8, {100}});
            x = {x.name, DType::U8, {n / 2, 1}};
        }
        tensors.push_back(x);
    }
    fixtures::writeSharded(d, tensors, 1, /*sparse=*/true);
    nlohmann::json c = fixtures::llamaConfig(s, DType::BF16);
    c["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true},
                                {"bnb_4bit_quant_type", "nf4"}, {"llm_int8_skip_modules", nullptr}};
    fixtures::writeJson(d + "/config.json", c);
    ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
    QVERIFY(t.missing().empty());
    QVERIFY(t.unexpected().empty());
    // bitsandbytes is always applied; param_element_size counts a Linear4bit
    // weight at 0.5 bytes (quantizer_bnb_4bit.py:83-95), lm_head skipped:
    // a layer 589,824 / 2 + 2 x 256 x 2 = 295,936; the model 512,000 x 2 +
    // 2 x 295,936 + 512 + 256 = 1,616,640.
    // auto, GPU 0 = 1,700,000, cpu = 10 MB: one GPU, budgets given, so
    // get_balanced_memory leaves them; adjust_max_memory then takes 90%:
    // 1,530,000 and 9,000,000. The largest layer is embed_tokens / lm_head
    // (512,000): GPU 0 offers 1,018,000: embed_tokens and layer 0
    // (807,936); layer 1 would make 1,103,872 (it would fit without the 10%).
    Plan p = plan(t, budgets({{"0", 1.7e6}, {"cpu", 10e6}}), Strategy::Auto, kH100);
    QCOMPARE(QString::fromStdString(mapText(p.deviceMap)),
             QString("model.embed_tokens:0, model.layers.0:0, model.layers.1:cpu, model.norm:cpu, "
                     "model.rotary_emb:cpu, lm_head:cpu"));
    QCOMPARE(p.budgets.front().bytes, 1.53e6); // what infer_auto_device_map was given: 90% of it
    QVERIFY(std::find(p.notes.begin(), p.notes.end(), "bitsandbytes keeps 10% of every budget free (adjust_max_memory)") !=
            p.notes.end());
    QVERIFY(QString::fromStdString(p.quantization).startsWith("bitsandbytes 4-bit weights stay quantized"));
    QCOMPARE(QString::fromStdString(p.quantization).section(": ", -1), QString("1.54 MiB instead of 3.23 MiB in bfloat16"));
    // Part of it in RAM: 5.6 refuses unless llm_int8_enable_fp32_cpu_offload.
    QVERIFY2(QString::fromStdString(p.refusal).contains("llm_int8_enable_fp32_cpu_offload"), p.refusal.c_str());
    // All on the GPU: loads.
    QVERIFY(plan(t, budgets({{"0", 4e6}, {"cpu", 10e6}}), Strategy::Auto, kH100).refusal.empty());
}

void TestQuantization::gptqLlama()
{
    // A GPTQ 4-bit save (group 128) of the tiny Llama, 2 layers, bf16, before
    // download. Each Linear in model.layers becomes a QuantLinear whose
    // buffers are qweight int32 [in/8, out], qzeros int32 [in/128, out/8],
    // scales float16 [in/128, out], g_idx int32 [in] (no bias here):
    //   q, o (256 <- 256): 32,768 + 256 + 1,024 + 1,024 = 35,072 each;
    //   k, v (128 <- 256): 16,384 + 128 + 512 + 1,024 = 18,048 each;
    //   gate, up (512 <- 256): 65,536 + 512 + 2,048 + 1,024 = 69,120 each;
    //   down (256 <- 512): 65,536 + 512 + 2,048 + 2,048 = 70,144.
    // A layer: 314,624 + 1,024 (norms) = 315,648; lm_head stays bf16:
    // 1,024,000 + 2 x 315,648 + 768 = 1,656,064.
    const fixtures::LlamaShape s = tinyLlama(2);
    nlohmann::json c = fixtures::llamaConfig(s, DType::BF16);
    c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"desc_act", false}};
    std::vector<std::string> names;
    for (const auto& x : fixtures::llamaTensors(s, DType::BF16)) {
        if (x.name.find("_proj.weight") == std::string::npos) {
            names.push_back(x.name);
            continue;
        }
        const std::string base = x.name.substr(0, x.name.size() - 7);
        for (const char* part : {".qweight", ".qzeros", ".scales", ".g_idx"})
            names.push_back(base + part);
    }
    ModuleTree t = indexOnly("llama-gptq", c, names);
    QVERIFY(t.missing().empty());
    QVERIFY(t.unexpected().empty());
    QVERIFY(!t.quantApplied()); // sized for a target by the planner
    Plan p = plan(t, budgets({{"cpu", 10e6}}), Strategy::Sequential, kCpu); // GPTQ applies on a CPU too
    QVERIFY(QString::fromStdString(p.quantization).startsWith("GPTQ 4-bit weights stay quantized"));
    ModuleTree q = t;
    q.setQuantApplied(true);
    QCOMPARE(bytesOf(q, "model.layers.0.self_attn.q_proj"), uint64_t(35'072));
    QCOMPARE(bytesOf(q, "model.layers.0.mlp.down_proj"), uint64_t(70'144));
    QCOMPARE(bytesOf(q, "model.layers.1"), uint64_t(315'648));
    QCOMPARE(q.root().bytes, uint64_t(1'656'064));
    QCOMPARE(bytesOf(q, "lm_head"), uint64_t(512'000));
}

void TestQuantization::cliSizesForTheTarget()
{
    // The gpt-oss MXFP4 index of mxfp4GptOss, through the CLI: --hardware
    // names the target, else this machine (dequantized without a GPU).
    const QString d = m_tmp.path() + "/20b-mxfp4";
    QVERIFY(fs::exists(d.toStdString() + "/config.json"));
    const QStringList budgetsArgs{"--max-memory", "0=10GB", "--max-memory", "cpu=20GB", "--strategy", "sequential"};
    auto h100 = fixtures::runCli(QStringList{"plan", d} + budgetsArgs + QStringList{"--hardware", "h100-80gb", "--json"});
    QCOMPARE(h100.exitCode, 0);
    auto map = nlohmann::ordered_json::parse(h100.out.toStdString());
    QCOMPARE(map["model.layers.15"], nlohmann::ordered_json(0));
    QCOMPARE(map["model.layers.16"], nlohmann::ordered_json("cpu"));
    QVERIFY(h100.err.isEmpty()); // 5.6 loads this map
    auto a100 = fixtures::runCli(QStringList{"plan", d} + budgetsArgs + QStringList{"--hardware", "a100-80gb"});
    QCOMPARE(a100.exitCode, 0);
    QVERIFY2(a100.out.contains("quantization: MXFP4 weights stay quantized (GPU 0 (compute capability 8.0)"),
             a100.out.constData());
    auto t4 = fixtures::runCli({"inspect", d, "--hardware", "t4", "--json"});
    QCOMPARE(t4.exitCode, 0);
    auto q = nlohmann::json::parse(t4.out.toStdString())["quantization"];
    QCOMPARE(q["applied"], nlohmann::json(true));
    QCOMPARE(q["quantized_bytes"], nlohmann::json(13'177'339'264ull));
    QCOMPARE(q["dequantized_bytes"], nlohmann::json(41'829'514'624ull));
    QCOMPARE(nlohmann::json::parse(t4.out.toStdString())["total_bytes"], nlohmann::json(13'177'339'264ull));
    // This machine: without a GPU, dequantized (the expectation follows what
    // the machine has, not the code under test).
    const bool gpu = !detectMachineMemory().gpuFreeBytes.empty();
    auto here = fixtures::runCli({"inspect", d, "--json"});
    QCOMPARE(here.exitCode, 0);
    QCOMPARE(nlohmann::json::parse(here.out.toStdString())["quantization"]["applied"], nlohmann::json(gpu));
    // A bitsandbytes map with RAM in it: planned, and a warning that 5.6 refuses it.
    auto bnb = fixtures::runCli({"plan", m_tmp.path() + "/llama-bnb4", "--max-memory", "0=1700000", "--max-memory",
                                 "cpu=10MB", "--hardware", "h100-80gb", "--json"});
    QCOMPARE(bnb.exitCode, 0);
    QVERIFY2(bnb.err.contains("warning: transformers 5.6 refuses this map: bitsandbytes"), bnb.err.constData());
}

QTEST_APPLESS_MAIN(TestQuantization)
#include "tst_quantization.moc"
