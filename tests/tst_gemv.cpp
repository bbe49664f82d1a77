// The decode kernels (engine/runtime/families/gemv.h), each one this CPU can
// run, against sums in double precision done here: exact where the inputs
// make every product and partial sum exact (small integers), within fp32
// rounding otherwise. Shapes cover the vector tails (k not a multiple of 8,
// 16 or 32), row counts not a multiple of 4, and splits across threads.
#include "../engine/runtime/families/gemv.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <QtTest>

#include <cmath>
#include <random>

using namespace stowage::arch;

namespace {

struct Shape {
    int64_t n, k;
};
const Shape kShapes[] = {{1, 1},   {3, 7},    {4, 8},     {5, 17},   {6, 31},    {7, 32},
                         {9, 33},  {13, 100}, {64, 1024}, {37, 2816}, {1000, 64}, {2051, 515}};

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

// What the kernel must return for an exact sum: fp32 as is, bf16 rounded to
// nearest even (c10::BFloat16's conversion).
double roundedTo(at::ScalarType dt, double v)
{
    return dt == at::kFloat ? double(float(v)) : double(float(c10::BFloat16(float(v))));
}

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
};

void TestGemv::kernelsListed()
{
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
        const auto ks = gemvKernels(dt);
        QVERIFY(!ks.empty());
        QCOMPARE(ks.back(), GemvKernel::None);
        const GemvKernel chosen = gemvKernelFor(dt);
        QVERIFY(std::find(ks.begin(), ks.end(), chosen) != ks.end());
        qInfo("%s: kernel %s", c10::toString(dt), gemvKernelName(chosen));
    }
    // fp32 stays on OpenBLAS's sgemv: own kernels measured no faster
    QCOMPARE(gemvKernels(at::kFloat), std::vector<GemvKernel>{GemvKernel::None});
}

namespace {
void addKernelRows()
{
    QTest::addColumn<int>("kernel");
    QTest::addColumn<int>("dtype");
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16})
        for (GemvKernel k : gemvKernels(dt))
            QTest::addRow("%s %s", c10::toString(dt), gemvKernelName(k)) << int(k) << int(dt);
}
} // namespace

void TestGemv::exactOnIntegers_data() { addKernelRows(); }

void TestGemv::exactOnIntegers()
{
    QFETCH(int, kernel);
    QFETCH(int, dtype);
    const auto dt = at::ScalarType(dtype);
    std::mt19937 rng(7);
    for (const Shape& s : kShapes) {
        at::Tensor w = integers(s.n, s.k, rng, dt), x = integers(1, s.k, rng, dt)[0];
        at::Tensor y = gemvWith(GemvKernel(kernel), w, x);
        QCOMPARE(y.scalar_type(), dt);
        QCOMPARE(y.dim(), int64_t(1));
        QCOMPARE(y.size(0), s.n);
        std::vector<double> abs;
        const auto ref = reference(w, x, &abs);
        at::Tensor yf = y.to(at::kDouble);
        for (int64_t r = 0; r < s.n; ++r) {
            const double got = yf[r].item<double>(), want = roundedTo(dt, ref[size_t(r)]);
            if (got != want)
                QFAIL(qPrintable(QString("%1x%2 row %3: %4, expected %5").arg(s.n).arg(s.k).arg(r).arg(got).arg(want)));
        }
    }
}

void TestGemv::closeOnRandom_data() { addKernelRows(); }

void TestGemv::closeOnRandom()
{
    QFETCH(int, kernel);
    QFETCH(int, dtype);
    const auto dt = at::ScalarType(dtype);
    std::mt19937 rng(11);
    for (const Shape& s : kShapes) {
        at::Tensor w = uniform(s.n, s.k, rng, dt), x = uniform(1, s.k, rng, dt)[0];
        at::Tensor yf = gemvWith(GemvKernel(kernel), w, x).to(at::kDouble);
        std::vector<double> abs;
        const auto ref = reference(w, x, &abs);
        for (int64_t r = 0; r < s.n; ++r) {
            // fp32 sums in any order: at most ~k ulps of the sum of magnitudes;
            // bf16 output adds one rounding of 2^-9 relative. LibTorch 1.13's
            // bf16 mv (None) also rounds each product to bf16 (2^-9 of each).
            const double want = ref[size_t(r)];
            const bool bf16Products = dt == at::kBFloat16 && GemvKernel(kernel) == GemvKernel::None;
            const double tol = double(s.k) * 6e-8 * abs[size_t(r)] + (dt == at::kBFloat16 ? std::abs(want) / 256 : 0) +
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
    const GemvKernel k = gemvKernels(at::kBFloat16).front();
    if (k == GemvKernel::None)
        QSKIP("no own bf16 kernel on this CPU (no AVX2): at::mv checks its own shapes");
    const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvWith(k, at::zeros({4, 8}, bf16), at::zeros({9}, bf16)));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvWith(k, at::zeros({4, 8}, bf16), at::zeros({8})));
}

QTEST_GUILESS_MAIN(TestGemv)
#include "tst_gemv.moc"
