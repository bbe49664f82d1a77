// AVX2 + FMA + F16C row kernels (compiled with -mavx2 -mfma -mf16c; called
// only when the CPU has them, see gemv.cpp). Tails go through a zero-padded
// copy, so no load reads past a row's end.
#include "gemv_rows.h"

#include <immintrin.h>

namespace {

using stowage::arch::rows::Bf16;
using stowage::arch::rows::F16;

struct Isa {
    using V = __m256;
    static constexpr int N = 8;
    static V zero() { return _mm256_setzero_ps(); }
    static V set(float v) { return _mm256_set1_ps(v); }
    static V add(V a, V b) { return _mm256_add_ps(a, b); }
    static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static float sum(V v)
    {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
    static V max(V a, V b) { return _mm256_max_ps(a, b); }
    static V min(V a, V b) { return _mm256_min_ps(a, b); }
    static V div(V a, V b) { return _mm256_div_ps(a, b); }
    // v already rounded to bf16 (roundedBf16): its upper halves stored.
    static void storeBf16(Bf16* p, V v)
    {
        const __m256i hi = _mm256_srli_epi32(_mm256_castps_si256(v), 16); // eight values < 2^16
        const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
    }
    static float maxAll(V v)
    {
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        return _mm_cvtss_f32(m);
    }
    static V roundNearest(V v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    // Two vectors of partial sums folded into one (gemv_isa.h scoresOf): at
    // level 1 each row's halves added (a's in the low 128 bits, b's in the
    // high), then pairs of neighbours within each 128 bits; kFolds levels
    // leave the N rows' sums in the order that `ordered` undoes.
    static constexpr int kFolds = 3;
    template <int Level>
    static V fold(V a, V b)
    {
        if constexpr (Level == 1)
            return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
        else
            return _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xdd));
    }
    static V ordered(V v) { return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)); }
    // 2^n for whole n in [-126, 127], in the exponent bits.
    static V pow2(V n)
    {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
    }
    // Rounded to bf16 / fp16 (to nearest, ties to even) and widened back.
    static V roundedBf16(V v)
    {
        const __m256i b = _mm256_castps_si256(v);
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
        const __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), odd);
        return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(int(0xffff0000u))));
    }
    static V roundedF16(V v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
    static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
    static V load(const float* p) { return _mm256_loadu_ps(p); }
    static V load(const Bf16* p)
    {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    static V load(const F16* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    // The first n (1..8) elements, the rest zero.
    template <class T>
    static V loadPart(const T* p, int n)
    {
        T buf[N] = {};
        for (int i = 0; i < n; ++i)
            buf[i] = p[i];
        return load(buf);
    }
};

} // namespace

#include "gemv_isa.h"

namespace {

// n fp32 rounded to fp16 by F16C (gemv_rows.h NarrowFn).
void narrowF16(const float* src, void* dst, int64_t n)
{
    auto* out = static_cast<uint16_t*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i)
        out[i] = uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(src[i]), _MM_FROUND_TO_NEAREST_INT), 0));
}

} // namespace

namespace stowage::arch::rows {

const Kernels kAvx2 = {
    rowsOf<float>, rowsOf<Bf16>, rowsOf<F16>, nullptr, // f32, bf16, f16, bf16Dp
    accumulateRows<float>, accumulateRows<Bf16>, accumulateRows<F16>,
    scoresOfKind, ::softmaxWeights, siluMulOf, rotaryOf, rmsNormOf,
    widenAll<F16>, widenAll<Bf16>, narrowF16, // widenF16, widenBf16, narrowF16
};

} // namespace stowage::arch::rows
