// Locating and opening checkpoints: folders, index files, Hub cache entries,
// index-only mode, and the path rules that keep reads inside the checkpoint.
#include "fixtures.h"
#include "stowage/checkpoint.h"
#include "stowage/error.h"
#include "stowage/mappedfile.h"

#include <QtTest>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace stowage;
namespace fs = std::filesystem;

namespace {

QString errorOf(const std::string& path)
{
    try {
        Checkpoint::open(path);
    } catch (const InputError& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

std::vector<fixtures::Tensor> small()
{
    return fixtures::gpt2Tensors({97, 16, 8, 2}, DType::F32);
}

} // namespace

class TestCheckpoint : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::string dir(const std::string& name)
    {
        std::string d = m_tmp.path().toStdString() + "/" + name;
        fs::create_directories(d);
        return d;
    }

private slots:
    void singleFileFolder();
    void shardedWithIndex();
    void missingShardNamesShardAndTensor();
    void tensorListedButAbsent();
    void rejectsAbsoluteAndParentShardPaths();
    void rejectsSymlinkLeadingOut();
    void hubCacheResolvesRefsMain();
    void indexOnlyMode();
    void indexReadInFileOrder();
    void folderWithoutWeights();
    void badConfigJson();
    void notACheckpointFile();
    void truncatedShardIsAnError();
    void sideFilesStayInside();
    void shardShrunkWhileMappedIsNamed();
    void shrinkSeenWithoutKeptDescriptor();
    void faultAddressNamesTheMappedFile();
    void mappingAsksForHugePages();
};

void TestCheckpoint::singleFileFolder()
{
    auto d = dir("single");
    fixtures::writeSafetensorsFile(d + "/model.safetensors", small(), false);
    fixtures::writeJson(d + "/config.json", fixtures::gpt2Config({97, 16, 8, 2}, DType::F32));
    Checkpoint ck = Checkpoint::open(d);
    QCOMPARE(ck.tensors().size(), small().size());
    QVERIFY(ck.config());
    QCOMPARE(ck.config()->modelType(), std::string("gpt2"));
    const TensorInfo* t = ck.find("transformer.wte.weight");
    QVERIFY(t);
    QCOMPARE(t->shape, (std::vector<int64_t>{97, 8}));
    // Zero-copy: the data pointer lies inside the shard's mapping.
    const auto& m = *ck.shards()[0].map;
    QVERIFY(ck.data(*t) >= m.data() && ck.data(*t) + t->nbytes <= m.data() + m.size());
    // Opening the file itself finds the same config beside it.
    QCOMPARE(Checkpoint::open(d + "/model.safetensors").config()->modelType(), std::string("gpt2"));
}
void TestCheckpoint::shardedWithIndex()
{
    auto d = dir("sharded");
    fixtures::writeSharded(d, small(), 3, false);
    Checkpoint ck = Checkpoint::open(d);
    QCOMPARE(ck.shards().size(), size_t(3));
    QCOMPARE(ck.tensors().size(), small().size());
    QVERIFY(!ck.indexOnly());
    QCOMPARE(Checkpoint::open(d + "/model.safetensors.index.json").tensors().size(), small().size());
}
void TestCheckpoint::missingShardNamesShardAndTensor()
{
    auto d = dir("missingshard");
    fixtures::writeSharded(d, small(), 2, false);
    fs::remove(d + "/model-00002-of-00002.safetensors");
    QString e = errorOf(d);
    QVERIFY2(e.contains("model-00002-of-00002.safetensors: shard is missing") && e.contains("for tensor '"),
             qPrintable(e));
}
void TestCheckpoint::tensorListedButAbsent()
{
    auto d = dir("absent");
    fixtures::writeSharded(d, small(), 1, false);
    auto index = nlohmann::json::parse(std::ifstream(d + "/model.safetensors.index.json"));
    index["weight_map"]["transformer.ghost.weight"] = "model-00001-of-00001.safetensors";
    fixtures::writeJson(d + "/model.safetensors.index.json", index);
    QString e = errorOf(d);
    QVERIFY2(e.contains("model-00001-of-00001.safetensors: tensor 'transformer.ghost.weight' is listed in"),
             qPrintable(e));
}
void TestCheckpoint::rejectsAbsoluteAndParentShardPaths()
{
    auto d = dir("traversal");
    fixtures::writeJson(d + "/model.safetensors.index.json",
                        {{"weight_map", {{"a", "/etc/passwd"}}}});
    QVERIFY(errorOf(d).contains("must be relative to the checkpoint folder"));
    fixtures::writeJson(d + "/model.safetensors.index.json",
                        {{"weight_map", {{"a", "../outside.safetensors"}}}});
    QVERIFY(errorOf(d).contains("leads outside the checkpoint folder"));
    // Found by fuzz_index: a name the file system refuses was an internal error.
    fixtures::writeJson(d + "/model.safetensors.index.json",
                        {{"weight_map", {{"a", std::string(300, 'x') + ".safetensors"}}}});
    const QString e = errorOf(d);
    QVERIFY2(e.contains("model.safetensors.index.json: shard path 'xxx") && e.contains("cannot be used: File name too long"),
             qPrintable(e));
}
void TestCheckpoint::rejectsSymlinkLeadingOut()
{
    auto outside = dir("outside");
    fixtures::writeSafetensorsFile(outside + "/secret.safetensors", small(), false);
    auto d = dir("symlinked");
    fixtures::writeSharded(d, small(), 1, false);
    fs::remove(d + "/model-00001-of-00001.safetensors");
    fs::create_symlink(outside + "/secret.safetensors", d + "/model-00001-of-00001.safetensors");
    QString e = errorOf(d);
    QVERIFY2(e.contains("shard leads outside the checkpoint folder"), qPrintable(e));
}
void TestCheckpoint::hubCacheResolvesRefsMain()
{
    // models--org--name/{blobs, refs/main, snapshots/<hash>/file -> ../../blobs/<sha>}
    auto entry = dir("hub/models--org--tiny");
    fs::create_directories(entry + "/blobs");
    fs::create_directories(entry + "/refs");
    fs::create_directories(entry + "/snapshots/aaa111");
    fs::create_directories(entry + "/snapshots/bbb222");
    fixtures::writeSafetensorsFile(entry + "/blobs/deadbeef", small(), false);
    fixtures::writeJson(entry + "/blobs/cafe", fixtures::gpt2Config({97, 16, 8, 2}, DType::F32));
    for (auto snap : {"aaa111", "bbb222"}) {
        fs::create_symlink("../../blobs/deadbeef", entry + "/snapshots/" + snap + "/model.safetensors");
        fs::create_symlink("../../blobs/cafe", entry + "/snapshots/" + snap + "/config.json");
    }
    std::ofstream(entry + "/refs/main") << "aaa111";
    Checkpoint ck = Checkpoint::open(entry);
    QVERIFY(ck.folder().find("snapshots/aaa111") != std::string::npos);
    QCOMPARE(ck.config()->modelType(), std::string("gpt2"));
    QCOMPARE(ck.tensors().size(), small().size());
    // The snapshot folder itself also works, with the blobs trusted.
    QCOMPARE(Checkpoint::open(entry + "/snapshots/bbb222").tensors().size(), small().size());
    std::ofstream(entry + "/refs/main") << "ccc333";
    QVERIFY(errorOf(entry).contains("names snapshot 'ccc333'"));
}
void TestCheckpoint::indexOnlyMode()
{
    auto d = dir("indexonly");
    fixtures::writeSharded(d, small(), 2, false, /*writeShards=*/false);
    fixtures::writeJson(d + "/config.json", fixtures::gpt2Config({97, 16, 8, 2}, DType::F32));
    Checkpoint ck = Checkpoint::open(d);
    QVERIFY(ck.indexOnly());
    QCOMPARE(ck.tensors().size(), small().size());
    QVERIFY(ck.data(ck.tensors()[0]) == nullptr);
}
void TestCheckpoint::indexReadInFileOrder()
{
    // The weight_map is read as written (shards in first-mention order, a
    // repeated name keeping its first place and its last file), whatever
    // else the index holds; a value that is not a file name is one clear
    // error; a DeepSeek-V3-sized map (91,000 names) opens without the
    // quadratic DOM it once went through.
    auto d = dir("order");
    fixtures::writeBytes(d + "/model.safetensors.index.json",
                         R"({"metadata": {"weight_map": {"x": 1}, "total_size": 10},
                             "weight_map": {"z.weight": "b.safetensors", "a.weight": "a.safetensors",
                                            "m.weight": "b.safetensors", "a.weight": "c.safetensors"}})");
    Checkpoint ck = Checkpoint::open(d);
    QVERIFY(ck.indexOnly());
    std::vector<std::string> names;
    for (const auto& t : ck.tensors())
        names.push_back(t.name);
    QCOMPARE(names, (std::vector<std::string>{"z.weight", "a.weight", "m.weight"}));
    QCOMPARE(ck.shards().size(), size_t(2)); // b, c: a.weight's last file
    QVERIFY(ck.shards()[0].path.find("b.safetensors") != std::string::npos);
    QVERIFY(ck.shards()[1].path.find("c.safetensors") != std::string::npos);
    for (const char* bad : {R"({"weight_map": {"a": 3}})", R"({"weight_map": {"a": {"b": "c"}}})",
                            R"({"weight_map": {"a": ["x.safetensors"]}})"}) {
        auto b = dir("badvalue");
        fixtures::writeBytes(b + "/model.safetensors.index.json", bad);
        QVERIFY2(errorOf(b).contains("weight_map entry for 'a' is not a file name"), qPrintable(errorOf(b)));
    }
    for (const char* bad : {R"([{"weight_map": {}}])", R"({"weight_map": []})", R"({"meta": {}})"}) {
        auto b = dir("nomap");
        fixtures::writeBytes(b + "/model.safetensors.index.json", bad);
        QVERIFY2(errorOf(b).contains("index has no \"weight_map\" object"), qPrintable(errorOf(b)));
    }
    auto t = dir("truncatedindex");
    fixtures::writeBytes(t + "/model.safetensors.index.json", R"({"weight_map": {"a": "x.safe)");
    QVERIFY2(errorOf(t).contains("model.safetensors.index.json: not valid JSON"), qPrintable(errorOf(t)));
    auto big = dir("big");
    std::string text = "{\"weight_map\": {";
    for (int i = 0; i < 91'000; ++i)
        text += (i ? ",\"" : "\"") + std::to_string(i) + ".weight\": \"model-00001-of-00002.safetensors\"";
    text += "}}";
    fixtures::writeBytes(big + "/model.safetensors.index.json", QByteArray::fromStdString(text));
    QCOMPARE(Checkpoint::open(big).tensors().size(), size_t(91'000));
}

void TestCheckpoint::folderWithoutWeights()
{
    auto d = dir("empty");
    fixtures::writeJson(d + "/config.json", fixtures::gpt2Config({97, 16, 8, 2}, DType::F32));
    QVERIFY(errorOf(d).contains("no weights found"));
}
void TestCheckpoint::badConfigJson()
{
    auto d = dir("badconfig");
    fixtures::writeSafetensorsFile(d + "/model.safetensors", small(), false);
    fixtures::writeBytes(d + "/config.json", "{not json");
    QVERIFY(errorOf(d).contains("config.json: not valid JSON"));
}
void TestCheckpoint::notACheckpointFile()
{
    auto d = dir("txt");
    fixtures::writeBytes(d + "/notes.txt", "hello");
    QVERIFY(errorOf(d + "/notes.txt").contains("not a checkpoint file"));
    QVERIFY(errorOf(d + "/nothing-here").contains("no such file or folder"));
}
void TestCheckpoint::truncatedShardIsAnError()
{
    auto d = dir("truncated");
    fixtures::writeSafetensorsFile(d + "/model.safetensors", small(), false);
    fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") - 3);
    QVERIFY(errorOf(d).contains("model.safetensors: safetensors data is"));
}
void TestCheckpoint::sideFilesStayInside()
{
    auto d = dir("side");
    fixtures::writeSafetensorsFile(d + "/model.safetensors", small(), false);
    fixtures::writeBytes(d + "/tokenizer.json", "{}");
    Checkpoint ck = Checkpoint::open(d);
    QCOMPARE(ck.readSideFile("tokenizer.json").value(), std::string("{}"));
    QVERIFY(!ck.readSideFile("generation_config.json"));
    fs::create_symlink("/etc/hostname", d + "/vocab.json");
    QVERIFY_THROWS_EXCEPTION(InputError, ck.readSideFile("vocab.json"));
}

void TestCheckpoint::shardShrunkWhileMappedIsNamed()
{
    const size_t before = mappedFileCount();
    auto d = dir("shrinks");
    fixtures::writeSafetensorsFile(d + "/model.safetensors", small(), false);
    const std::string file = d + "/model.safetensors";
    const auto size = fs::file_size(file);
    {
        Checkpoint ck = Checkpoint::open(d);
        const MappedFile& m = *ck.shards()[0].map;
        QCOMPARE(mappedFileCount(), before + 1);
        QCOMPARE(m.currentSize(), uint64_t(size));
        m.checkSize(); // intact
        // Grown is harmless: the mapped part is all still there.
        { std::ofstream(file, std::ios::app) << "tail"; }
        m.checkSize();
        fs::resize_file(file, size / 2);
        QCOMPARE(m.currentSize(), uint64_t(size / 2));
        try {
            m.checkSize();
            QFAIL("no error");
        } catch (const InputError& e) {
            const QString expected = QString::fromStdString(file) +
                                     QString(": shrank from %1 to %2 bytes while in use; reopen the checkpoint").arg(size).arg(size / 2);
            QCOMPARE(QString(e.what()), expected);
        }
    }
    QCOMPARE(mappedFileCount(), before); // the table forgets a mapping with its file
    // A file replaced by a new one under the same name (a fresh download
    // renamed over it) leaves the mapped one intact: no error.
    fixtures::writeSafetensorsFile(file, small(), false);
    Checkpoint ck = Checkpoint::open(d);
    fixtures::writeBytes(d + "/new.safetensors", QByteArray(10, 'x'));
    fs::rename(d + "/new.safetensors", file);
    ck.shards()[0].map->checkSize();
}

void TestCheckpoint::shrinkSeenWithoutKeptDescriptor()
{
    // With few descriptors left the mapping closes its own, and the check
    // falls back to the path while it still names the mapped file.
    auto d = dir("fewfds");
    const std::string file = d + "/model.safetensors";
    fixtures::writeSafetensorsFile(file, small(), false);
    const auto size = fs::file_size(file);
    const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    QVERIFY(probe >= 0);
    ::close(probe);
    struct rlimit old {};
    QCOMPARE(getrlimit(RLIMIT_NOFILE, &old), 0);
    struct rlimit few = old;
    few.rlim_cur = rlim_t(probe + 2); // room for this one open, not for keeping it
    QCOMPARE(setrlimit(RLIMIT_NOFILE, &few), 0);
    std::unique_ptr<MappedFile> m;
    try {
        m = std::make_unique<MappedFile>(file);
    } catch (...) {
    }
    setrlimit(RLIMIT_NOFILE, &old);
    QVERIFY(m);
    const int next = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    QCOMPARE(next, probe); // the descriptor was not kept
    ::close(next);
    fs::resize_file(file, size - 8);
    QCOMPARE(m->currentSize(), uint64_t(size - 8));
    QVERIFY_THROWS_EXCEPTION(InputError, m->checkSize());
    // Renamed away and replaced: the path no longer names the mapped file.
    fs::rename(file, d + "/old.safetensors");
    fixtures::writeBytes(file, QByteArray(4, 'x'));
    QCOMPARE(m->currentSize(), m->size());
}

void TestCheckpoint::faultAddressNamesTheMappedFile()
{
    auto d = dir("fault");
    fixtures::writeSafetensorsFile(d + "/model.safetensors", small(), false);
    Checkpoint ck = Checkpoint::open(d);
    const MappedFile& m = *ck.shards()[0].map;
    char path[512];
    MappedFault f;
    QVERIFY(findMappedFile(m.data() + 100, path, sizeof path, &f));
    QCOMPARE(QString(path), QString::fromStdString(m.path()));
    QCOMPARE(f.offset, uint64_t(100));
    QCOMPARE(f.mappedSize, m.size());
    QCOMPARE(f.currentSize, m.size());
    QVERIFY(findMappedFile(m.data() + m.size() - 1, path, sizeof path, &f));
    QVERIFY(!findMappedFile(m.data() + m.size(), path, sizeof path, &f));
    QVERIFY(!findMappedFile(&f, path, sizeof path, &f));
    // A path longer than the buffer keeps its tail, the file name.
    char shortBuf[16];
    QVERIFY(findMappedFile(m.data(), shortBuf, sizeof shortBuf, nullptr));
    QCOMPARE(QString(shortBuf), QString("del.safetensors"));
    fs::resize_file(m.path(), 10);
    QVERIFY(findMappedFile(m.data(), path, sizeof path, &f));
    QCOMPARE(f.currentSize, uint64_t(10));
}

void TestCheckpoint::mappingAsksForHugePages()
{
    // Weights read from the drive through the mapping should land on 2 MiB
    // pages (mappedfile.cpp): the mapping carries MADV_HUGEPAGE ("hg" in its
    // VmFlags) wherever the kernel has transparent huge pages. Whether the
    // pages then are 2 MiB ones depends on the file system; reported only.
    const std::string file = dir("huge") + "/big.bin";
    fixtures::writeBytes(file, QByteArray(6 << 20, 'w'));
    MappedFile m(file);
    const bool thp = QFile::exists("/sys/kernel/mm/transparent_hugepage/enabled");
    auto vmaField = [&](const QByteArray& key) {
        QFile smaps("/proc/self/smaps");
        if (!smaps.open(QIODevice::ReadOnly))
            return QByteArray();
        const QByteArray start = QByteArray::number(qulonglong(reinterpret_cast<uintptr_t>(m.data())), 16) + '-';
        bool inside = false;
        for (const QByteArray& line : smaps.readAll().split('\n')) {
            if (!line.isEmpty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.contains('-'))
                inside = line.startsWith(start);
            else if (inside && line.startsWith(key))
                return line.mid(key.size()).trimmed();
        }
        return QByteArray();
    };
    const QByteArray flags = vmaField("VmFlags:");
    QVERIFY2(!flags.isEmpty(), "the mapping is not in /proc/self/smaps");
    if (thp)
        QVERIFY2(flags.split(' ').contains("hg"), flags.constData());
    volatile uint8_t sum = 0;
    for (uint64_t i = 0; i < m.size(); i += 4096)
        sum = uint8_t(sum + m.data()[i]);
    qInfo("transparent huge pages: %s; FilePmdMapped of the mapping: %s", thp ? "yes" : "no",
          vmaField("FilePmdMapped:").constData());
}

QTEST_APPLESS_MAIN(TestCheckpoint)
#include "tst_checkpoint.moc"
