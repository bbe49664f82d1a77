// Dequantizing FP8 and MXFP4 (engine/runtime/dequant.h) on this CPU: the
// byte values from their bit fields worked by hand, small weights whose
// every value is derived here, and the loops against the LibTorch-operation
// versions a GPU runs, value for value on every byte. Whole checkpoints run
// against the Python reference in tst_reference.
#include "../engine/runtime/dequant.h"

#include <QtTest>

#include <cmath>
#include <random>

using namespace stowage;

namespace {

at::Tensor randomBytes(std::vector<int64_t> shape, uint32_t seed, int hi = 255)
{
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> pick(0, hi);
    at::Tensor t = at::empty(shape, at::kByte);
    uint8_t* p = t.data_ptr<uint8_t>();
    for (int64_t i = 0; i < t.numel(); ++i)
        p[i] = uint8_t(pick(gen));
    return t;
}

bool sameValues(const at::Tensor& a, const at::Tensor& b)
{
    // equal_nan: NaN codes give NaN in both
    return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
           at::allclose(a.to(at::kFloat), b.to(at::kFloat), 0, 0, /*equal_nan=*/true);
}

} // namespace

class TestDequant : public QObject {
    Q_OBJECT
private slots:
    void e4m3Bytes()
    {
        // sign | eeee | mmm, bias 7: 0x38 = 0.0111.000 = 2^0; 0x7e = 1.111 x 2^8 = 448
        // (the largest); 0x01 = subnormal 1/8 x 2^-6 = 2^-9; 0x08 = 2^-6, the
        // smallest normal; 0xb8 = -1; 0x3c = 1.5; 0x7f and 0xff NaN; 0x80 = -0.
        QCOMPARE(dequant::e4m3(0x38), 1.0f);
        QCOMPARE(dequant::e4m3(0x7e), 448.0f);
        QCOMPARE(dequant::e4m3(0x01), 0.001953125f);
        QCOMPARE(dequant::e4m3(0x08), 0.015625f);
        QCOMPARE(dequant::e4m3(0xb8), -1.0f);
        QCOMPARE(dequant::e4m3(0x3c), 1.5f);
        QVERIFY(std::isnan(dequant::e4m3(0x7f)) && std::isnan(dequant::e4m3(0xff)));
        QVERIFY(dequant::e4m3(0x80) == 0.0f && std::signbit(dequant::e4m3(0x80)));
        // e2m1: s | ee | m, bias 1: 0b0011 = 1.5, 0b0111 = 6, 0b1001 = -0.5
        QCOMPARE(dequant::e2m1(0x3), 1.5f);
        QCOMPARE(dequant::e2m1(0x7), 6.0f);
        QCOMPARE(dequant::e2m1(0x9), -0.5f);
    }

    void fp8Blocks()
    {
        // A 3 x 5 weight in 2 x 2 blocks (the last row and column of blocks
        // cut short): scales [2, 3]. Every code 0x38 (1.0) but (0, 0) = 0x3c
        // (1.5) and (2, 4) = 0xb8 (-1): each value is its block's scale.
        at::Tensor q = at::full({3, 5}, 0x38, at::kByte);
        q[0][0] = 0x3c;
        q[2][4] = 0xb8;
        at::Tensor s = at::tensor({0.5f, 2.0f, 4.0f, 0.25f, 8.0f, -3.0f}).view({2, 3});
        const float want[3][5] = {{0.75f, 0.5f, 2.0f, 2.0f, 4.0f},
                                  {0.5f, 0.5f, 2.0f, 2.0f, 4.0f},
                                  {0.25f, 0.25f, 8.0f, 8.0f, 3.0f}};
        for (at::ScalarType out : {at::kFloat, at::kBFloat16}) {
            at::Tensor y = dequant::fp8(q, s, 2, 2, out);
            QCOMPARE(y.scalar_type(), out);
            for (int r = 0; r < 3; ++r)
                for (int c = 0; c < 5; ++c)
                    QCOMPARE(y[r][c].item<float>(), want[r][c]);
            QVERIFY(sameValues(y, dequant::fp8Ops(q, s, 2, 2, out)));
        }
        // A scale count that does not fit the blocks is refused.
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, dequant::fp8(q, s, 3, 3, at::kFloat));
    }

    void fp8EveryByte()
    {
        // Experts stacked [2, 256, 128] (every byte many times), 128 x 128
        // blocks as DeepSeek-V3 ships, scales of either sign: the loop equals
        // the LibTorch operations, fp32 products then rounded to bf16 / fp16.
        at::Tensor q = randomBytes({2, 256, 128}, 11);
        at::Tensor s = at::tensor({0.003f, -0.02f, 0.5f, 1e-4f}).view({2, 2, 1});
        for (at::ScalarType out : {at::kFloat, at::kBFloat16, at::kHalf})
            QVERIFY(sameValues(dequant::fp8(q, s, 128, 128, out), dequant::fp8Ops(q, s, 128, 128, out)));
    }

    void mxfp4Rows()
    {
        // Two rows of one group: row 0's bytes 0x21 (low nibble 1 = 0.5 is
        // element 0, high 2 = 1.0 element 1), then zeros, exponent 128 (x2);
        // row 1's 0xf7 (6, then -6) with exponent 125 (x1/4). Out: [32, 2],
        // transposed as the model holds gate_up_proj.
        at::Tensor blocks = at::zeros({2, 1, 16}, at::kByte);
        blocks[0][0][0] = 0x21;
        blocks[1][0][0] = 0xf7;
        at::Tensor scales = at::tensor({128, 125}, at::kByte).view({2, 1});
        at::Tensor y = dequant::mxfp4(blocks, scales, at::kBFloat16);
        QCOMPARE(y.sizes().vec(), (std::vector<int64_t>{32, 2}));
        QCOMPARE(y[0][0].item<float>(), 1.0f);
        QCOMPARE(y[1][0].item<float>(), 2.0f);
        QCOMPARE(y[0][1].item<float>(), 1.5f);
        QCOMPARE(y[1][1].item<float>(), -1.5f);
        QCOMPARE(y.to(at::kFloat).abs().sum().item<float>(), 1.0f + 2.0f + 1.5f + 1.5f);
    }

    void mxfp4EveryByte()
    {
        // gpt-oss-like [rows 96, groups 3, 16] with exponents around 127.
        at::Tensor blocks = randomBytes({96, 3, 16}, 5);
        at::Tensor scales = randomBytes({96, 3}, 6, 30).add_(112);
        for (at::ScalarType out : {at::kFloat, at::kBFloat16})
            QVERIFY(sameValues(dequant::mxfp4(blocks, scales, out), dequant::mxfp4Ops(blocks, scales, out)));
    }
};

QTEST_APPLESS_MAIN(TestDequant)
#include "tst_dequant.moc"
