// AVX-512 row kernels (compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512bf16 -mfma -mf16c; called only when the CPU has them, see
// gemv.cpp). Tails are masked loads, which never touch the masked-off bytes.
#include "gemv_rows.h"

#include <immintrin.h>

namespace {

using stowage::arch::rows::Bf16;
using stowage::arch::rows::F16;

__m512 widenBf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
__mmask16 first16(int n) { return __mmask16((1u << n) - 1); }

struct Isa {
    using V = __m512;
    static constexpr int N = 16;
    static V zero() { return _mm512_setzero_ps(); }
    static V set(float v) { return _mm512_set1_ps(v); }
    static V add(V a, V b) { return _mm512_add_ps(a, b); }
    static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static float sum(V v) { return _mm512_reduce_add_ps(v); }
    static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
    static V max(V a, V b) { return _mm512_max_ps(a, b); }
    static V min(V a, V b) { return _mm512_min_ps(a, b); }
    static V div(V a, V b) { return _mm512_div_ps(a, b); }
    // v already rounded to bf16 (roundedBf16): its upper halves stored.
    static void storeBf16(Bf16* p, V v)
    {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
    }
    static float maxAll(V v) { return _mm512_reduce_max_ps(v); }
    static V roundNearest(V v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    // Two vectors of partial sums folded into one (gemv_isa.h scoresOf):
    // level 1 adds each row's 256-bit halves (a's in the low half, b's in the
    // high), level 2 their 128-bit quarters (a row a 128-bit lane), levels 3
    // and 4 neighbours within each lane; `ordered` puts the 16 rows' sums in
    // order.
    static constexpr int kFolds = 4;
    template <int Level>
    static V fold(V a, V b)
    {
        if constexpr (Level == 1)
            return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
        else if constexpr (Level == 2)
            return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
        else
            return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xdd));
    }
    static V ordered(V v)
    {
        return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v);
    }
    // 2^n for whole n in [-126, 127], in the exponent bits.
    static V pow2(V n)
    {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
    }
    // Rounded to bf16 / fp16 (to nearest, ties to even) and widened back.
    static V roundedBf16(V v)
    {
        const __m512i b = _mm512_castps_si512(v);
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
        const __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), odd);
        return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(int(0xffff0000u))));
    }
    static V roundedF16(V v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
    static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
    static V load(const float* p) { return _mm512_loadu_ps(p); }
    static V load(const Bf16* p) { return widenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static V load(const F16* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    // The first n (1..16) elements, the rest zero.
    static V loadPart(const float* p, int n) { return _mm512_maskz_loadu_ps(first16(n), p); }
    static V loadPart(const Bf16* p, int n) { return widenBf16(_mm256_maskz_loadu_epi16(first16(n), p)); }
    static V loadPart(const F16* p, int n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first16(n), p)); }
};

} // namespace

#include "gemv_isa.h"

namespace {

// ---- AVX512-BF16: 32 bf16 pairs per vdpbf16ps, products and sums in fp32.
__m512bh pairs(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
__m512bh pairsPart(const uint16_t* p, int n)
{
    return (__m512bh)_mm512_maskz_loadu_epi16(__mmask32((uint64_t(1) << n) - 1), p);
}
__m512 dp(__m512 acc, __m512bh a, __m512bh b) { return _mm512_dpbf16_ps(acc, a, b); }

void dp4(const uint16_t* w0, const uint16_t* x, int64_t k, int64_t, float* y)
{
    const uint16_t* w1 = w0 + k;
    const uint16_t* w2 = w1 + k;
    const uint16_t* w3 = w2 + k;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t j = 0;
    prefetchRowStarts(reinterpret_cast<const char*>(w0 + 4 * k), k * 2); // as in gemv_isa.h
    for (; j + 64 <= k; j += 64) {
        const __m512bh x0 = pairs(x + j), x1 = pairs(x + j + 32);
        a0 = dp(a0, pairs(w0 + j), x0);
        a1 = dp(a1, pairs(w1 + j), x0);
        a2 = dp(a2, pairs(w2 + j), x0);
        a3 = dp(a3, pairs(w3 + j), x0);
        inOrder(); // gemv_isa.h
        b0 = dp(b0, pairs(w0 + j + 32), x1);
        b1 = dp(b1, pairs(w1 + j + 32), x1);
        b2 = dp(b2, pairs(w2 + j + 32), x1);
        b3 = dp(b3, pairs(w3 + j + 32), x1);
    }
    for (; j < k; j += 32) {
        const int n = k - j < 32 ? int(k - j) : 32;
        const __m512bh x0 = pairsPart(x + j, n);
        a0 = dp(a0, pairsPart(w0 + j, n), x0);
        a1 = dp(a1, pairsPart(w1 + j, n), x0);
        a2 = dp(a2, pairsPart(w2 + j, n), x0);
        a3 = dp(a3, pairsPart(w3 + j, n), x0);
    }
    y[0] = _mm512_reduce_add_ps(_mm512_add_ps(a0, b0));
    y[1] = _mm512_reduce_add_ps(_mm512_add_ps(a1, b1));
    y[2] = _mm512_reduce_add_ps(_mm512_add_ps(a2, b2));
    y[3] = _mm512_reduce_add_ps(_mm512_add_ps(a3, b3));
}

// Eight rows, one cache line of each a step (fp32 rows8's pattern), each
// row hinted kBlockAhead bytes ahead where hints are on (gemv_isa.h).
void dp8(const uint16_t* w0, const uint16_t* x, int64_t k, int64_t ahead, float* y)
{
    const uint16_t *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k, *w4 = w3 + k, *w5 = w4 + k, *w6 = w5 + k, *w7 = w6 + k;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    prefetchRowStarts(reinterpret_cast<const char*>(w0 + 8 * k), k * 2, 8);
    const int64_t rowBytes = k * 2;
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        if (ahead > 0) {
            const char* line = reinterpret_cast<const char*>(w0 + j) + kBlockAhead;
            for (int r = 0; r < 8; ++r)
                prefetchL2(line + r * rowBytes);
        }
        const __m512bh x0 = pairs(x + j);
        a0 = dp(a0, pairs(w0 + j), x0);
        a1 = dp(a1, pairs(w1 + j), x0);
        a2 = dp(a2, pairs(w2 + j), x0);
        a3 = dp(a3, pairs(w3 + j), x0);
        a4 = dp(a4, pairs(w4 + j), x0);
        a5 = dp(a5, pairs(w5 + j), x0);
        a6 = dp(a6, pairs(w6 + j), x0);
        a7 = dp(a7, pairs(w7 + j), x0);
    }
    if (j < k) {
        const int n = int(k - j);
        const __m512bh x0 = pairsPart(x + j, n);
        a0 = dp(a0, pairsPart(w0 + j, n), x0);
        a1 = dp(a1, pairsPart(w1 + j, n), x0);
        a2 = dp(a2, pairsPart(w2 + j, n), x0);
        a3 = dp(a3, pairsPart(w3 + j, n), x0);
        a4 = dp(a4, pairsPart(w4 + j, n), x0);
        a5 = dp(a5, pairsPart(w5 + j, n), x0);
        a6 = dp(a6, pairsPart(w6 + j, n), x0);
        a7 = dp(a7, pairsPart(w7 + j, n), x0);
    }
    y[0] = _mm512_reduce_add_ps(a0);
    y[1] = _mm512_reduce_add_ps(a1);
    y[2] = _mm512_reduce_add_ps(a2);
    y[3] = _mm512_reduce_add_ps(a3);
    y[4] = _mm512_reduce_add_ps(a4);
    y[5] = _mm512_reduce_add_ps(a5);
    y[6] = _mm512_reduce_add_ps(a6);
    y[7] = _mm512_reduce_add_ps(a7);
}

void dp1(const uint16_t* w0, const uint16_t* x, int64_t k, int64_t ahead, float* y)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t j = 0;
    for (; j + 128 <= k; j += 128) {
        hintAhead<256>(w0 + j, ahead); // gemv_isa.h
        a0 = dp(a0, pairs(w0 + j), pairs(x + j));
        inOrder(); // each row's loads in address order (gemv_isa.h)
        a1 = dp(a1, pairs(w0 + j + 32), pairs(x + j + 32));
        inOrder();
        a2 = dp(a2, pairs(w0 + j + 64), pairs(x + j + 64));
        inOrder();
        a3 = dp(a3, pairs(w0 + j + 96), pairs(x + j + 96));
    }
    for (; j < k; j += 32) {
        const int n = k - j < 32 ? int(k - j) : 32;
        a0 = dp(a0, pairsPart(w0 + j, n), pairsPart(x + j, n));
    }
    y[0] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

// The dot-product kernel's rows (gemv_isa.h rowBlocks).
void bf16Dp(const void* w, const void* x, int64_t k, int64_t r0, int64_t r1, float* y, int64_t ahead)
{
    // Eight rows at a time only with hints: without them (AMD) four, as measured there.
    if (ahead > 0)
        rowBlocks<uint16_t, uint16_t, dp4, dp1, dp8>(w, x, k, r0, r1, y, ahead);
    else
        rowBlocks<uint16_t, uint16_t, dp4, dp1>(w, x, k, r0, r1, y, ahead);
}

} // namespace

namespace stowage::arch::rows {

const Kernels kAvx512 = {
    rowsOf<float>, rowsOf<Bf16>, rowsOf<F16>, bf16Dp, // f32, bf16, f16, bf16Dp
    accumulateRows<float>, accumulateRows<Bf16>, accumulateRows<F16>,
    scoresOfKind, ::softmaxWeights, siluMulOf, rotaryOf, rmsNormOf,
    widenAll<F16>, widenAll<Bf16>, nullptr, // widenF16, widenBf16, narrowF16
};

} // namespace stowage::arch::rows
