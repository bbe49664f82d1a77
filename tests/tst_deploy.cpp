// Deployment on serving engines (stowage/deploy.h, `stowage-cli deploy`):
// what each GPU holds under the engines' sharding, worked out by hand below
// from vLLM's rules (docs/deploy.md): attention heads and MLP columns divided
// by TP, KV heads divided or (TP above them) one per rank, the vocabulary
// padded to 64 and divided, layers divided by get_pp_indices with the
// embedding on the first stage and the norm and head on the last.
#include "fixtures.h"
#include "moefixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/deploy.h"
#include "stowage/error.h"

#include <QtTest>

#include <cmath>
#include <filesystem>

using namespace stowage;
namespace fs = std::filesystem;

namespace {

// Llama-3-70B's shape in bf16: hidden 8192, 80 layers, 64 heads, 8 KV heads
// of 128, MLP 28672, vocabulary 128,256 (a multiple of 64), untied.
// Parameters of one layer's share at TP t (KV heads per rank: max(1, 8/t)):
//   q and o 2 x 8192^2 / t, k and v 2 x max(1, 8/t) x 128 x 8192,
//   MLP 3 x 8192 x 28672 / t, two norms 16,384 (every rank):
//   t = 1: 134,217,728 + 16,777,216 + 704,643,072 + 16,384 = 855,654,400
//   t = 2: 67,108,864 + 8,388,608 + 352,321,536 + 16,384 = 427,835,392
//   t = 4: 33,554,432 + 4,194,304 + 176,160,768 + 16,384 = 213,925,888
//   t = 8: 16,777,216 + 2,097,152 + 88,080,384 + 16,384 = 106,971,136
// The embedding and the head: 128,256 / t x 8192 = 1,050,673,152 / t each;
// the final norm 8,192.
constexpr uint64_t kEmbed = 1'050'673'152;
uint64_t layerParams(int tp)
{
    switch (tp) {
    case 1: return 855'654'400;
    case 2: return 427'835'392;
    case 4: return 213'925'888;
    case 8: return 106'971'136;
    }
    return 0;
}

const DeployChoice& choice(const DeployPlan& p, int tp, int pp, int ep = 1)
{
    for (const DeployChoice& c : p.choices)
        if (c.tp == tp && c.pp == pp && c.ep == ep)
            return c;
    static DeployChoice none;
    none.tp = 0;
    return none;
}

} // namespace

class TestDeploy : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string m_llama, m_mixtral;

private slots:
    void initTestCase()
    {
        m_llama = m_tmp.path().toStdString() + "/llama70b";
        fs::create_directories(m_llama);
        const fixtures::LlamaShape s{128256, 8192, 28672, 80, 64, 8, false};
        fixtures::writeSharded(m_llama, fixtures::llamaTensors(s, DType::BF16), 4, false, /*writeShards=*/false);
        fixtures::writeJson(m_llama + "/config.json", fixtures::llamaConfig(s, DType::BF16));
        m_mixtral = m_tmp.path().toStdString() + "/mixtral";
        fixtures::writeMixtral8x7bIndex(m_mixtral, DType::BF16);
    }

    void enginesRules()
    {
        // get_pp_indices: the remainder to the stages before the last, from the second-to-last back
        QCOMPARE(pipelineLayers(80, 3), (std::vector<int>{27, 27, 26}));
        QCOMPARE(pipelineLayers(61, 4), (std::vector<int>{15, 15, 16, 15}));
        QCOMPARE(pipelineLayers(32, 3), (std::vector<int>{11, 11, 10}));
        QCOMPARE(pipelineLayers(80, 2), (std::vector<int>{40, 40}));
        QVERIFY_THROWS_EXCEPTION(InputError, pipelineLayers(2, 3));
        QCOMPARE(paddedVocab(128256), int64_t(128256));
        QCOMPARE(paddedVocab(32001), int64_t(32064));
    }

    void denseOnOneNode()
    {
        Checkpoint ck = Checkpoint::open(m_llama);
        ModuleTree tree = buildModuleTree(ck, DType::BF16);
        const DeployCluster cl = clusterFromPreset("h100-80gb", 1, 8);
        DeployRequest r; // vLLM, 4096 tokens, one sequence, 0.92 of each GPU
        const DeployPlan p = planDeployment(tree, *ck.config(), cl, r, "meta-llama/Llama-3.3-70B-Instruct");
        // TP 8: 80 x 106,971,136 + 2 x 131,334,144 + 8,192 parameters, bf16.
        const DeployChoice& t8 = choice(p, 8, 1);
        QCOMPARE(t8.weightsPerGpu, uint64_t(2 * (80 * layerParams(8) + 2 * kEmbed / 8 + 8'192)));
        QCOMPARE(t8.weightsPerGpu, uint64_t(17'640'734'720));
        // TP 4 x PP 2: 40 layers a stage; the last holds the head and the norm.
        const DeployChoice& t4p2 = choice(p, 4, 2);
        QCOMPARE(t4p2.layersPerStage, (std::vector<int>{40, 40}));
        QCOMPARE(t4p2.weightsPerGpu, uint64_t(2 * (40 * layerParams(4) + kEmbed / 4 + 8'192)));
        // TP 2 x PP 4, TP 1 x PP 8: 20 and 10 layers a stage.
        QCOMPARE(choice(p, 2, 4).weightsPerGpu, uint64_t(2 * (20 * layerParams(2) + kEmbed / 2 + 8'192)));
        QCOMPARE(choice(p, 1, 8).weightsPerGpu, uint64_t(2 * (10 * layerParams(1) + kEmbed + 8'192)));
        // One GPU: 141,107,412,992 bytes against 0.92 x 80e9 = 73.6e9: no.
        const DeployChoice& one = choice(p, 1, 1);
        QCOMPARE(one.weightsPerGpu, uint64_t(141'107'412'992));
        QVERIFY(!one.fits);
        QVERIFY2(QString::fromStdString(one.why).startsWith("needs"), one.why.c_str());
        // TP 2: 70,555,025,408 of weights, a 4,096-token cache of 80 layers x
        // 2 x 4 KV heads x 128 x 2 bytes = 163,840 a token: 671,088,640, and
        // activations 2,048 x max(28,672 / 2, 3 x 8192) x 2 + 512 MiB =
        // 637,534,208: 71,863,648,256 of 73,600,000,000: it fits.
        const DeployChoice& t2 = choice(p, 2, 1);
        QCOMPARE(t2.weightsPerGpu, uint64_t(70'555'025'408));
        QCOMPARE(t2.kvPerGpu, uint64_t(671'088'640));
        QCOMPARE(t2.overheadPerGpu, uint64_t(637'534'208));
        QCOMPARE(t2.usablePerGpu, uint64_t(73'600'000'000));
        QVERIFY(t2.fits);
        // Decode at TP 8: 17.64e9 bytes at 3.35 TB/s, and two all-reduces a
        // layer over NVLink: 2 x 5 us + 2 x 7/8 x 16,384 bytes / 450 GB/s each.
        const double allReduce = 2 * 5e-6 + 2.0 * 7 / 8 * 16384 / 450e9;
        const double seconds = 17'640'734'720.0 / 3350e9 + 2 * 80 * allReduce;
        QVERIFY(std::abs(t8.tokensPerSecond - 1 / seconds) < 1e-9 * t8.tokensPerSecond);
        // The fastest that fits comes first: TP 8 (the others read more bytes a GPU).
        QCOMPARE(p.choices.front().tp, 8);
        QCOMPARE(QString::fromStdString(p.choices.front().command),
                 QString("vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 8 "
                         "--pipeline-parallel-size 1 --gpu-memory-utilization 0.92 --max-model-len 4096 "
                         "--max-num-seqs 1"));
    }

    void twoNodesAndOtherEngines()
    {
        Checkpoint ck = Checkpoint::open(m_llama);
        ModuleTree tree = buildModuleTree(ck, DType::BF16);
        const DeployCluster cl = clusterFromPreset("h100-80gb", 2, 8);
        DeployRequest r;
        DeployPlan p = planDeployment(tree, *ck.config(), cl, r, "m");
        // TP 8 x PP 2 over two nodes: 40 layers a stage, Ray between them.
        const DeployChoice& c = choice(p, 8, 2);
        QCOMPARE(c.weightsPerGpu, uint64_t(2 * (40 * layerParams(8) + kEmbed / 8 + 8'192)));
        QVERIFY(c.fits);
        QVERIFY2(QString::fromStdString(c.command).contains("ray start --head --port=6379") &&
                     QString::fromStdString(c.command).contains("--distributed-executor-backend ray"),
                 c.command.c_str());
        // SGLang: one command a node.
        r.engine = ServingEngine::Sglang;
        p = planDeployment(tree, *ck.config(), cl, r, "m");
        const QString sg = QString::fromStdString(choice(p, 8, 2).command);
        QVERIFY2(sg.contains("--tp-size 8 --pp-size 2") && sg.contains("--nnodes 2 --node-rank 1 --dist-init-addr"),
                 qPrintable(sg));
        // TGI: tensor parallel on one node only, and no KV-head replication.
        r.engine = ServingEngine::Tgi;
        const DeployCluster wide = clusterFromPreset("h100-80gb", 1, 16);
        p = planDeployment(tree, *ck.config(), wide, r, "m");
        QVERIFY(!choice(p, 16, 1).fits);
        QVERIFY2(QString::fromStdString(choice(p, 16, 1).why).contains("does not replicate"), choice(p, 16, 1).why.c_str());
        QCOMPARE(choice(p, 8, 2).tp, 0); // no pipeline in TGI
        QCOMPARE(QString::fromStdString(choice(p, 8, 1).command),
                 QString("text-generation-launcher --model-id m --num-shard 8 --max-total-tokens 4096 "
                         "--max-input-tokens 4095"));
        // llama.cpp: whole layers a GPU (--split-mode layer), the other
        // node's GPUs through ggml-rpc-server: 80 layers, 5 a device.
        r.engine = ServingEngine::LlamaCpp;
        p = planDeployment(tree, *ck.config(), cl, r, "m");
        QCOMPARE(choice(p, 8, 1).tp, 0); // no tensor parallelism there
        const DeployChoice& lc = choice(p, 1, 16);
        QCOMPARE(lc.layersPerStage, std::vector<int>(16, 5));
        QVERIFY2(QString::fromStdString(lc.command).endsWith(
                     "llama-server -m MODEL.gguf -ngl all --split-mode layer --tensor-split 5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5 "
                     "-c 4096 --parallel 1 --rpc NODE1_IP:50052") &&
                     QString::fromStdString(lc.command).startsWith("# on node 1: ggml-rpc-server -H 0.0.0.0 -p 50052\n"),
                 lc.command.c_str());
        // Its KV cache is F16 and each sequence's cells are padded to 256:
        // -c 3000 --parallel 3 keeps 3 x 1024 cells (vLLM's 16-token blocks
        // would give 1008). A position of a layer holds K and V of 8 KV heads
        // x 128 in 2 bytes: 4,096 bytes; 5 layers a device: 62,914,560 bytes.
        const int context = r.contextTokens, sequences = r.sequences;
        r.contextTokens = 1000;
        r.sequences = 3;
        p = planDeployment(tree, *ck.config(), cl, r, "m");
        QCOMPARE(choice(p, 1, 16).kvPerGpu, uint64_t(62'914'560));
        QVERIFY(choice(p, 1, 16).command.find(" -c 3000 --parallel 3") != std::string::npos);
        r.contextTokens = context;
        r.sequences = sequences;
        // vLLM at TP 16 replicates them: one KV head a rank.
        r.engine = ServingEngine::Vllm;
        p = planDeployment(tree, *ck.config(), wide, r, "m");
        QVERIFY(choice(p, 16, 1).why.empty());
    }

    void expertsByTensorOrExpertParallel()
    {
        // Mixtral: each layer's experts are 8 x 3 x 14336 x 4096 =
        // 1,409,286,144 parameters. At TP 4 without expert parallel each
        // GPU holds a quarter of every expert (14336 / 4 columns); with it,
        // 2 whole experts of 8: the same bytes. A layer besides: attention
        // (2 x 4096^2 / 4 + 2 x 2 x 128 x 4096), router 8 x 4096, norms 8,192.
        Checkpoint ck = Checkpoint::open(m_mixtral);
        ModuleTree tree = buildModuleTree(ck, DType::BF16);
        const DeployCluster cl = clusterFromPreset("a100-80gb", 1, 4);
        DeployRequest r;
        const DeployPlan tp = planDeployment(tree, *ck.config(), cl, r, "m");
        r.expertParallel = true;
        const DeployPlan ep = planDeployment(tree, *ck.config(), cl, r, "m");
        const uint64_t layer = 1'409'286'144 / 4 + 2 * 4096 * 4096 / 4 + 2 * 2 * 128 * 4096 + 8 * 4096 + 8'192;
        const uint64_t embed = 32000 / 4 * 4096; // 32,000 is a multiple of 64
        const uint64_t want = 2 * (32 * layer + 2 * embed + 4'096);
        QCOMPARE(choice(tp, 4, 1).weightsPerGpu, want);
        QCOMPARE(choice(ep, 4, 1, 4).weightsPerGpu, want);
        QVERIFY(choice(ep, 4, 1, 4).fits);
        QVERIFY2(QString::fromStdString(choice(ep, 4, 1, 4).command).contains("--enable-expert-parallel"),
                 choice(ep, 4, 1, 4).command.c_str());
        QVERIFY(!QString::fromStdString(choice(tp, 4, 1).command).contains("expert"));
    }

    void eachStageFitsByItsOwnShare()
    {
        // Five layers over four stages: 1, 1, 2, 1 (get_pp_indices). A
        // layer: q and o 2 x 1024^2, k and v 2 x 256 x 1024, MLP 3 x 1024 x
        // 4096, norms 2,048: 15,206,400 parameters; the embedding and the
        // head 64,000 x 1024 = 65,536,000 each. The last stage holds the most
        // weights (head, a layer, the norm: 161,486,848 bytes), the third the
        // most KV cache (two layers x 4,096 tokens x 2 x 4 heads x 64 x 2
        // bytes: 8,388,608). Each GPU holds its own stage's: the last needs
        // 161,486,848 + 4,194,304 + 553,648,128 of activations and graphs
        // = 719,329,280, not the two maxima's 723,523,584.
        const std::string dir = m_tmp.path().toStdString() + "/five";
        fs::create_directories(dir);
        const fixtures::LlamaShape s{64000, 1024, 4096, 5, 16, 4, false};
        fixtures::writeSharded(dir, fixtures::llamaTensors(s, DType::BF16), 1, false, /*writeShards=*/false);
        fixtures::writeJson(dir + "/config.json", fixtures::llamaConfig(s, DType::BF16));
        Checkpoint ck = Checkpoint::open(dir);
        ModuleTree tree = buildModuleTree(ck, DType::BF16);
        DeployRequest r;
        r.memoryFraction = 720e6 / 80e9; // 720,000,000 bytes of an H100 usable
        const DeployPlan p = planDeployment(tree, *ck.config(), clusterFromPreset("h100-80gb", 1, 4), r, "m");
        const DeployChoice& c = choice(p, 1, 4);
        QCOMPARE(c.layersPerStage, (std::vector<int>{1, 1, 2, 1}));
        QCOMPARE(c.stageWeights, (std::vector<uint64_t>{161'484'800, 30'412'800, 60'825'600, 161'486'848}));
        QCOMPARE(c.stageKv, (std::vector<uint64_t>{4'194'304, 4'194'304, 8'388'608, 4'194'304}));
        QCOMPARE(c.overheadPerGpu, uint64_t(553'648'128));
        QVERIFY2(c.fits, c.why.c_str());
        // 600 MB: the last stage's 719,329,280 do not fit, and the reason names its own share.
        r.memoryFraction = 600e6 / 80e9;
        const DeployPlan small = planDeployment(tree, *ck.config(), clusterFromPreset("h100-80gb", 1, 4), r, "m");
        const DeployChoice& tight = choice(small, 1, 4);
        QVERIFY(!tight.fits);
        QVERIFY2(QString::fromStdString(tight.why).contains("KV cache 4.00 MiB"), tight.why.c_str());
    }

    void expertsInHostRamForLlamaCpp()
    {
        // Mixtral-8x7B in bf16 on one H100 under llama.cpp, 4,096 tokens.
        // Besides the experts: a layer's attention 2 x 4096^2 + 2 x 1024 x
        // 4096, router 8 x 4096, norms 8,192: 41,984,000 parameters; 32 of
        // them, the embedding and the head 2 x 32,000 x 4096 and the final
        // norm 4,096: 1,605,636,096 parameters, 3,211,272,192 bytes. A
        // layer's experts: 3 x 8 x 14336 x 4096 x 2 = 2,818,572,288 bytes.
        // KV: F16, 32 layers x 2 x 8 x 128 x 2 bytes x 4,096 = 536,870,912;
        // activations 2,048 x 14,336 x 2 + 512 MiB = 595,591,168. llama.cpp
        // may use 80e9 - 1 GiB = 78,926,258,176.
        Checkpoint ck = Checkpoint::open(m_mixtral);
        ModuleTree tree = buildModuleTree(ck, DType::BF16);
        const DeployCluster h100 = clusterFromPreset("h100-80gb", 1, 1);
        DeployRequest r;
        r.engine = ServingEngine::LlamaCpp;
        DeployPlan p = planDeployment(tree, *ck.config(), h100, r, "m");
        const uint64_t rest = 3'211'272'192, experts = 2'818'572'288, kv = 536'870'912, act = 595'591'168;
        QVERIFY(p.choices.size() == 2);
        const DeployChoice* all = nullptr;
        const DeployChoice* inRam = nullptr;
        for (const DeployChoice& c : p.choices)
            (c.cpuMoeLayers > 0 ? inRam : all) = &c;
        QVERIFY(all && inRam);
        QCOMPARE(all->weightsPerGpu, rest + 32 * experts);
        QVERIFY(!all->fits);
        // With the experts of the first N layers in RAM the GPU holds
        // rest + (32 - N) x experts; N = 5 needs 80,445,186,048 of 78.9e9, N = 6
        // 77,626,613,760: six, the fewest that fit.
        QCOMPARE(inRam->cpuMoeLayers, 6);
        QVERIFY2(inRam->fits, inRam->why.c_str());
        QCOMPARE(inRam->weightsPerGpu, rest + 26 * experts);
        QCOMPARE(inRam->weightsPerGpu + kv + act, uint64_t(77'626'613'760));
        QVERIFY(std::llabs(int64_t(inRam->usablePerGpu) - int64_t(78'926'258'176)) <= 1);
        QCOMPARE(inRam->hostBytes, 6 * experts);
        QCOMPARE(inRam->kvPerGpu, kv);
        QVERIFY2(QString::fromStdString(inRam->command) ==
                     "llama-server -m MODEL.gguf -ngl all -c 4096 --parallel 1 --n-cpu-moe 6",
                 inRam->command.c_str());
        QCOMPARE(p.choices.front().cpuMoeLayers, 6); // the one that fits comes first
        // Decode reads what a token uses: 2 of 8 experts a layer (704,643,072
        // bytes), on the GPU at 3.35 TB/s, six layers' in RAM at the preset
        // host's 50 GB/s, the hidden state (8,192 bytes) to the host and back
        // over PCIe 5 (50 GB/s pinned) for each, 10 us a crossing.
        const double active = 704'643'072.0;
        const double seconds = (double(rest) + 26 * active) / 3350e9 + 6 * active / 50e9 + 12 * (10e-6 + 8192 / 50e9);
        QVERIFY2(std::abs(inRam->tokensPerSecond - 1 / seconds) < 1e-9 * inRam->tokensPerSecond,
                 qPrintable(QString::number(inRam->tokensPerSecond) + " vs " + QString::number(1 / seconds)));
        QVERIFY(std::abs(all->tokensPerSecond - 3350e9 / (double(rest) + 32 * active)) < 1e-9 * all->tokensPerSecond);

        // One RTX 4090: 26 layers' experts (73.3 GB) would have to stay in
        // the preset host's 64 GB: offered, and said why it does not fit.
        p = planDeployment(tree, *ck.config(), clusterFromPreset("rtx4090", 1, 1), r, "m");
        QCOMPARE(p.choices.size(), size_t(2));
        const DeployChoice& small = p.choices[p.choices[0].cpuMoeLayers > 0 ? 0 : 1];
        QCOMPARE(small.cpuMoeLayers, 26);
        QCOMPARE(small.hostBytes, 26 * experts);
        QVERIFY(!small.fits);
        QVERIFY2(QString::fromStdString(small.why).startsWith("the experts kept in RAM need"), small.why.c_str());

        // Not for a dense model, nor for engines without the flag.
        Checkpoint dense = Checkpoint::open(m_llama);
        ModuleTree denseTree = buildModuleTree(dense, DType::BF16);
        p = planDeployment(denseTree, *dense.config(), h100, r, "m");
        QCOMPARE(p.choices.size(), size_t(1));
        QVERIFY(!p.choices[0].fits);
        r.engine = ServingEngine::Vllm;
        p = planDeployment(tree, *ck.config(), h100, r, "m");
        QVERIFY(std::none_of(p.choices.begin(), p.choices.end(), [](const DeployChoice& c) { return c.cpuMoeLayers > 0; }));
    }

    void cli()
    {
        auto r = fixtures::runCli({"deploy", QString::fromStdString(m_llama), "--gpu", "h100-80gb", "--gpus-per-node",
                                   "8", "--model-id", "m", "--json"});
        QCOMPARE(r.exitCode, 0);
        const auto j = nlohmann::json::parse(r.out.toStdString());
        QCOMPARE(j["choices"][0]["tp"], nlohmann::json(8));
        QCOMPARE(j["choices"][0]["weights_per_gpu"], nlohmann::json(17'640'734'720ull));
        // Experts in RAM against a host of 8 GB: six layers' 16.9 GB do not fit it.
        auto moe = fixtures::runCli({"deploy", QString::fromStdString(m_mixtral), "--gpu", "h100-80gb", "--gpus-per-node",
                                     "1", "--engine", "llama.cpp", "--host-ram", "8GB", "--json"});
        QCOMPARE(moe.exitCode, 0);
        const auto m = nlohmann::json::parse(moe.out.toStdString());
        QCOMPARE(m["choices"].size(), size_t(2));
        const auto& inRam = m["choices"][m["choices"][0]["cpu_moe_layers"] == 6 ? 0 : 1];
        QCOMPARE(inRam["cpu_moe_layers"], nlohmann::json(6));
        QCOMPARE(inRam["host_bytes"], nlohmann::json(6 * 2'818'572'288ull));
        QVERIFY2(inRam["why"].get<std::string>().find("of the host's 7.45 GiB") != std::string::npos,
                 inRam["why"].get<std::string>().c_str());
        auto badRam = fixtures::runCli({"deploy", QString::fromStdString(m_mixtral), "--gpu", "h100-80gb", "--engine",
                                        "llama.cpp", "--host-ram", "lots"});
        QVERIFY2(fixtures::badInputProblem(badRam, "--host-ram").isEmpty(),
                 qPrintable(fixtures::badInputProblem(badRam, "--host-ram")));
        auto bad = fixtures::runCli({"deploy", QString::fromStdString(m_llama), "--gpu", "h100-80gb", "--engine", "triton"});
        QVERIFY2(fixtures::badInputProblem(bad, "--engine").isEmpty(), qPrintable(fixtures::badInputProblem(bad, "--engine")));
        auto missing = fixtures::runCli({"deploy", QString::fromStdString(m_llama)});
        QVERIFY2(fixtures::badInputProblem(missing, "--gpu").isEmpty(), qPrintable(fixtures::badInputProblem(missing, "--gpu")));
    }
};

QTEST_GUILESS_MAIN(TestDeploy)
#include "tst_deploy.moc"
