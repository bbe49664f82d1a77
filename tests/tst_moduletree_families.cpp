// The module trees of the newer families as transformers 5.6 builds them,
// and their sizes: Phi-3 and Phi-4-mini, Gemma 3 (text and composite, under
// each layout its files were saved in), Mixtral and Qwen3-MoE (experts read
// from their per-expert tensors). The older families are in tst_moduletree.
#include "fixtures.h"
#include "gemmafixtures.h"
#include "moefixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/families.h"
#include "stowage/moduletree.h"
#include "treefixtures.h"

#include <QtTest>

#include <algorithm>
#include <filesystem>

using namespace stowage;
namespace fs = std::filesystem;
using fixtures::bytesOf;

class TestModuleTreeFamilies : public QObject, fixtures::TreeScratch {
    Q_OBJECT

private slots:
    void phi3Tree();
    void phi4MiniLikeTree();
    void phi3RealSizes();
    void gemma3TextTree();
    void gemma3CompositeTree();
    void gemma3StoredNames_data();
    void gemma3StoredNames();
    void gemma3Defaults();
    void mixtralTree();
    void mixtralIndexOnlyAsShards();
    void qwen3MoeTree();
    void moeHubSizesBeforeDownload();
    void expertPartsChecked();
};

void TestModuleTreeFamilies::phi3Tree()
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

void TestModuleTreeFamilies::phi4MiniLikeTree()
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

void TestModuleTreeFamilies::phi3RealSizes()
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

namespace {

using fixtures::gemma3Config;
using fixtures::gemma3Tensors;
using fixtures::gemma3TextConfig;

std::vector<std::string> childNames(const ModuleTree& t, const std::string& name)
{
    std::vector<std::string> out;
    for (int c : t.modules()[size_t(t.find(name))].children)
        out.push_back(t.modules()[size_t(c)].name);
    return out;
}

std::string classOf(const ModuleTree& t, const std::string& name)
{
    const int i = t.find(name);
    return i < 0 ? std::string("(none)") : t.modules()[size_t(i)].className;
}

} // namespace

void TestModuleTreeFamilies::gemma3TextTree()
{
    // transformers 5.6 Gemma3ForCausalLM. Parameters:
    //   embed 100 x 16 = 1,600
    //   a layer: q 24x16 = 384, k 12x16 = 192, v 192, o 16x24 = 384, q_norm 12,
    //     k_norm 12, gate 24x16 = 384, up 384, down 16x24 = 384, four norms 4 x 16 = 64: 2,392
    //   3 layers 7,176; norm 16; lm_head tied to the embedding: 8,792.
    // Buffers: embed_scale, a 0-d tensor in the default dtype (the requested one
    // while from_pretrained builds: 2 bytes in bf16); rotary_emb's
    // sliding_attention_{,original_}inv_freq and full_attention_{,original_}inv_freq,
    // float32, head_dim / 2 = 6 each: 4 x 6 x 4 = 96.
    const ModuleTree t = skeletonOf("gemma3-text", gemma3TextConfig());
    QCOMPARE(t.root().className, std::string("Gemma3ForCausalLM"));
    QCOMPARE(t.root().paramCount, uint64_t(8'792));
    QCOMPARE(t.root().bytes, uint64_t(4 * 8'792 + 4 + 96));
    const ModuleTree bf = skeletonOf("gemma3-text-bf16", gemma3TextConfig(), DType::BF16);
    QCOMPARE(bf.root().bytes, uint64_t(2 * 8'792 + 2 + 96));
    QCOMPARE(childNames(t, ""), (std::vector<std::string>{"model", "lm_head"}));
    QCOMPARE(childNames(t, "model"),
             (std::vector<std::string>{"model.embed_tokens", "model.layers", "model.norm", "model.rotary_emb"}));
    QCOMPARE(childNames(t, "model.layers.0"),
             (std::vector<std::string>{"model.layers.0.self_attn", "model.layers.0.mlp", "model.layers.0.input_layernorm",
                                       "model.layers.0.post_attention_layernorm",
                                       "model.layers.0.pre_feedforward_layernorm",
                                       "model.layers.0.post_feedforward_layernorm"}));
    QCOMPARE(childNames(t, "model.layers.0.self_attn"),
             (std::vector<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                                       "model.layers.0.self_attn.v_proj", "model.layers.0.self_attn.o_proj",
                                       "model.layers.0.self_attn.q_norm", "model.layers.0.self_attn.k_norm"}));
    QCOMPARE(classOf(t, "model"), std::string("Gemma3TextModel"));
    QCOMPARE(classOf(t, "model.embed_tokens"), std::string("Gemma3TextScaledWordEmbedding"));
    QCOMPARE(classOf(t, "model.layers.2"), std::string("Gemma3DecoderLayer"));
    QCOMPARE(classOf(t, "model.layers.0.self_attn"), std::string("Gemma3Attention"));
    QCOMPARE(classOf(t, "model.layers.0.self_attn.q_norm"), std::string("Gemma3RMSNorm"));
    QCOMPARE(classOf(t, "model.layers.0.mlp"), std::string("Gemma3MLP"));
    QCOMPARE(classOf(t, "model.layers.0.mlp.act_fn"), std::string("GELUTanh")); // 5.6 ACT2CLS
    QCOMPARE(classOf(t, "model.rotary_emb"), std::string("Gemma3RotaryEmbedding"));
    QCOMPARE(t.params()[size_t(t.findParam("model.layers.1.self_attn.q_proj.weight"))].shape,
             (std::vector<int64_t>{24, 16}));
    std::vector<std::string> buffers;
    for (const Buffer& b : t.buffers()) {
        buffers.push_back(b.name);
        QVERIFY(!b.persistent);
    }
    QCOMPARE(buffers, (std::vector<std::string>{"model.embed_tokens.embed_scale",
                                                "model.rotary_emb.sliding_attention_inv_freq",
                                                "model.rotary_emb.sliding_attention_original_inv_freq",
                                                "model.rotary_emb.full_attention_inv_freq",
                                                "model.rotary_emb.full_attention_original_inv_freq"}));
    QCOMPARE(bf.buffers()[0].dtype, DType::BF16);
    QCOMPARE(bf.buffers()[1].dtype, DType::F32);
    QVERIFY(t.buffers()[0].shape.empty());
    QCOMPARE(t.tiedGroups(), (std::vector<std::vector<std::string>>{{"lm_head.weight", "model.embed_tokens.weight"}}));
    // Gemma3PreTrainedModel._no_split_modules (SigLIP's classes listed there too)
    QCOMPARE(t.noSplitClasses(), (std::vector<std::string>{"Gemma3DecoderLayer", "SiglipVisionEmbeddings",
                                                           "SiglipEncoderLayer", "SiglipMultiheadAttentionPoolingHead"}));
    // all layers slide: only the sliding buffers
    nlohmann::json allSliding = gemma3TextConfig();
    allSliding["sliding_window_pattern"] = 4;
    QCOMPARE(skeletonOf("gemma3-sliding", allSliding).buffers().size(), size_t(3));
    nlohmann::json untied = gemma3TextConfig();
    untied["tie_word_embeddings"] = false;
    const ModuleTree u = skeletonOf("gemma3-untied", untied);
    QVERIFY(u.tiedGroups().empty());
    QCOMPARE(u.root().paramCount, uint64_t(8'792 + 1'600));
}

void TestModuleTreeFamilies::gemma3CompositeTree()
{
    // transformers 5.6 Gemma3ForConditionalGeneration, vision_use_head absent
    // (so SiglipVisionModel builds its pooling head). Parameters:
    //   vision tower: patch_embedding Conv2d 8x3x4x4 + 8 = 392; position_embedding
    //     (8/4)^2 = 4 x 8 = 32; a layer: two LayerNorms 2 x 16, k/v/q/out 4 x (64 + 8),
    //     fc1 12x8 + 12 = 108, fc2 8x12 + 8 = 104: 532; post_layernorm 16; head: probe 8,
    //     in_proj 24x8 + 24 = 216, out_proj 72, layernorm 16, mlp 212: 524. Total 1,496.
    //   projector: mm_input_projection_weight 8 x 16 = 128, mm_soft_emb_norm 8: 136.
    //   language model as gemma3TextTree: 8,792, lm_head tied (Gemma3Config's default).
    //   Total 10,424.
    // Buffers in float32: position_ids int64 [1, 4] = 32, embed_scale 4, rotary 96: 132.
    const ModuleTree t = skeletonOf("gemma3", gemma3Config(true));
    QCOMPARE(t.root().className, std::string("Gemma3ForConditionalGeneration"));
    QCOMPARE(t.root().paramCount, uint64_t(10'424));
    QCOMPARE(t.root().bytes, uint64_t(4 * 10'424 + 132));
    QCOMPARE(t.modules()[size_t(t.find("model.vision_tower"))].paramCount, uint64_t(1'496));
    QCOMPARE(childNames(t, ""), (std::vector<std::string>{"model", "lm_head"}));
    QCOMPARE(childNames(t, "model"), (std::vector<std::string>{"model.vision_tower", "model.multi_modal_projector",
                                                               "model.language_model"}));
    QCOMPARE(childNames(t, "model.vision_tower"),
             (std::vector<std::string>{"model.vision_tower.embeddings", "model.vision_tower.encoder",
                                       "model.vision_tower.post_layernorm", "model.vision_tower.head"}));
    QCOMPARE(childNames(t, "model.vision_tower.encoder.layers.0"),
             (std::vector<std::string>{"model.vision_tower.encoder.layers.0.layer_norm1",
                                       "model.vision_tower.encoder.layers.0.self_attn",
                                       "model.vision_tower.encoder.layers.0.layer_norm2",
                                       "model.vision_tower.encoder.layers.0.mlp"}));
    QCOMPARE(childNames(t, "model.vision_tower.encoder.layers.0.self_attn"),
             (std::vector<std::string>{"model.vision_tower.encoder.layers.0.self_attn.k_proj",
                                       "model.vision_tower.encoder.layers.0.self_attn.v_proj",
                                       "model.vision_tower.encoder.layers.0.self_attn.q_proj",
                                       "model.vision_tower.encoder.layers.0.self_attn.out_proj"}));
    QCOMPARE(childNames(t, "model.vision_tower.head.mlp"),
             (std::vector<std::string>{"model.vision_tower.head.mlp.activation_fn", "model.vision_tower.head.mlp.fc1",
                                       "model.vision_tower.head.mlp.fc2"}));
    QCOMPARE(childNames(t, "model.multi_modal_projector"),
             (std::vector<std::string>{"model.multi_modal_projector.mm_soft_emb_norm",
                                       "model.multi_modal_projector.avg_pool"}));
    QCOMPARE(classOf(t, "model"), std::string("Gemma3Model"));
    QCOMPARE(classOf(t, "model.vision_tower"), std::string("SiglipVisionModel"));
    QCOMPARE(classOf(t, "model.vision_tower.embeddings"), std::string("SiglipVisionEmbeddings"));
    QCOMPARE(classOf(t, "model.vision_tower.embeddings.patch_embedding"), std::string("Conv2d"));
    QCOMPARE(classOf(t, "model.vision_tower.encoder"), std::string("SiglipEncoder"));
    QCOMPARE(classOf(t, "model.vision_tower.encoder.layers.0"), std::string("SiglipEncoderLayer"));
    QCOMPARE(classOf(t, "model.vision_tower.encoder.layers.0.mlp.activation_fn"), std::string("GELUTanh"));
    QCOMPARE(classOf(t, "model.vision_tower.post_layernorm"), std::string("LayerNorm"));
    QCOMPARE(classOf(t, "model.vision_tower.head"), std::string("SiglipMultiheadAttentionPoolingHead"));
    QCOMPARE(classOf(t, "model.vision_tower.head.attention"), std::string("MultiheadAttention"));
    QCOMPARE(classOf(t, "model.vision_tower.head.attention.out_proj"), std::string("NonDynamicallyQuantizableLinear"));
    QCOMPARE(classOf(t, "model.multi_modal_projector"), std::string("Gemma3MultiModalProjector"));
    QCOMPARE(classOf(t, "model.multi_modal_projector.avg_pool"), std::string("AvgPool2d"));
    QCOMPARE(classOf(t, "model.language_model"), std::string("Gemma3TextModel"));
    QCOMPARE(classOf(t, "model.language_model.layers.2"), std::string("Gemma3DecoderLayer"));
    QCOMPARE(t.params()[size_t(t.findParam("model.multi_modal_projector.mm_input_projection_weight"))].shape,
             (std::vector<int64_t>{8, 16}));
    QCOMPARE(t.params()[size_t(t.findParam("model.vision_tower.head.attention.in_proj_weight"))].shape,
             (std::vector<int64_t>{24, 8}));
    QCOMPARE(t.buffers()[0].name, std::string("model.vision_tower.embeddings.position_ids"));
    QCOMPARE(t.buffers()[0].dtype, DType::I64);
    QCOMPARE(t.buffers()[0].shape, (std::vector<int64_t>{1, 4}));
    QCOMPARE(t.buffers()[1].name, std::string("model.language_model.embed_tokens.embed_scale"));
    QCOMPARE(t.buffers().size(), size_t(6));
    QCOMPARE(t.tiedGroups(), (std::vector<std::vector<std::string>>{
                                 {"lm_head.weight", "model.language_model.embed_tokens.weight"}}));
    // post_init() unions the children's sets: SiglipVisionModel brings SiglipTextEmbeddings.
    QCOMPARE(t.noSplitClasses(),
             (std::vector<std::string>{"Gemma3DecoderLayer", "SiglipVisionEmbeddings", "SiglipEncoderLayer",
                                       "SiglipMultiheadAttentionPoolingHead", "SiglipTextEmbeddings"}));
    // vision_use_head false leaves the head out (524 parameters)
    QCOMPARE(skeletonOf("gemma3-nohead", gemma3Config(false)).root().paramCount, uint64_t(10'424 - 524));
    // The top-level tie_word_embeddings decides, not text_config's.
    nlohmann::json c = gemma3Config(false);
    c["text_config"]["tie_word_embeddings"] = false;
    QCOMPARE(skeletonOf("gemma3-texttie", c).tiedGroups().size(), size_t(1));
    c["tie_word_embeddings"] = false;
    QVERIFY(skeletonOf("gemma3-untied", c).tiedGroups().empty());
}

void TestModuleTreeFamilies::gemma3StoredNames_data()
{
    QTest::addColumn<QString>("lm");
    QTest::addColumn<QString>("vt");
    QTest::addColumn<QString>("mm");
    // google/gemma-3-4b-it's files (transformers 4.50)
    QTest::newRow("hub") << "language_model.model." << "vision_tower.vision_model." << "multi_modal_projector.";
    // saves of 4.52 - 4.57 (Gemma3Model with a SiglipVisionTransformer inside)
    QTest::newRow("4.5x") << "model.language_model." << "model.vision_tower.vision_model."
                          << "model.multi_modal_projector.";
    // the module names 5.6 builds
    QTest::newRow("5.x") << "model.language_model." << "model.vision_tower." << "model.multi_modal_projector.";
}

void TestModuleTreeFamilies::gemma3StoredNames()
{
    QFETCH(QString, lm);
    QFETCH(QString, vt);
    QFETCH(QString, mm);
    auto d = dir(std::string("gemma3-names-") + QTest::currentDataTag());
    fixtures::writeSafetensorsFile(d + "/model.safetensors",
                                   gemma3Tensors(lm.toStdString(), vt.toStdString(), mm.toStdString()), false);
    fixtures::writeJson(d + "/config.json", gemma3Config(false));
    const Checkpoint ck = Checkpoint::open(d);
    const ModuleTree t = buildModuleTree(ck, std::nullopt);
    QVERIFY2(t.missing().empty(), t.missing().empty() ? "" : t.missing()[0].c_str());
    QVERIFY2(t.unexpected().empty(), t.unexpected().empty() ? "" : t.unexpected()[0].c_str());
    QCOMPARE(*t.dtype(), DType::BF16);
    const auto stored = [&](const std::string& param) {
        return ck.tensors()[size_t(t.params()[size_t(t.findParam(param))].tensor)].name;
    };
    QCOMPARE(stored("model.language_model.layers.2.mlp.down_proj.weight"),
             lm.toStdString() + "layers.2.mlp.down_proj.weight");
    QCOMPARE(stored("model.vision_tower.encoder.layers.0.self_attn.out_proj.bias"),
             vt.toStdString() + "encoder.layers.0.self_attn.out_proj.bias");
    QCOMPARE(stored("model.multi_modal_projector.mm_input_projection_weight"),
             mm.toStdString() + "mm_input_projection_weight");
}

void TestModuleTreeFamilies::gemma3Defaults()
{
    // config.json with only model_type: Gemma3Config builds Gemma3TextConfig()
    // and SiglipVisionConfig() (no vision_use_head: the head is built).
    //   text: vocab 262,208, hidden 2,304, inter 9,216, 26 layers, 8 heads / 4 kv, head_dim 256:
    //     a layer q 2048x2304 = 4,718,592, k and v 1024x2304 = 2,359,296 each,
    //     o 4,718,592, q/k norms 512, MLP 3 x 9216 x 2304 = 63,700,992, four norms 9,216:
    //     77,866,496; 26 layers 2,024,528,896; embed 604,127,232; norm 2,304: 2,628,658,432.
    //   vision: 768 wide, 3072 MLP, 12 layers, patch 16 on 224: patch_embedding
    //     768x3x16x16 + 768 = 590,592, positions 196 x 768 = 150,528, a layer 1,536 +
    //     4 x 590,592 + (2,359,296 + 3,072) + (2,359,296 + 768) + 1,536 = 7,087,872,
    //     12 of them 85,054,464, post_layernorm 1,536, head 768 + (1,769,472 + 2,304)
    //     + 590,592 + 1,536 + 4,722,432 = 7,087,104: 92,884,224.
    //   projector 768 x 2304 + 768 = 1,770,240. Total 2,723,312,896.
    // Four bytes a parameter in float32 plus the buffers: position_ids 196 x 8,
    // embed_scale 4, four rotary buffers of 128 float32: 1,568 + 4 + 2,048.
    auto d = dir("gemma3-defaults");
    fixtures::writeJson(d + "/config.json", {{"model_type", "gemma3"}});
    std::vector<fixtures::Tensor> index{{"language_model.model.embed_tokens.weight", DType::BF16, {262208, 2304}}};
    for (int i = 0; i < 26; ++i) // enough tensors for 26 layers to be believable
        index.push_back({"language_model.model.layers." + std::to_string(i) + ".input_layernorm.weight", DType::BF16,
                         {2304}});
    fixtures::writeSharded(d, index, 1, false, /*writeShards=*/false);
    const ModuleTree t = buildModuleTree(Checkpoint::open(d), DType::F32);
    QCOMPARE(t.root().paramCount, uint64_t(2'723'312'896ull));
    QCOMPARE(t.root().bytes, uint64_t(4 * 2'723'312'896ull + 1'568 + 4 + 2'048));
    QCOMPARE(t.modules()[size_t(t.find("model.language_model.layers"))].children.size(), size_t(26));
    QCOMPARE(t.missing().size(), t.params().size() - 28); // all but those listed and the tied head
    QCOMPARE(attentionShape(ModelConfig::parse(R"({"model_type": "gemma3"})", "config.json"))->headDim, int64_t(256));
}

namespace {
// Module names under `prefix` with their classes, in definition order.
QStringList modulesUnder(const ModuleTree& t, const std::string& prefix)
{
    QStringList out;
    for (const auto& m : t.modules())
        if (m.name.rfind(prefix, 0) == 0)
            out << QString::fromStdString(m.name.substr(prefix.size()) + " " + m.className);
    return out;
}
const Param& paramOf(const ModuleTree& t, const std::string& name)
{
    const int p = t.findParam(name);
    if (p < 0)
        qFatal("no parameter %s", name.c_str());
    return t.params()[size_t(p)];
}
} // namespace

void TestModuleTreeFamilies::mixtralTree()
{
    // vocab 100, hidden 16, 4 heads of 4 (no head_dim: 16 / 4), 2 kv heads,
    // intermediate 24, 4 experts, 2 layers, untied (MixtralConfig's default).
    auto d = dir("mixtral");
    fixtures::MoeShape s;
    fixtures::writeSharded(d, fixtures::moeTensors(s, DType::F32), 2, true);
    fixtures::writeJson(d + "/config.json", fixtures::moeConfig(s, DType::F32));
    ModuleTree t = buildModuleTree(Checkpoint::open(d), DType::F32);
    QCOMPARE(t.root().className, std::string("MixtralForCausalLM"));
    // modeling_mixtral.py 5.6: MixtralDecoderLayer builds self_attn, mlp
    // (MixtralSparseMoeBlock: gate = MixtralTopKRouter, then experts =
    // MixtralExperts with its act_fn), input_layernorm, post_attention_layernorm.
    QCOMPARE(modulesUnder(t, "model.layers.0"),
             (QStringList{" MixtralDecoderLayer", ".self_attn MixtralAttention", ".self_attn.q_proj Linear",
                          ".self_attn.k_proj Linear", ".self_attn.v_proj Linear", ".self_attn.o_proj Linear",
                          ".mlp MixtralSparseMoeBlock", ".mlp.gate MixtralTopKRouter", ".mlp.experts MixtralExperts",
                          ".mlp.experts.act_fn SiLU", ".input_layernorm MixtralRMSNorm",
                          ".post_attention_layernorm MixtralRMSNorm"}));
    QCOMPARE(t.modules()[size_t(t.find("model.rotary_emb"))].className, std::string("MixtralRotaryEmbedding"));
    // The fused parameters 5.6 builds: gate_up_proj [E, 2 x inter, hidden],
    // down_proj [E, hidden, inter]; the router [E, hidden].
    const Param& gateUp = paramOf(t, "model.layers.1.mlp.experts.gate_up_proj");
    QCOMPARE(gateUp.shape, (std::vector<int64_t>{4, 48, 16}));
    QCOMPARE(paramOf(t, "model.layers.1.mlp.experts.down_proj").shape, (std::vector<int64_t>{4, 16, 24}));
    QCOMPARE(paramOf(t, "model.layers.1.mlp.gate.weight").shape, (std::vector<int64_t>{4, 16}));
    // ... read from the Hub's per-expert tensors (conversion_mapping.py:
    // w1 then w3 of each expert joined along dim 1, experts stacked).
    QCOMPARE(gateUp.parts.size(), size_t(8));
    QCOMPARE(gateUp.parts[0].name, std::string("model.layers.1.block_sparse_moe.experts.0.w1.weight"));
    QCOMPARE(gateUp.parts[1].name, std::string("model.layers.1.block_sparse_moe.experts.0.w3.weight"));
    QCOMPARE(gateUp.parts[1].offset, int64_t(24));
    QCOMPARE(gateUp.parts[2].name, std::string("model.layers.1.block_sparse_moe.experts.1.w1.weight"));
    QCOMPARE(gateUp.parts[2].index, int64_t(1));
    QCOMPARE(gateUp.parts[7].shape, (std::vector<int64_t>{24, 16}));
    for (const StoredPart& p : gateUp.parts)
        QVERIFY(p.tensor >= 0);
    QCOMPARE(gateUp.tensor, -1);
    QVERIFY(gateUp.found());
    // The router is block_sparse_moe.gate on the Hub, renamed 1:1.
    const Param& router = paramOf(t, "model.layers.0.mlp.gate.weight");
    QVERIFY(router.parts.empty());
    QVERIFY(router.tensor >= 0);
    QCOMPARE(Checkpoint::open(d).tensors()[size_t(router.tensor)].name,
             std::string("model.layers.0.block_sparse_moe.gate.weight"));
    QVERIFY2(t.missing().empty(), t.missing().empty() ? "" : t.missing()[0].c_str());
    QVERIFY2(t.unexpected().empty(), t.unexpected().empty() ? "" : t.unexpected()[0].c_str());
    // Per layer: q 16x16 = 256, k and v 8x16 = 128 each, o 256 (768);
    // router 4x16 = 64; gate_up 4x48x16 = 3072; down 4x16x24 = 1536; two
    // norms 32: 5472. Embedding and head 100x16 = 1600 each, final norm 16:
    // 1600 + 2 x 5472 + 16 + 1600 = 14160 parameters, 56640 bytes in fp32,
    // plus inv_freq and original_inv_freq (head_dim 4: 2 float32 each) = 16.
    QCOMPARE(t.root().paramCount, uint64_t(14160));
    QCOMPARE(t.root().bytes, uint64_t(56640 + 16));
    QCOMPARE(bytesOf(t, "model.layers.0.mlp.experts"), uint64_t(4 * (3072 + 1536)));
    QCOMPARE(t.buffers().size(), size_t(2));
    QCOMPARE(t.buffers()[1].name, std::string("model.rotary_emb.original_inv_freq"));
    QCOMPARE(t.buffers()[1].dtype, DType::F32);
    QVERIFY(t.tiedGroups().empty());
    QCOMPARE(t.noSplitClasses(), std::vector<std::string>{"MixtralDecoderLayer"});
    // Tied where config.json says so: the head counts once (1600 parameters fewer).
    s.tied = true;
    auto dt = dir("mixtral-tied");
    fixtures::writeSharded(dt, fixtures::moeTensors(s, DType::F32), 1, true);
    fixtures::writeJson(dt + "/config.json", fixtures::moeConfig(s, DType::F32));
    ModuleTree tt = buildModuleTree(Checkpoint::open(dt), DType::F32);
    QCOMPARE(tt.root().paramCount, uint64_t(14160 - 1600));
    QCOMPARE(tt.tiedGroups().size(), size_t(1));
}

void TestModuleTreeFamilies::mixtralIndexOnlyAsShards()
{
    // Plan before download: config.json and the index alone give the tree
    // and sizes the shards do, in bf16.
    fixtures::MoeShape s;
    s.layers = 3;
    auto full = dir("mixtral-full"), index = dir("mixtral-index");
    fixtures::writeSharded(full, fixtures::moeTensors(s, DType::BF16), 3, true);
    fixtures::writeSharded(index, fixtures::moeTensors(s, DType::BF16), 3, true, /*writeShards=*/false);
    for (const auto& d : {full, index})
        fixtures::writeJson(d + "/config.json", fixtures::moeConfig(s, DType::BF16));
    Checkpoint ci = Checkpoint::open(index);
    QVERIFY(ci.indexOnly());
    ModuleTree a = buildModuleTree(Checkpoint::open(full), std::nullopt), b = buildModuleTree(ci, std::nullopt);
    QCOMPARE(*b.dtype(), DType::BF16);
    QCOMPARE(a.modules().size(), b.modules().size());
    for (size_t i = 0; i < a.modules().size(); ++i) {
        QCOMPARE(a.modules()[i].name, b.modules()[i].name);
        QCOMPARE(a.modules()[i].className, b.modules()[i].className);
        QCOMPARE(a.modules()[i].bytes, b.modules()[i].bytes);
    }
    QVERIFY(b.missing().empty());
    QVERIFY(paramOf(b, "model.layers.2.mlp.experts.down_proj").found());
    // 3 layers of 5472 + 3216 = 19632 parameters, 2 bytes each, + 16 of buffers.
    QCOMPARE(b.root().bytes, uint64_t(2 * 19632 + 16));
}

void TestModuleTreeFamilies::qwen3MoeTree()
{
    // head_dim 8 (≠ 16 / 4), moe_intermediate_size 12, dense intermediate
    // 24 in mlp_only_layers [1], 3 layers, 4 experts.
    auto d = dir("qwen3moe");
    fixtures::MoeShape s;
    s.type = "qwen3_moe";
    s.layers = 3;
    s.headDim = 8;
    s.mlpOnly = {1};
    fixtures::writeSharded(d, fixtures::moeTensors(s, DType::F32), 1, true);
    fixtures::writeJson(d + "/config.json", fixtures::moeConfig(s, DType::F32));
    ModuleTree t = buildModuleTree(Checkpoint::open(d), DType::F32);
    QCOMPARE(t.root().className, std::string("Qwen3MoeForCausalLM"));
    // Qwen3MoeSparseMoeBlock builds experts before gate (unlike Mixtral).
    QCOMPARE(modulesUnder(t, "model.layers.0"),
             (QStringList{" Qwen3MoeDecoderLayer", ".self_attn Qwen3MoeAttention", ".self_attn.q_proj Linear",
                          ".self_attn.k_proj Linear", ".self_attn.v_proj Linear", ".self_attn.o_proj Linear",
                          ".self_attn.q_norm Qwen3MoeRMSNorm", ".self_attn.k_norm Qwen3MoeRMSNorm",
                          ".mlp Qwen3MoeSparseMoeBlock", ".mlp.experts Qwen3MoeExperts", ".mlp.experts.act_fn SiLU",
                          ".mlp.gate Qwen3MoeTopKRouter", ".input_layernorm Qwen3MoeRMSNorm",
                          ".post_attention_layernorm Qwen3MoeRMSNorm"}));
    QCOMPARE(modulesUnder(t, "model.layers.1.mlp"),
             (QStringList{" Qwen3MoeMLP", ".gate_proj Linear", ".up_proj Linear", ".down_proj Linear", ".act_fn SiLU"}));
    const Param& gateUp = paramOf(t, "model.layers.2.mlp.experts.gate_up_proj");
    QCOMPARE(gateUp.shape, (std::vector<int64_t>{4, 24, 16}));
    QCOMPARE(gateUp.parts[1].name, std::string("model.layers.2.mlp.experts.0.up_proj.weight"));
    QCOMPARE(paramOf(t, "model.layers.2.mlp.experts.down_proj").parts[3].name,
             std::string("model.layers.2.mlp.experts.3.down_proj.weight"));
    QVERIFY2(t.missing().empty(), t.missing().empty() ? "" : t.missing()[0].c_str());
    QVERIFY2(t.unexpected().empty(), t.unexpected().empty() ? "" : t.unexpected()[0].c_str());
    // Attention: q 32x16 = 512, k and v 16x16 = 256 each, o 16x32 = 512,
    // q_norm and k_norm 8 each: 1552; norms 32. Sparse MLP: router 4x16 = 64,
    // gate_up 4x24x16 = 1536, down 4x16x12 = 768: 2368. Dense MLP: 3 x 24 x
    // 16 = 1152. Layers 0 and 2: 3952 each, layer 1: 2736 (10,640). With
    // embedding and head (1600 each) and the final norm (16): 13,856.
    QCOMPARE(t.root().paramCount, uint64_t(13856));
    // buffers: head_dim 8, 4 float32 each, two of them: 32 bytes.
    QCOMPARE(t.root().bytes, uint64_t(4 * 13856 + 32));
    QCOMPARE(t.noSplitClasses(), std::vector<std::string>{"Qwen3MoeDecoderLayer"});
}

void TestModuleTreeFamilies::moeHubSizesBeforeDownload()
{
    // mistralai/Mixtral-8x7B-v0.1's config, index only. Per layer: attention
    // 2 x 4096^2 + 2 x 1024 x 4096 = 41,943,040; router 8 x 4096 = 32,768;
    // experts 8 x 3 x 14336 x 4096 = 1,409,286,144; norms 8,192:
    // 1,451,270,144 x 32 = 46,440,644,608; embedding and head 2 x 32000 x
    // 4096 = 262,144,000; norm 4096: 46,702,792,704 (the model card's 46.7B).
    {
        fixtures::MoeShape s{"mixtral", 32000, 4096, 14336, 0, 32, 32, 8, 0, 8, 2, {}, false};
        auto d = dir("mixtral-8x7b");
        fixtures::writeSharded(d, fixtures::moeTensors(s, DType::BF16), 19, true, false);
        fixtures::writeJson(d + "/config.json", fixtures::moeConfig(s, DType::BF16));
        ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
        QCOMPARE(t.root().paramCount, uint64_t(46'702'792'704ull));
        QVERIFY(t.missing().empty());
        // head_dim 128: 64 float32 x 2 buffers = 512 bytes.
        QCOMPARE(t.root().bytes, uint64_t(2 * 46'702'792'704ull + 512));
    }
    // Qwen/Qwen3-30B-A3B: 48 layers, head_dim 128, 128 experts of 768.
    // Per layer: q 4096 x 2048 and o = 8,388,608 each, k and v 512 x 2048 =
    // 1,048,576 each: 18,874,368; q_norm, k_norm 256; router 128 x 2048 =
    // 262,144; experts 128 x 3 x 768 x 2048 = 603,979,776; norms 4096:
    // 623,120,640 x 48 = 29,909,790,720; embedding and head 2 x 151936 x
    // 2048 = 622,329,856; norm 2048: 30,532,122,624.
    {
        fixtures::MoeShape s{"qwen3_moe", 151936, 2048, 6144, 768, 48, 32, 4, 128, 128, 8, {}, false};
        auto d = dir("qwen3-30b-a3b");
        fixtures::writeSharded(d, fixtures::moeTensors(s, DType::BF16), 16, true, false);
        fixtures::writeJson(d + "/config.json", fixtures::moeConfig(s, DType::BF16));
        ModuleTree t = buildModuleTree(Checkpoint::open(d), std::nullopt);
        QCOMPARE(t.root().paramCount, uint64_t(30'532'122'624ull));
        QVERIFY(t.missing().empty());
    }
}

void TestModuleTreeFamilies::expertPartsChecked()
{
    fixtures::MoeShape s;
    auto tensors = fixtures::moeTensors(s, DType::F32);
    // One expert's up projection with the wrong shape: an error naming it.
    auto bad = tensors;
    for (auto& t : bad)
        if (t.name == "model.layers.0.block_sparse_moe.experts.2.w3.weight")
            t.shape = {25, 16};
    auto d = dir("mixtral-bad");
    fixtures::writeSharded(d, bad, 1, true);
    fixtures::writeJson(d + "/config.json", fixtures::moeConfig(s, DType::F32));
    try {
        buildModuleTree(Checkpoint::open(d), DType::F32);
        QFAIL("a wrong expert shape was accepted");
    } catch (const InputError& e) {
        QVERIFY2(std::string(e.what()).find("experts.2.w3.weight") != std::string::npos, e.what());
    }
    // One expert missing: that stored name is missing, and the fused
    // parameter is not found (transformers would initialise it).
    auto gap = tensors;
    gap.erase(std::remove_if(gap.begin(), gap.end(),
                             [](const fixtures::Tensor& t) {
                                 return t.name == "model.layers.1.block_sparse_moe.experts.3.w2.weight";
                             }),
              gap.end());
    auto g = dir("mixtral-gap");
    fixtures::writeSharded(g, gap, 1, true);
    fixtures::writeJson(g + "/config.json", fixtures::moeConfig(s, DType::F32));
    ModuleTree t = buildModuleTree(Checkpoint::open(g), DType::F32);
    QCOMPARE(t.missing(), std::vector<std::string>{"model.layers.1.block_sparse_moe.experts.3.w2.weight"});
    QVERIFY(!paramOf(t, "model.layers.1.mlp.experts.down_proj").found());
    QVERIFY(paramOf(t, "model.layers.1.mlp.experts.gate_up_proj").found());
}

QTEST_APPLESS_MAIN(TestModuleTreeFamilies)
#include "tst_moduletree_families.moc"
