// The decode kernels (engine/runtime/families/gemv.h), each one this CPU can
// run, for every pair of weight and x dtypes the engine uses (fp32 x fp32,
// bf16 x bf16, bf16 x fp32, fp16 x fp32, fp16 x fp16), against sums in double
// precision done here: exact where the inputs make every product and partial
// sum exact (small integers), within fp32 rounding otherwise. Shapes cover the
// vector tails (k not a multiple of 8, 16, 32 or 64), row counts not a
// multiple of 4, and splits across threads.
#include "../engine/runtime/families/gemv.h"
#include "../engine/runtime/families/runner.h"
#include "skip.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <QtTest>

#include <cmath>
#include <random>

#include <sys/mman.h>
#include <unistd.h>

using namespace stowage::arch;

namespace {

struct Shape {
    int64_t n, k;
};
const Shape kShapes[] = {{1, 1},    {3, 7},     {4, 8},    {5, 17},   {6, 31},     {7, 32},    {9, 33},
                         {13, 100}, {8, 127},   {4, 128},  {5, 129},  {64, 1024},  {37, 2816}, {1000, 64},
                         {2051, 515}, {9, 4500}}; // 4500: four rows at a time for a bf16 x too

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
    void attentionAgainstDoubleSums_data();
    void attentionAgainstDoubleSums();
    void softmaxWeightsAgainstDoubleExp();
    void attentionDeclinesWhatItCannotDo();
    void normAndRotaryAsLibTorch();
    void siluMulAsLibTorch();
    void transposedAgainstDoubleSums_data();
    void transposedAgainstDoubleSums();
    void severalMatricesAsOne_data();
    void severalMatricesAsOne();
    void severalMatricesRejected();
    void addedAndWidenedAsLibTorch_data();
    void addedAndWidenedAsLibTorch();
    void conversionsAsLibTorch();
    void readsAheadIntoFreedMemorySafely();
    void hintsPastTheEndNeverFault_data();
    void hintsPastTheEndNeverFault();
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
// gemv() (and the loops that follow fp32's kernel) use `kernel` for `dtype`
// while this lives; the choice before comes back when it goes, also when a
// failed check returns from the test early.
class UsingKernel {
public:
    UsingKernel(at::ScalarType dtype, GemvKernel kernel) : m_dtype(dtype), m_before(gemvKernelFor(dtype))
    {
        overrideGemvKernel(dtype, kernel);
    }
    ~UsingKernel() { overrideGemvKernel(m_dtype, m_before); }
    UsingKernel(const UsingKernel&) = delete;
    UsingKernel& operator=(const UsingKernel&) = delete;

private:
    at::ScalarType m_dtype;
    GemvKernel m_before;
};

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
        for (int64_t n : {1, 7, 15, 16, 17, 33, 1000, 4099, 300001}) { // the last split between threads
            at::Tensor src = uniform(1, n, rng, dt)[0].contiguous();
            at::Tensor dst = at::full({n}, -7.0f);
            widenInto(src, dst);
            QVERIFY2(at::equal(dst, src.to(at::kFloat)), qPrintable(QString("%1 x %2").arg(c10::toString(dt)).arg(n)));
        }
}

void TestGemv::attentionAgainstDoubleSums_data()
{
    QTest::addColumn<int>("kernel");
    QTest::addColumn<int>("dtype");
    QTest::addColumn<int>("heads");
    QTest::addColumn<int>("kvHeads");
    QTest::addColumn<int>("dim");
    QTest::addColumn<int>("positions");
    QTest::addColumn<int>("qDtype");
    struct Case {
        int heads, kvHeads, dim, positions;
    };
    const Case cases[] = {{1, 1, 16, 1}, {4, 4, 64, 7}, {8, 2, 128, 300}, {6, 3, 80, 33}, {32, 8, 128, 1000}};
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kHalf})
        for (GemvKernel k : gemvKernels(dt))
            if (k != GemvKernel::None)
                for (const Case& c : cases) {
                    QTest::addRow("%s %s H%d/%d D%d S%d", c10::toString(dt), gemvKernelName(k), c.heads, c.kvHeads, c.dim,
                                  c.positions)
                        << int(k) << int(dt) << c.heads << c.kvHeads << c.dim << c.positions << int(dt);
                    if (dt == at::kHalf) // an fp16 checkpoint's cache with fp32 activations (runner.h)
                        QTest::addRow("fp32 q, fp16 cache %s H%d/%d D%d S%d", gemvKernelName(k), c.heads, c.kvHeads,
                                      c.dim, c.positions)
                            << int(k) << int(dt) << c.heads << c.kvHeads << c.dim << c.positions << int(at::kFloat);
                }
}

void TestGemv::attentionAgainstDoubleSums()
{
    // Decoding's attention (gemv.h attendOne) over keys and values laid out
    // as the KV cache holds them (the first S positions of a longer buffer),
    // against scores, softmax and sums in double done here over the values as
    // stored. Grouped-query heads read kv head h / (H / KV).
    QFETCH(int, kernel);
    QFETCH(int, dtype);
    QFETCH(int, heads);
    QFETCH(int, kvHeads);
    QFETCH(int, dim);
    QFETCH(int, positions);
    QFETCH(int, qDtype);
    const auto dt = at::ScalarType(dtype), qdt = at::ScalarType(qDtype);
    std::mt19937 rng(uint32_t(heads * 131 + dim * 7 + positions));
    const int64_t capacity = positions + 5;
    at::Tensor q = uniform(heads, dim, rng, qdt).view({1, heads, 1, dim});
    at::Tensor kb = uniform(kvHeads * capacity, dim, rng, dt).view({1, kvHeads, capacity, dim});
    at::Tensor vb = uniform(kvHeads * capacity, dim, rng, dt).view({1, kvHeads, capacity, dim});
    at::Tensor k = kb.narrow(2, 0, positions), v = vb.narrow(2, 0, positions);
    const double scale = 1.0 / std::sqrt(double(dim));
    at::Tensor got;
    {
        const UsingKernel use(dt, GemvKernel(kernel));
        got = attendOne(q, k, v, scale);
    }
    QVERIFY(got.defined());
    QCOMPARE(got.scalar_type(), qdt);
    QCOMPARE(got.sizes().vec(), (std::vector<int64_t>{1, heads, 1, dim}));

    const at::Tensor qd = q.to(at::kDouble).contiguous(), kd = k.to(at::kDouble).contiguous(),
                     vd = v.to(at::kDouble).contiguous(), gd = got.to(at::kDouble).contiguous();
    const double *qp = qd.data_ptr<double>(), *kp = kd.data_ptr<double>(), *vp = vd.data_ptr<double>(),
                 *gp = gd.data_ptr<double>();
    // bf16/fp16 activations: the softmax weights meet V rounded to the dtype
    // (relative 2^-8 / 2^-11), and the result is rounded once more. fp32
    // ones (an fp16 cache too): nothing is rounded but fp32 sums.
    const double tol = qdt == at::kBFloat16 ? 3.0 / 256 : qdt == at::kHalf ? 3.0 / 2048 : 1e-5;
    double worst = 0;
    for (int h = 0; h < heads; ++h) {
        const int kv = h / (heads / kvHeads);
        std::vector<double> s(size_t(positions), 0.0);
        double top = -1e300, sum = 0;
        for (int i = 0; i < positions; ++i) {
            for (int d = 0; d < dim; ++d)
                s[size_t(i)] += qp[h * dim + d] * kp[(kv * positions + i) * dim + d];
            s[size_t(i)] *= scale;
            top = std::max(top, s[size_t(i)]);
        }
        for (double& x : s)
            sum += (x = std::exp(x - top));
        for (int d = 0; d < dim; ++d) {
            double want = 0;
            for (int i = 0; i < positions; ++i)
                want += s[size_t(i)] / sum * vp[(kv * positions + i) * dim + d];
            worst = std::max(worst, std::abs(gp[h * dim + d] - want));
        }
    }
    // Values lie in [-1, 1], so is every output: an absolute bound.
    QVERIFY2(worst <= tol, qPrintable(QString("largest difference %1 (tolerance %2)").arg(worst).arg(tol)));
}

void TestGemv::softmaxWeightsAgainstDoubleExp()
{
    // attendOne's softmax (its own vector exp) weight by weight against exp
    // in double of the same fp32 differences: the attention test cannot see
    // an exp that is off by the same factor everywhere (the division by the
    // sum takes it out), this one can. Scores reach below -87, where e^x
    // falls under the smallest normal float, and whole vectors and tails.
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> d(-130.0f, 6.0f);
    int checked = 0;
    for (GemvKernel k : gemvKernels(at::kFloat)) {
        if (k == GemvKernel::None)
            continue;
        for (int round : {0, 1, 2})
            for (int n : {1, 7, 15, 16, 17, 33, 300, 1000}) {
                std::vector<float> scores(static_cast<size_t>(n));
                for (float& v : scores)
                    v = d(rng);
                const float scale = 0.93f;
                float top = -INFINITY;
                for (float v : scores)
                    top = std::max(top, v * scale);
                std::vector<float> p = scores;
                const double sum = softmaxWeights(k, p.data(), n, scale, round);
                double want = 0, worst = 0;
                for (int i = 0; i < n; ++i) {
                    const double e = std::exp(double(scores[size_t(i)] * scale - top)); // the fp32 difference
                    want += e;
                    const double got = p[size_t(i)];
                    if (e < std::ldexp(1.0, -126)) { // under the normal floats: about 2^-126 or less
                        QVERIFY2(got >= 0 && got <= std::ldexp(1.0, -125), qPrintable(QString::number(got)));
                        continue;
                    }
                    // a few ulp of fp32; rounded to bf16 / fp16: half an ulp (2^-8, 2^-11 of the value at most)
                    const double rel = round == 0 ? 3e-7 : round == 1 ? 1.01 / 256 : 1.01 / 2048;
                    const double floor = round == 2 ? std::ldexp(1.0, -25) : 0.0; // fp16's subnormal steps
                    worst = std::max(worst, std::abs(got - e) / e);
                    QVERIFY2(std::abs(got - e) <= rel * e + floor,
                             qPrintable(QString("%1 round %2 n %3: e^%4 = %5, got %6")
                                            .arg(gemvKernelName(k)).arg(round).arg(n)
                                            .arg(double(scores[size_t(i)] * scale - top)).arg(e, 0, 'g', 9)
                                            .arg(got, 0, 'g', 9)));
                    if (round == 1)
                        QCOMPARE(float(c10::BFloat16(p[size_t(i)])), p[size_t(i)]); // a bf16 value
                    if (round == 2)
                        QCOMPARE(float(c10::Half(p[size_t(i)])), p[size_t(i)]); // an fp16 value
                }
                QVERIFY2(std::abs(sum - want) <= 1e-6 * want, qPrintable(QString("sum %1 want %2").arg(sum).arg(want)));
                ++checked;
            }
    }
    // Every CPU this suite runs on has AVX2 (gemv.h's kernels are x86 ones).
    if (checked == 0)
        STOWAGE_SKIP_OR_FAIL("this CPU runs no softmax kernel");
}

void TestGemv::attentionDeclinesWhatItCannotDo()
{
    // Undefined (the caller's LibTorch path runs) for layouts and shapes
    // the kernel does not take; never a wrong answer.
    const at::Tensor q = at::ones({1, 4, 1, 16}), k = at::ones({1, 2, 9, 16});
    QVERIFY(!attendOne(q, k.transpose(2, 3).contiguous().transpose(2, 3), k, 1.0).defined()); // positions not rows
    QVERIFY(!attendOne(at::ones({1, 4, 2, 16}), k, k, 1.0).defined());                          // two new positions
    QVERIFY(!attendOne(at::ones({1, 3, 1, 16}), k, k, 1.0).defined());                          // 3 heads over 2
    QVERIFY(!attendOne(q.to(at::kDouble), k.to(at::kDouble), k.to(at::kDouble), 1.0).defined());
    // a cache narrower than q only as fp16 under fp32
    QVERIFY(!attendOne(q.to(at::kBFloat16), k.to(at::kHalf), k.to(at::kHalf), 1.0).defined());
    QVERIFY(!attendOne(q.to(at::kHalf), k, k, 1.0).defined());
    QVERIFY(!attendOne(q, k.to(at::kBFloat16), k.to(at::kBFloat16), 1.0).defined());
    QVERIFY(!attendOne(q, k.to(at::kHalf), k, 1.0).defined());
    QVERIFY(!attendOne(at::ones({1, 4, 1, 12}), at::ones({1, 2, 9, 12}), at::ones({1, 2, 9, 12}), 1.0).defined());
}

void TestGemv::normAndRotaryAsLibTorch()
{
    // Decoding's loops for RMSNorm and rotary (runner.h) against the LibTorch
    // operations they replace, written out here: rotary bit for bit (the same
    // roundings), RMSNorm within one unit in the last place of the dtype (its
    // sum of squares is summed in another order). Each instruction set's
    // loops (they follow fp32's GEMV kernel) and the scalar ones (none);
    // lengths with and without vector tails.
    for (GemvKernel k : gemvKernels(at::kFloat)) {
        const UsingKernel use(at::kFloat, k);
        const char* kernel = gemvKernelName(k);
        std::mt19937 rng(11);
        for (at::ScalarType dt : {at::kFloat, at::kBFloat16})
            for (int64_t n : {8, 64, 1000, 1024, 4096}) {
                const at::Tensor x = uniform(3, n, rng, dt), w = uniform(1, n, rng, dt)[0];
                at::Tensor f = x.to(at::kFloat);
                f = f * at::rsqrt(f.pow(2).mean(-1, true) + 1e-5);
                const at::Tensor want = (w * f.to(dt)).to(at::kFloat), got = rmsNorm(x, w, 1e-5).to(at::kFloat);
                QCOMPARE(got.scalar_type(), at::kFloat);
                const double ulp = dt == at::kBFloat16 ? 1.0 / 128 : 1e-6;
                const double worst = ((got - want).abs() / (want.abs() + 1e-30)).max().item<double>();
                QVERIFY2(worst <= ulp, qPrintable(QString("%1 %2 x %3: relative difference %4")
                                                      .arg(kernel, c10::toString(dt))
                                                      .arg(n)
                                                      .arg(worst)));
                // bf16: the same value nearly everywhere (only a scale an fp32
                // ulp apart could move a rounding; without the one between
                // the two products a quarter of them moved)
                const int64_t same = got.eq(want).sum().item<int64_t>();
                if (dt == at::kBFloat16)
                    QVERIFY2(same >= 3 * n * 97 / 100,
                             qPrintable(QString("%1 bf16 x %2: %3 of %4 alike").arg(kernel).arg(n).arg(same).arg(3 * n)));
            }
        // fp16 weights beside fp32 activations (fp16 checkpoints on the CPU)
        const at::Tensor x = uniform(2, 96, rng, at::kFloat), w = uniform(1, 96, rng, at::kHalf)[0];
        at::Tensor f = x * at::rsqrt(x.pow(2).mean(-1, true) + 1e-6);
        QVERIFY2(at::allclose(rmsNorm(x, w, 1e-6), w * f, 1e-6, 1e-7), kernel);

        for (at::ScalarType dt : {at::kFloat, at::kBFloat16})
            for (int64_t dim : {2, 16, 40, 64, 128}) {
                const int64_t heads = 5;
                // q as the runner holds it: [1, T, H, D] transposed to [1, H, T, D]
                const at::Tensor q = uniform(heads, dim, rng, dt).view({1, 1, heads, dim}).transpose(1, 2);
                const at::Tensor cos = uniform(1, dim, rng, dt), sin = uniform(1, dim, rng, dt);
                const auto halves = q.chunk(2, -1);
                const at::Tensor want = q * cos + at::cat({-halves[1], halves[0]}, -1) * sin;
                QVERIFY2(at::equal(rotary(q, cos, sin), want),
                         qPrintable(QString("%1 %2 dim %3").arg(kernel, c10::toString(dt)).arg(dim)));
            }
    }
}

void TestGemv::siluMulAsLibTorch()
{
    // The MLP's silu(gate) * up in one loop (runner.h siluMul) against
    // LibTorch's two operations: within an ulp of the dtype, and for bf16 the
    // same value in nearly every element (a different exp moves a rounding
    // now and then; a missing rounding inside the silu or after the product
    // moves a third or more). Gates reach +-100, past where e^-x overflows a
    // float, and the lengths cover vector tails. Each instruction set's loop,
    // and none (LibTorch's operations).
    for (GemvKernel k : gemvKernels(at::kFloat)) {
        const UsingKernel use(at::kFloat, k);
        const char* kernel = gemvKernelName(k);
        std::mt19937 rng(23);
        std::uniform_real_distribution<float> d(-12.0f, 12.0f);
        for (at::ScalarType dt : {at::kFloat, at::kBFloat16})
            for (int64_t n : {1, 7, 15, 16, 17, 1000, 2816}) {
                at::Tensor g = at::empty({1, n}), u = at::empty({1, n});
                for (int64_t i = 0; i < n; ++i) {
                    g[0][i] = i % 97 == 5 ? (i % 2 ? 100.0f : -100.0f) : d(rng);
                    u[0][i] = d(rng);
                }
                g = g.to(dt);
                u = u.to(dt);
                const at::Tensor got = siluMul(g, u);
                QCOMPARE(got.scalar_type(), dt);
                QCOMPARE(got.sizes(), g.sizes());
                QCOMPARE(siluTimes(g, u).defined(), k != GemvKernel::None); // the loop where there is one
                const at::Tensor want = (at::silu(g) * u).to(at::kDouble), gd = got.to(at::kDouble);
                const double ulp = dt == at::kBFloat16 ? 1.0 / 128 : 4e-7;
                const double worst = ((gd - want).abs() / (want.abs() + 1e-30)).max().item<double>();
                QVERIFY2(worst <= ulp, qPrintable(QString("%1 %2 x %3: relative difference %4")
                                                      .arg(kernel, c10::toString(dt))
                                                      .arg(n)
                                                      .arg(worst)));
                if (dt == at::kBFloat16) {
                    const int64_t same = gd.eq(want).sum().item<int64_t>();
                    QVERIFY2(same >= n * 98 / 100,
                             qPrintable(QString("%1 bf16 x %2: %3 alike").arg(kernel).arg(n).arg(same)));
                }
            }
    }
    QVERIFY(!siluTimes(at::ones({2, 16}), at::ones({2, 16})).defined()); // two rows
    QVERIFY(!siluTimes(at::ones({1, 16}, at::kHalf), at::ones({1, 16}, at::kHalf)).defined());
}

void TestGemv::transposedAgainstDoubleSums_data() { addKernelRows(); }

void TestGemv::transposedAgainstDoubleSums()
{
    // W^T x for Conv1D weights stored [in, out] (gemv.h gemvT), with the
    // kernel under test chosen for W's dtype: against the same double sums
    // over W^T (the bf16 dot-product kernel's choice runs the AVX-512 one).
    // Undefined where there is no kernel or the columns do not fit its width.
    QFETCH(int, kernel);
    QFETCH(int, wdtype);
    QFETCH(int, xdtype);
    const auto wt = at::ScalarType(wdtype), xt = at::ScalarType(xdtype);
    const GemvKernel kt = GemvKernel(kernel);
    const UsingKernel use(wt, kt);
    std::mt19937 rng(5);
    if (kt == GemvKernel::None) { // no kernel: the caller's LibTorch path
        QVERIFY(!gemvT(uniform(8, 32, rng, wt), uniform(1, 8, rng, xt)[0]).defined());
        return;
    }
    const Shape shapes[] = {{1, 16}, {3, 32}, {5, 48}, {9, 2304}, {768, 2304}, {1001, 64}, {3072, 768}};
    for (const Shape& s : shapes) { // n = in, k = out
        at::Tensor w = uniform(s.n, s.k, rng, wt), x = uniform(1, s.n, rng, xt)[0];
        const at::Tensor y = gemvT(w, x);
        QVERIFY2(y.defined(), qPrintable(QString("%1x%2").arg(s.n).arg(s.k)));
        QCOMPARE(y.scalar_type(), xt);
        const at::Tensor yf = y.to(at::kDouble);
        std::vector<double> abs;
        const auto ref = reference(w.t().contiguous(), x, &abs);
        for (int64_t c = 0; c < s.k; ++c) {
            const double want = ref[size_t(c)];
            const double tol = double(s.n) * 6e-8 * abs[size_t(c)] + std::abs(want) * outputUlp(xt) + 1e-30;
            const double got = yf[c].item<double>();
            if (!(std::abs(got - want) <= tol))
                QFAIL(qPrintable(QString("%1x%2 column %3: %4, expected %5 +- %6").arg(s.n).arg(s.k).arg(c).arg(got).arg(want).arg(tol)));
        }
    }
    QVERIFY(!gemvT(uniform(4, 12, rng, wt), uniform(1, 4, rng, xt)[0]).defined()); // 12 columns: no vector width
}

void TestGemv::severalMatricesAsOne_data() { addKernelRows(); }

void TestGemv::severalMatricesAsOne()
{
    // gemvAll (q, k and v; gate and up as one job): each matrix's rows come
    // out exactly as the double sums say, rounded once, whatever the mix of
    // row counts (tails not a multiple of 8, one chunk or many per matrix),
    // and bit for bit as gemvWith() of that matrix alone. LibTorch's own bf16
    // mv (None, bf16 x) rounds its partial sums to bf16: only the second there.
    QFETCH(int, kernel);
    QFETCH(int, wdtype);
    QFETCH(int, xdtype);
    const auto wt = at::ScalarType(wdtype), xt = at::ScalarType(xdtype);
    std::mt19937 rng(13);
    const std::vector<std::vector<int64_t>> rowSets = {{13, 2051, 5}, {1000, 7, 64, 9}, {3, 1}, {4096, 4096}};
    for (int64_t k : {17, 515, 128}) {
        for (const auto& rows : rowSets) {
            std::vector<at::Tensor> ws;
            for (int64_t n : rows)
                ws.push_back(integers(n, k, rng, wt));
            const at::Tensor x = integers(1, k, rng, xt)[0];
            const std::vector<at::Tensor> ys = gemvAllWith(GemvKernel(kernel), ws, x);
            QCOMPARE(ys.size(), ws.size());
            for (size_t m = 0; m < ws.size(); ++m) {
                QCOMPARE(ys[m].scalar_type(), xt);
                QCOMPARE(ys[m].size(0), rows[m]);
                std::vector<double> abs;
                const auto ref = reference(ws[m], x, &abs);
                QVERIFY(at::equal(ys[m], gemvWith(GemvKernel(kernel), ws[m], x)));
                if (GemvKernel(kernel) == GemvKernel::None && xt == at::kBFloat16)
                    continue;
                const at::Tensor yf = ys[m].to(at::kDouble).contiguous();
                const double* got = yf.data_ptr<double>();
                for (int64_t r = 0; r < rows[m]; ++r)
                    if (got[r] != roundedTo(xt, ref[size_t(r)]))
                        QFAIL(qPrintable(QString("k %1, matrix %2 of %3 rows, row %4: %5, expected %6")
                                             .arg(k).arg(m).arg(rows[m]).arg(r).arg(got[r])
                                             .arg(roundedTo(xt, ref[size_t(r)]))));
            }
        }
    }
}

void TestGemv::severalMatricesRejected()
{
    const at::Tensor x = at::zeros({8});
    const at::Tensor w = at::zeros({4, 8});
    for (GemvKernel k : gemvKernels(at::kFloat)) {
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvAllWith(k, {}, x));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvAllWith(k, std::vector<at::Tensor>(kGemvMatrices + 1, w), x));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvAllWith(k, {w, at::zeros({4, 8}, at::kBFloat16)}, x));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvAllWith(k, {w, at::zeros({4, 9})}, x));
        QCOMPARE(gemvAllWith(k, std::vector<at::Tensor>(kGemvMatrices, w), x).size(), kGemvMatrices);
    }
}

void TestGemv::addedAndWidenedAsLibTorch_data() { addKernelRows(); }

void TestGemv::addedAndWidenedAsLibTorch()
{
    // What the runners ask of a job beyond W x (GemvAfter): a row x [1, in]
    // gives rows [1, out]; h + linear(x) and linear(x).float() come out bit
    // for bit as LibTorch's operations on the plain product give them (its
    // add rounds the product to x's dtype first, then the sum), on values
    // whose sums round (uniform, not integers), row counts with tails.
    QFETCH(int, kernel);
    QFETCH(int, wdtype);
    QFETCH(int, xdtype);
    const auto k = GemvKernel(kernel);
    const auto wt = at::ScalarType(wdtype), xt = at::ScalarType(xdtype);
    std::mt19937 rng(21);
    for (int64_t in : {64, 515}) {
        const std::vector<at::Tensor> ws = {uniform(1029, in, rng, wt), uniform(40, in, rng, wt)};
        const at::Tensor x = uniform(1, in, rng, xt);
        const std::vector<at::Tensor> hs = {uniform(1, 1029, rng, xt), uniform(1, 40, rng, xt)};
        const std::vector<at::Tensor> ys = gemvAllWith(k, ws, x);
        const std::vector<at::Tensor> sums = gemvAllWith(k, ws, x, {hs, false});
        const std::vector<at::Tensor> wide = gemvAllWith(k, ws, x, {{}, true});
        for (size_t m = 0; m < ws.size(); ++m) {
            QCOMPARE(ys[m].sizes(), at::IntArrayRef({1, ws[m].size(0)}));
            QVERIFY(at::equal(ys[m][0], gemvWith(k, ws[m], x[0])));
            QCOMPARE(sums[m].scalar_type(), xt);
            QVERIFY(at::equal(sums[m], hs[m] + ys[m]));
            QVERIFY(!at::equal(sums[m], ys[m])); // something was added
            QCOMPARE(wide[m].scalar_type(), at::kFloat);
            QVERIFY(at::equal(wide[m], ys[m].to(at::kFloat)));
        }
    }
    const at::Tensor w = uniform(8, 16, rng, wt), x = uniform(1, 16, rng, xt), h = uniform(1, 8, rng, xt);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvAllWith(k, {w}, uniform(2, 16, rng, xt)));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvAllWith(k, {w}, x, {{h, h}, false}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvAllWith(k, {w}, x, {{uniform(1, 9, rng, xt)}, false}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvAllWith(k, {w}, x, {{h[0]}, false}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvAllWith(k, {w}, x, {{h}, true}));
    if (xt != at::kFloat)
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemvAllWith(k, {w}, x, {{h.to(at::kFloat)}, false}));
}

void TestGemv::conversionsAsLibTorch()
{
    // narrowToHalf (an fp16 model's keys and values) and widen (one token's
    // embedding row) give Tensor::to's bits: ties to even, fp16 subnormals,
    // overflow to infinity, signed zeros, and tails past the vector width.
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    std::vector<float> v = {0.0f, -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65520.0f, 1e6f, -1e6f,
                            6e-8f, 3e-8f, 1e-5f, -2.5e-6f};
    for (int i = 0; i < 1001; ++i)
        v.push_back(d(rng) * std::pow(2.0f, float(int(rng() % 40) - 20)));
    const at::Tensor f = at::from_blob(v.data(), {int64_t(v.size())}, at::kFloat);
    for (int64_t n : {int64_t(v.size()), int64_t(7), int64_t(1)}) {
        at::Tensor h = at::empty({n}, at::kHalf);
        narrowToHalf(v.data(), h.data_ptr(), n);
        QVERIFY(at::equal(h.view(at::kShort), f.narrow(0, 0, n).to(at::kHalf).view(at::kShort)));
        for (at::ScalarType t : {at::kHalf, at::kBFloat16, at::kFloat}) {
            const at::Tensor src = f.narrow(0, 0, n).to(t);
            at::Tensor out = at::empty({n}, at::kFloat);
            widen(src.data_ptr(), t, out.data_ptr<float>(), n);
            QVERIFY(at::equal(out, src.to(at::kFloat)));
        }
    }
}

void TestGemv::readsAheadIntoFreedMemorySafely()
{
    // A helper that has finished its rows reads ahead into the matrix that
    // followed this one last time (gemv.cpp). When that matrix is freed (an
    // offloaded layer's step buffer), the read-ahead must only hint: no
    // fault, and every later product stays exact. 36 MiB is above glibc's
    // largest mmap threshold, so freeing the buffer unmaps it.
    std::mt19937 rng(17);
    const at::Tensor a = integers(512, 1024, rng, at::kFloat), x = integers(1, 1024, rng, at::kFloat)[0];
    std::vector<double> abs;
    const auto refA = reference(a, x, &abs);
    const float xSum = x.sum().item<float>();
    for (int round = 0; round < 12; ++round) {
        at::Tensor b = at::full({9216, 1024}, float(round));
        const at::Tensor ya = gemv(a, x), yb = gemv(b, x);
        QCOMPARE(yb[9215].item<float>(), float(round) * xSum);
        b = at::Tensor(); // unmapped: the next gemv(a) reads ahead into where it was
        const at::Tensor again = gemv(a, x).contiguous();
        for (int64_t r = 0; r < 512; ++r)
            QCOMPARE(double(again[r].item<float>()), refA[size_t(r)]);
        QVERIFY(at::equal(ya, again));
    }
}

void TestGemv::hintsPastTheEndNeverFault_data() { addKernelRows(); }

void TestGemv::hintsPastTheEndNeverFault()
{
    // The one-row kernels ask for lines up to gemvReadAhead() bytes past
    // what they read (gemv_isa.h): past a matrix's last row that is memory
    // the process may not own. Here W ends where 64 KiB of inaccessible
    // pages begin, the most read-ahead there is: the hints must never fault
    // (a load there would be SIGSEGV), and the sums are the same exact ones
    // with hints near, far and off.
    QFETCH(int, kernel);
    QFETCH(int, wdtype);
    QFETCH(int, xdtype);
    const auto wt = at::ScalarType(wdtype), xt = at::ScalarType(xdtype);
    const int64_t n = 37, k = 1000; // rows under 4 KiB: the one-row kernels for every dtype (gemv_isa.h)
    const size_t bytes = size_t(n * k) * at::elementSize(wt), page = size_t(sysconf(_SC_PAGESIZE));
    const size_t guard = size_t(64) << 10, span = (bytes + page - 1) / page * page + guard;
    char* base = static_cast<char*>(mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    QVERIFY(base != MAP_FAILED);
    char* end = base + span - guard;
    QCOMPARE(mprotect(end, guard, PROT_NONE), 0);
    std::mt19937 rng(23);
    const at::Tensor values = integers(n, k, rng, wt), x = integers(1, k, rng, xt)[0];
    at::Tensor w = at::from_blob(end - bytes, {n, k}, at::TensorOptions().dtype(wt));
    w.copy_(values);
    std::vector<double> abs;
    const auto ref = reference(w, x, &abs);
    const int64_t before = gemvReadAhead();
    std::vector<at::Tensor> ys;
    for (int64_t ahead : {int64_t(0), int64_t(8192), int64_t(65536)}) {
        overrideGemvReadAhead(ahead);
        QCOMPARE(gemvReadAhead(), ahead);
        ys.push_back(gemvWith(GemvKernel(kernel), w, x).contiguous());
    }
    overrideGemvReadAhead(before);
    munmap(base, span);
    for (const at::Tensor& y : ys) {
        QVERIFY(at::equal(y, ys[0]));
        for (int64_t r = 0; r < n; ++r)
            QCOMPARE(y[r].to(at::kDouble).item<double>(), roundedTo(xt, ref[size_t(r)]));
    }
}

QTEST_GUILESS_MAIN(TestGemv)
#include "tst_gemv.moc"
