// The decode kernels (engine/runtime/families/gemv.h), each one this CPU can
// run, for every pair of weight and x dtypes the engine uses (fp32 x fp32,
// bf16 x bf16, bf16 x fp32, fp16 x fp32, fp16 x fp16), against sums in double
// precision done here: exact where the inputs make every product and partial
// sum exact (small integers), within fp32 rounding otherwise. Shapes cover the
// vector tails (k not a multiple of 8, 16, 32 or 64), row counts not a
// multiple of 4, and splits across threads.
#include "../engine/runtime/families/gemv.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <QtTest>

#include <cmath>
#include <random>

using namespace stowage::arch;

namespace {

struct Shape {
    int64_t n, k;
};
const Shape kShapes[] = {{1, 1},    {3, 7},     {4, 8},    {5, 17},   {6, 31},     {7, 32},    {9, 33},
                         {13, 100}, {8, 127},   {4, 128},  {5, 129},  {64, 1024},  {37, 2816}, {1000, 64},
                         {2051, 515}};

// Small integers: exact in bf16 and fp32, and so are their products and sums.
at::Tensor integers(int64_t n, int64_t k, std::mt19937& rng, at::ScalarType dt)
{
    std::uniform_int_distribution<int> d(-4, 4);
    at::Tensor t = at::empty({n, k}, at::kFloat);
    float* p = t.data_ptr<float>();
    for (int64_t i = 0; i < n * k; ++i)
        p[i] = float(d(rng));
    return t.to(dt);
}

at::Tensor uniform(int64_t n, int64_t k, std::mt19937& rng, at::ScalarType dt)
{
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    at::Tensor t = at::empty({n, k}, at::kFloat);
    float* p = t.data_ptr<float>();
    for (int64_t i = 0; i < n * k; ++i)
        p[i] = d(rng);
    return t.to(dt);
}

// Row sums in double over the values as stored (bf16 widened exactly).
std::vector<double> reference(const at::Tensor& w, const at::Tensor& x, std::vector<double>* absSums)
{
    at::Tensor wf = w.to(at::kDouble).contiguous(), xf = x.to(at::kDouble).contiguous();
    const double* wp = wf.data_ptr<double>();
    const double* xp = xf.data_ptr<double>();
    const int64_t n = w.size(0), k = w.size(1);
    std::vector<double> out(size_t(n), 0.0);
    absSums->assign(size_t(n), 0.0);
    for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < k; ++j) {
            out[size_t(r)] += wp[r * k + j] * xp[j];
            (*absSums)[size_t(r)] += std::abs(wp[r * k + j] * xp[j]);
        }
    return out;
}

// What the kernel must return for an exact sum: fp32 as is, bf16 and fp16
// rounded to nearest even (c10's conversions).
double roundedTo(at::ScalarType dt, double v)
{
    if (dt == at::kBFloat16)
        return double(float(c10::BFloat16(float(v))));
    if (dt == at::kHalf)
        return double(float(c10::Half(float(v))));
    return double(float(v));
}

// Relative size of the one rounding of the result to x's dtype.
double outputUlp(at::ScalarType dt) { return dt == at::kBFloat16 ? 1.0 / 256 : dt == at::kHalf ? 1.0 / 2048 : 0.0; }

} // namespace

class TestGemv : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { at::set_num_threads(2); }
    void kernelsListed();
    void exactOnIntegers_data();
    void exactOnIntegers();
    void closeOnRandom_data();
    void closeOnRandom();
    void rejectsMismatchedShapes();
    void widensExactly();
};

void TestGemv::kernelsListed()
{
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
        const auto ks = gemvKernels(dt);
        QVERIFY(!ks.empty());
        QCOMPARE(ks.back(), GemvKernel::None);
        const GemvKernel chosen = gemvKernelFor(dt);
        QVERIFY(std::find(ks.begin(), ks.end(), chosen) != ks.end());
        qInfo("%s: kernel %s of %d", c10::toString(dt), gemvKernelName(chosen), int(ks.size()));
    }
    // The dot-product kernel is for bf16 only.
    for (at::ScalarType dt : {at::kFloat, at::kHalf}) {
        const auto ks = gemvKernels(dt);
        QVERIFY(std::find(ks.begin(), ks.end(), GemvKernel::Avx512Bf16) == ks.end());
    }
}

namespace {
// (weights, x): the pairs the runners pass (common.cpp's dense()).
const std::pair<at::ScalarType, at::ScalarType> kPairs[] = {{at::kFloat, at::kFloat},
                                                            {at::kBFloat16, at::kBFloat16},
                                                            {at::kBFloat16, at::kFloat},
                                                            {at::kHalf, at::kFloat},
                                                            {at::kHalf, at::kHalf}};
void addKernelRows()
{
    QTest::addColumn<int>("kernel");
    QTest::addColumn<int>("wdtype");
    QTest::addColumn<int>("xdtype");
    for (auto [wt, xt] : kPairs)
        for (GemvKernel k : gemvKernels(wt))
            QTest::addRow("W %s x %s %s", c10::toString(wt), c10::toString(xt), gemvKernelName(k))
                << int(k) << int(wt) << int(xt);
}
} // namespace

void TestGemv::exactOnIntegers_data() { addKernelRows(); }

void TestGemv::exactOnIntegers()
{
    QFETCH(int, kernel);
    QFETCH(int, wdtype);
    QFETCH(int, xdtype);
    const auto wt = at::ScalarType(wdtype), xt = at::ScalarType(xdtype);
    std::mt19937 rng(7);
    for (const Shape& s : kShapes) {
        at::Tensor w = integers(s.n, s.k, rng, wt), x = integers(1, s.k, rng, xt)[0];
        at::Tensor y = gemvWith(GemvKernel(kernel), w, x);
        QCOMPARE(y.scalar_type(), xt);
        QCOMPARE(y.dim(), int64_t(1));
        QCOMPARE(y.size(0), s.n);
        std::vector<double> abs;
        const auto ref = reference(w, x, &abs);
        at::Tensor yf = y.to(at::kDouble);
        for (int64_t r = 0; r < s.n; ++r) {
            const double got = yf[r].item<double>(), want = roundedTo(xt, ref[size_t(r)]);
            if (got != want)
                QFAIL(qPrintable(QString("%1x%2 row %3: %4, expected %5").arg(s.n).arg(s.k).arg(r).arg(got).arg(want)));
        }
    }
}

void TestGemv::closeOnRandom_data() { addKernelRows(); }

void TestGemv::closeOnRandom()
{
    QFETCH(int, kernel);
    QFETCH(int, wdtype);
    QFETCH(int, xdtype);
    const auto wt = at::ScalarType(wdtype), xt = at::ScalarType(xdtype);
    std::mt19937 rng(11);
    for (const Shape& s : kShapes) {
        at::Tensor w = uniform(s.n, s.k, rng, wt), x = uniform(1, s.k, rng, xt)[0];
        at::Tensor yf = gemvWith(GemvKernel(kernel), w, x).to(at::kDouble);
        std::vector<double> abs;
        const auto ref = reference(w, x, &abs);
        for (int64_t r = 0; r < s.n; ++r) {
            // fp32 sums in any order: at most ~k ulps of the sum of magnitudes;
            // a bf16 or fp16 result adds one rounding. LibTorch 1.13's bf16 mv
            // (None, bf16 x) also rounds each product to bf16 (2^-9 of each).
            const double want = ref[size_t(r)];
            const bool bf16Products = xt == at::kBFloat16 && GemvKernel(kernel) == GemvKernel::None;
            const double tol = double(s.k) * 6e-8 * abs[size_t(r)] + std::abs(want) * outputUlp(xt) +
                               (bf16Products ? abs[size_t(r)] / 256 : 0) + 1e-30;
            const double got = yf[r].item<double>();
            if (!(std::abs(got - want) <= tol))
                QFAIL(qPrintable(QString("%1x%2 row %3: %4, expected %5 +- %6")
                                     .arg(s.n)
                                     .arg(s.k)
                                     .arg(r)
                                     .arg(got)
                                     .arg(want)
                                     .arg(tol)));
        }
    }
}

void TestGemv::rejectsMismatchedShapes()
{
    const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
    for (GemvKernel k : gemvKernels(at::kBFloat16)) {
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvWith(k, at::zeros({4, 8}, bf16), at::zeros({9}, bf16)));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvWith(k, at::zeros({4, 8}), at::zeros({8}, bf16)));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvWith(k, at::zeros({4, 8}, at::kLong), at::zeros({8})));
    }
}

void TestGemv::widensExactly()
{
    // Prefill's blocks (common.cpp): fp16 and bf16 to fp32 is exact, so the
    // kernel's output must equal LibTorch's conversion bit for bit, tails too.
    std::mt19937 rng(3);
    for (at::ScalarType dt : {at::kHalf, at::kBFloat16})
        for (int64_t n : {1, 7, 15, 16, 17, 33, 1000, 4099}) {
            at::Tensor src = uniform(1, n, rng, dt)[0].contiguous();
            at::Tensor dst = at::full({n}, -7.0f);
            widenInto(src, dst);
            QVERIFY2(at::equal(dst, src.to(at::kFloat)), qPrintable(QString("%1 x %2").arg(c10::toString(dt)).arg(n)));
        }
}

QTEST_GUILESS_MAIN(TestGemv)
#include "tst_gemv.moc"
