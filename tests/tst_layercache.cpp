// The runners' KV cache (engine/runtime/families/runner.h appendCache): every
// position kept for a full-attention layer; for a sliding one the last
// window - 1 between steps, as transformers 5.6's DynamicSlidingWindowLayer
// keeps them and as the planner's KV reserve counts them, in a buffer that
// never holds more than the window, the step and a bounded slack. Each key
// and value written here is its absolute position, so what a view returns is
// checked against the positions the test wrote.
#include "../engine/runtime/families/runner.h"

#include <QtTest>

#include <algorithm>
#include <vector>

using namespace stowage::arch;

namespace {

// k/v [1, kvHeads, n, dim] whose every value is its position (first, first + 1, ...);
// v is offset by 0.5 so a swap of k and v shows.
std::pair<at::Tensor, at::Tensor> positions(int64_t first, int64_t n, int64_t kvHeads = 2, int64_t dim = 4)
{
    at::Tensor p = at::arange(first, first + n, at::kFloat).view({1, 1, n, 1}).expand({1, kvHeads, n, dim}).contiguous();
    return {p, p + 0.5};
}

// Whether a view holds positions [from, to) in order, in keys and values, every head and dim.
bool holds(const at::Tensor& k, const at::Tensor& v, int64_t from, int64_t to)
{
    if (k.size(2) != to - from)
        return false;
    const at::Tensor want = at::arange(from, to, at::kFloat).view({1, 1, to - from, 1}).expand(k.sizes());
    return at::equal(k.to(at::kFloat), want) && at::equal(v.to(at::kFloat), want + 0.5);
}

} // namespace

class TestLayerCache : public QObject {
    Q_OBJECT
private slots:
    void fullLayerKeepsEveryPosition();
    void slidingLayerKeepsItsWindow_data();
    void slidingLayerKeepsItsWindow();
    void slidingBufferIsReusedInPlace();
    void clearForgetsEverything();
};

void TestLayerCache::fullLayerKeepsEveryPosition()
{
    LayerCache c;
    int64_t pos = 0;
    for (int64_t n : {7, 1, 1, 30, 1, 200, 1}) {
        auto [k, v] = positions(pos, n);
        auto [hk, hv] = appendCache(c, k, v);
        pos += n;
        QVERIFY(holds(hk, hv, 0, pos));
    }
    QCOMPARE(c.length, pos);
}

void TestLayerCache::slidingLayerKeepsItsWindow_data()
{
    QTest::addColumn<int64_t>("window");
    QTest::addColumn<int64_t>("expected"); // Model::resetCache's expected positions
    QTest::addColumn<bool>("half");        // keys and values stored in fp16
    QTest::newRow("window 1") << int64_t(1) << int64_t(0) << false;
    QTest::newRow("window 4") << int64_t(4) << int64_t(0) << false;
    QTest::newRow("window 4, fp16") << int64_t(4) << int64_t(0) << true;
    QTest::newRow("window 300, 8192 expected") << int64_t(300) << int64_t(8192) << false;
    QTest::newRow("window 4096, 20000 expected") << int64_t(4096) << int64_t(20000) << false;
}

void TestLayerCache::slidingLayerKeepsItsWindow()
{
    QFETCH(int64_t, window);
    QFETCH(int64_t, expected);
    QFETCH(bool, half);
    LayerCache c;
    c.expected = expected;
    if (half)
        c.storeAs = at::kHalf;
    const int64_t slack = std::clamp<int64_t>(window / 8, 16, 256);
    // a prefill longer than the window, single steps, and a few multi-position steps among them
    std::vector<int64_t> steps = {window + 3};
    for (int64_t i = 0; i < std::min<int64_t>(3 * window, window + 2000) + 300; ++i)
        steps.push_back(i % 97 == 50 ? 5 : 1);
    int64_t pos = 0;
    for (int64_t n : steps) {
        const int64_t before = std::min(pos, window - 1); // what 5.6's sliding layer held between steps
        auto [k, v] = positions(pos, n);
        auto [hk, hv] = appendCache(c, k, v, window);
        pos += n;
        if (!holds(hk, hv, pos - n - before, pos))
            QFAIL(qPrintable(QString("after position %1: %2 positions held, expected %3 from %4")
                                 .arg(pos)
                                 .arg(hk.size(2))
                                 .arg(n + before)
                                 .arg(pos - n - before)));
        QCOMPARE(hk.scalar_type(), half ? at::kHalf : at::kFloat);
        // the buffer: the window, this step and twice the slack at most (a long prefill's is replaced)
        QVERIFY2(c.k.size(2) <= window - 1 + n + 2 * slack,
                 qPrintable(QString("buffer of %1 positions at position %2").arg(c.k.size(2)).arg(pos)));
    }
}

void TestLayerCache::slidingBufferIsReusedInPlace()
{
    // Past the first window the buffer is never replaced: dropped positions
    // make room by sliding the held ones to its front.
    const int64_t window = 64;
    LayerCache c;
    int64_t pos = 0;
    for (; pos < window + 20; ++pos) {
        auto [k, v] = positions(pos, 1);
        appendCache(c, k, v, window);
    }
    const void* buffer = c.k.data_ptr();
    for (; pos < 40 * window; ++pos) {
        auto [k, v] = positions(pos, 1);
        auto [hk, hv] = appendCache(c, k, v, window);
        QCOMPARE(c.k.data_ptr(), buffer);
        QVERIFY(holds(hk, hv, pos + 1 - window, pos + 1));
    }
}

void TestLayerCache::clearForgetsEverything()
{
    LayerCache c;
    for (int64_t pos = 0; pos < 50; ++pos) {
        auto [k, v] = positions(pos, 1);
        appendCache(c, k, v, 8);
    }
    QVERIFY(c.start > 0);
    c.clear();
    auto [k, v] = positions(100, 3);
    auto [hk, hv] = appendCache(c, k, v, 8);
    QVERIFY(holds(hk, hv, 100, 103));
}

QTEST_GUILESS_MAIN(TestLayerCache)
#include "tst_layercache.moc"
