#pragma once
// The body of the widen-and-FMA row kernels, shared by gemv_avx2.cpp and
// gemv_avx512.cpp. Each of them defines `struct Isa` (vector type, lane count,
// loads that widen float / bf16 / fp16 to fp32, fma, sum) in an anonymous
// namespace and then includes this file, so every function here is compiled
// once per instruction set with that file's -m flags and has internal linkage
// (nothing compiled for AVX-512 can be picked by the linker for another caller).
//
// Eight or four rows at a time: independent accumulators named one by one
// (an array of them was kept in memory by GCC -O2, a chain through the stack
// that halved the speed), one load of x shared by the rows.
#include "gemv_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <limits>

namespace {

using stowage::arch::rows::Bf16;
using stowage::arch::rows::F16;

// A hint for the first two cache lines of each of the `rows` rows after the
// block at `next` (rows of `rowBytes`), given once per block. The hardware
// prefetchers stop at page boundaries, and a row of 1024 fp32 is a page:
// without the hint every block of four rows starts with four misses. One hint
// per line read (the earlier form) cost load slots: on Zen 4 it streamed
// 22-26 GB/s against 32-33 without it (docs/PERFORMANCE.md).
inline void prefetchRowStarts(const char* next, int64_t rowBytes, int rows = 4)
{
    for (int r = 0; r < rows; ++r) {
        _mm_prefetch(next + r * rowBytes, _MM_HINT_T0);
        _mm_prefetch(next + r * rowBytes + 64, _MM_HINT_T0);
    }
}

// Keeps the loads before it ahead of the loads after it (a compiler barrier;
// no instruction). Each row is one stream, and the prefetchers follow it
// when its loads come in address order: on Intel's Xeon with AMX
// (2026-12-04), GCC scheduled the bf16 dot-product loop's four loads of a
// row as offsets 0, 128, 64, 192, and that loop streamed bf16 weights 28%
// slower than the same instructions in address order (20.4 against
// 28.7 GB/s, two threads, 1 GiB on 2 MiB pages; decode 20.5 against 27.5
// tok/s). The order was GCC's choice, and it changed with unrelated edits.
inline void inOrder() { asm volatile("" ::: "memory"); }

// Hints for the cache lines `ahead` bytes past the `Bytes` bytes at `p` (one
// iteration's loads of a row), one prefetcht1 a line, into L2; nothing when
// `ahead` is 0. The one-row kernels give them (rows1 here, dp1 in
// gemv_avx512.cpp): one stream a core, which the L2 prefetcher alone
// followed with too few reads in flight. On Intel's Xeon with AMX
// (2026-12-05, bench_decode, each against its own run's bound), 8 KiB ahead:
// small bf16 decode 73% -> 95% of the bound, small fp16 74% -> 94-96%, the
// AVX2 kernels' fp16 64% -> 94-100%; small fp32 and 7B-layer bf16 about
// unchanged (docs/PERFORMANCE.md). The row-block kernels give none of
// these: eight streams at once keep more in flight, and with a hint a line
// 8 KiB ahead 7B-layer fp32 decoded 8% slower. Their 16-bit forms (rows8,
// dp8) hint each row a short way ahead instead (kBlockAhead).
//
// The hint is an asm statement: GCC 12 at -O2 deleted most _mm_prefetch
// calls under such a condition, silently (its control-dependent dead code
// elimination; -fno-tree-dce or -O3 kept them).
inline void prefetchL2(const char* p) { asm volatile("prefetcht1 %0" : : "m"(*p)); }

// How far ahead, in bytes, the row-block kernels hint each of their rows of
// 16-bit weights (rows8, dp8 in gemv_avx512.cpp), where hints are on
// (`ahead` > 0): one prefetcht1 a cache line a row. Streaming the mapped
// 7B-layer checkpoints (rows of 8 KiB, 2 MiB pages; Intel Xeon with AMX,
// 2026-12-05, medians of 15 passes against the bound's read loop), bf16
// eight rows at a time read 92% with hints 512 bytes ahead, 90% at 256,
// 89% at 1 KiB, 85% at 2 KiB and 84% without, against 84% one row at a
// time 8 KiB ahead; fp16 87% against 81%. In decode the gain was smaller:
// 7B-layer bf16 26.8-27.6 against 26.5-26.7 tok/s, fp16 26.8-27.2 against
// 26.6-27.0 (three alternating pairs). fp32's blocks stay without hints
// (they cost them 8%).
constexpr int64_t kBlockAhead = 512;

template <int Bytes>
inline void hintAhead(const void* p, int64_t ahead)
{
    static_assert(Bytes % 64 == 0, "whole cache lines an iteration");
    if (ahead == 0)
        return;
    const char* line = static_cast<const char*>(p) + ahead;
    for (int b = 0; b < Bytes; b += 64)
        prefetchL2(line + b);
}

template <class T>
void rows4(const T* w0, const float* x, int64_t k, int64_t, float* y)
{
    using V = typename Isa::V;
    constexpr int N = Isa::N;
    const T* w1 = w0 + k;
    const T* w2 = w1 + k;
    const T* w3 = w2 + k;
    V a0 = Isa::zero(), a1 = Isa::zero(), a2 = Isa::zero(), a3 = Isa::zero();
    V b0 = Isa::zero(), b1 = Isa::zero(), b2 = Isa::zero(), b3 = Isa::zero();
    int64_t j = 0;
    // The next four rows lie right after these (one block of 4k elements).
    prefetchRowStarts(reinterpret_cast<const char*>(w0 + 4 * k), k * int64_t(sizeof(T)));
    for (; j + 2 * N <= k; j += 2 * N) {
        const V x0 = Isa::load(x + j), x1 = Isa::load(x + j + N);
        a0 = Isa::fma(Isa::load(w0 + j), x0, a0);
        a1 = Isa::fma(Isa::load(w1 + j), x0, a1);
        a2 = Isa::fma(Isa::load(w2 + j), x0, a2);
        a3 = Isa::fma(Isa::load(w3 + j), x0, a3);
        inOrder();
        b0 = Isa::fma(Isa::load(w0 + j + N), x1, b0);
        b1 = Isa::fma(Isa::load(w1 + j + N), x1, b1);
        b2 = Isa::fma(Isa::load(w2 + j + N), x1, b2);
        b3 = Isa::fma(Isa::load(w3 + j + N), x1, b3);
    }
    for (; j < k; j += N) {
        const int n = k - j < N ? int(k - j) : N;
        const V x0 = Isa::loadPart(x + j, n);
        a0 = Isa::fma(Isa::loadPart(w0 + j, n), x0, a0);
        a1 = Isa::fma(Isa::loadPart(w1 + j, n), x0, a1);
        a2 = Isa::fma(Isa::loadPart(w2 + j, n), x0, a2);
        a3 = Isa::fma(Isa::loadPart(w3 + j, n), x0, a3);
    }
    y[0] = Isa::sum(Isa::add(a0, b0));
    y[1] = Isa::sum(Isa::add(a1, b1));
    y[2] = Isa::sum(Isa::add(a2, b2));
    y[3] = Isa::sum(Isa::add(a3, b3));
}

// Eight rows, one vector of columns per step (eight accumulators: few
// enough for AVX2's sixteen registers). Half the loads of x per weight byte
// of rows4; on Zen 4, fp16 rows of 4096 and 11008 streamed at 0.90-0.93 of a
// plain read against 0.81-0.87 four at a time, fp32 at 0.95-1.01 against
// 0.93-0.96 (medians of 40 interleaved passes, docs/PERFORMANCE.md).
template <class T>
void rows8(const T* w0, const float* x, int64_t k, int64_t ahead, float* y)
{
    using V = typename Isa::V;
    constexpr int N = Isa::N;
    const T *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k, *w4 = w3 + k, *w5 = w4 + k, *w6 = w5 + k, *w7 = w6 + k;
    V a0 = Isa::zero(), a1 = Isa::zero(), a2 = Isa::zero(), a3 = Isa::zero();
    V a4 = Isa::zero(), a5 = Isa::zero(), a6 = Isa::zero(), a7 = Isa::zero();
    prefetchRowStarts(reinterpret_cast<const char*>(w0 + 8 * k), k * int64_t(sizeof(T)), 8);
    const bool hints = sizeof(T) == 2 && ahead > 0;
    const int64_t rowBytes = k * int64_t(sizeof(T));
    int64_t j = 0;
    for (; j + N <= k; j += N) {
        if (hints && ((j * int64_t(sizeof(T))) & 63) == 0) { // once a cache line of each row
            const char* line = reinterpret_cast<const char*>(w0 + j) + kBlockAhead;
            for (int r = 0; r < 8; ++r)
                prefetchL2(line + r * rowBytes);
        }
        const V x0 = Isa::load(x + j);
        a0 = Isa::fma(Isa::load(w0 + j), x0, a0);
        a1 = Isa::fma(Isa::load(w1 + j), x0, a1);
        a2 = Isa::fma(Isa::load(w2 + j), x0, a2);
        a3 = Isa::fma(Isa::load(w3 + j), x0, a3);
        a4 = Isa::fma(Isa::load(w4 + j), x0, a4);
        a5 = Isa::fma(Isa::load(w5 + j), x0, a5);
        a6 = Isa::fma(Isa::load(w6 + j), x0, a6);
        a7 = Isa::fma(Isa::load(w7 + j), x0, a7);
    }
    if (j < k) {
        const int n = int(k - j);
        const V x0 = Isa::loadPart(x + j, n);
        a0 = Isa::fma(Isa::loadPart(w0 + j, n), x0, a0);
        a1 = Isa::fma(Isa::loadPart(w1 + j, n), x0, a1);
        a2 = Isa::fma(Isa::loadPart(w2 + j, n), x0, a2);
        a3 = Isa::fma(Isa::loadPart(w3 + j, n), x0, a3);
        a4 = Isa::fma(Isa::loadPart(w4 + j, n), x0, a4);
        a5 = Isa::fma(Isa::loadPart(w5 + j, n), x0, a5);
        a6 = Isa::fma(Isa::loadPart(w6 + j, n), x0, a6);
        a7 = Isa::fma(Isa::loadPart(w7 + j, n), x0, a7);
    }
    y[0] = Isa::sum(a0);
    y[1] = Isa::sum(a1);
    y[2] = Isa::sum(a2);
    y[3] = Isa::sum(a3);
    y[4] = Isa::sum(a4);
    y[5] = Isa::sum(a5);
    y[6] = Isa::sum(a6);
    y[7] = Isa::sum(a7);
}

template <class T>
void rows1(const T* w0, const float* x, int64_t k, int64_t ahead, float* y)
{
    using V = typename Isa::V;
    constexpr int N = Isa::N;
    V a0 = Isa::zero(), a1 = Isa::zero(), a2 = Isa::zero(), a3 = Isa::zero();
    int64_t j = 0;
    for (; j + 4 * N <= k; j += 4 * N) {
        hintAhead<4 * N * int(sizeof(T))>(w0 + j, ahead);
        a0 = Isa::fma(Isa::load(w0 + j), Isa::load(x + j), a0);
        inOrder();
        a1 = Isa::fma(Isa::load(w0 + j + N), Isa::load(x + j + N), a1);
        inOrder();
        a2 = Isa::fma(Isa::load(w0 + j + 2 * N), Isa::load(x + j + 2 * N), a2);
        inOrder();
        a3 = Isa::fma(Isa::load(w0 + j + 3 * N), Isa::load(x + j + 3 * N), a3);
    }
    for (; j < k; j += N) {
        const int n = k - j < N ? int(k - j) : N;
        a0 = Isa::fma(Isa::loadPart(w0 + j, n), Isa::loadPart(x + j, n), a0);
    }
    y[0] = Isa::sum(Isa::add(Isa::add(a0, a1), Isa::add(a2, a3)));
}

// Rows [r0, r1) of W [n, k] (also for gemv_avx512.cpp's dot-product kernel),
// one at a time or in blocks of eight (four for the last rows of a range;
// the bf16 dot-product kernel's eight-row form only with hints: without
// them it decoded no faster). One row at a time, consecutive rows are one sequential stream,
// which the prefetchers follow to the chunk's end; a block reads eight
// streams a row apart and shares each load of x between them.
//
// Without read-ahead hints (AMD; Zen 4's measurements): one at a time where
// x is at most 8 KiB. With short rows each of a block's streams is cut off
// after a row: bf16 rows of 1024 streamed at 22-26 GB/s four at a time
// against 30-42 one at a time. Longer x goes in blocks: an fp32 x of 4096
// (16 KiB) streamed slower one row at a time, and the MLP down projections'
// x (22-44 KiB) would come from L2 once per row (28-32 GB/s four at a time
// against 24 one at a time, k 11008).
//
// With them (hintAhead; Intel's Xeon with AMX, 2026-12-05, decode against
// the same run's bound): 16-bit rows of W under 8 KiB one at a time,
// whatever x's size: the small shape's fp16 and bf16 rows of 2 KiB at
// 83-84% against 55-56% in blocks (then without hints; with kBlockAhead's
// they streamed 11-17% slower than one at a time). Rows of 8 KiB and more
// in blocks of eight with kBlockAhead's hints: 7B-layer's rows of 8 KiB
// streamed at 87-92% of the bound against 81-84% one at a time (without
// hints, in blocks of four, they had decoded at 73-77%). fp32 rows of 4 KiB and more
// in blocks: the small shape's (4 KiB) at 81-82% against 77-79% one at a
// time, 7B-layer's (16 KiB) at 89-90% against 83-85%.
template <class T, class X, void (*Four)(const T*, const X*, int64_t, int64_t, float*),
          void (*One)(const T*, const X*, int64_t, int64_t, float*),
          void (*Eight)(const T*, const X*, int64_t, int64_t, float*) = nullptr>
void rowBlocks(const void* w, const void* x, int64_t k, int64_t r0, int64_t r1, float* y, int64_t ahead)
{
    const T* wp = static_cast<const T*>(w);
    const X* xp = static_cast<const X*>(x);
    const int64_t rowBytes = k * int64_t(sizeof(T));
    const bool oneAtATime = ahead == 0           ? k * int64_t(sizeof(X)) <= (int64_t(8) << 10)
                            : sizeof(T) == 2 ? rowBytes < (int64_t(8) << 10)
                                             : rowBytes < (int64_t(4) << 10);
    int64_t r = r0;
    if (!oneAtATime) {
        if constexpr (Eight != nullptr)
            for (; r + 8 <= r1; r += 8)
                Eight(wp + r * k, xp, k, ahead, y + r);
        for (; r + 4 <= r1; r += 4)
            Four(wp + r * k, xp, k, ahead, y + r);
    }
    for (; r < r1; ++r)
        One(wp + r * k, xp, k, ahead, y + r);
}

template <class T>
void rowsOf(const void* w, const void* x, int64_t k, int64_t r0, int64_t r1, float* y, int64_t ahead)
{
    rowBlocks<T, float, rows4<T>, rows1<T>, rows8<T>>(w, x, k, r0, r1, y, ahead);
}

// y[0, k) += sum over rows r < n of p[r] W[r, :], for W of n rows of k
// elements one after another and k a multiple of Isa::N: attention's values
// (W a head's cached V, p its softmax weights) and GPT-2's Conv1D weights
// [in, out] times x. W is read once, in order, four rows at a time; y stays
// in L1 (k floats).
template <class T>
void accumulateRows(const void* w, const float* p, int64_t k, int64_t n, float* y)
{
    using V = typename Isa::V;
    constexpr int N = Isa::N;
    const T* wp = static_cast<const T*>(w);
    int64_t r = 0;
    for (; r + 4 <= n; r += 4) {
        const T* w0 = wp + r * k;
        const V s0 = Isa::set(p[r]), s1 = Isa::set(p[r + 1]), s2 = Isa::set(p[r + 2]), s3 = Isa::set(p[r + 3]);
        for (int64_t j = 0; j < k; j += N) {
            V a = Isa::fma(Isa::load(w0 + j), s0, Isa::load(y + j));
            a = Isa::fma(Isa::load(w0 + k + j), s1, a);
            a = Isa::fma(Isa::load(w0 + 2 * k + j), s2, a);
            Isa::store(y + j, Isa::fma(Isa::load(w0 + 3 * k + j), s3, a));
        }
    }
    for (; r < n; ++r) {
        const V s = Isa::set(p[r]);
        for (int64_t j = 0; j < k; j += N)
            Isa::store(y + j, Isa::fma(Isa::load(wp + r * k + j), s, Isa::load(y + j)));
    }
}

// One row of K times q, as a vector of partial sums (dim a multiple of N).
template <class T>
inline typename Isa::V rowProducts(const T* k, const float* q, int64_t dim)
{
    typename Isa::V a = Isa::mul(Isa::load(k), Isa::load(q));
    for (int64_t d = Isa::N; d < dim; d += Isa::N)
        a = Isa::fma(Isa::load(k + d), Isa::load(q + d), a);
    return a;
}

// The 2^Level rows at k (dim elements each), their partial sums folded
// into one vector (Isa::fold), a pair at a time.
template <class T, int Level>
inline typename Isa::V foldedRows(const T* k, const float* q, int64_t dim)
{
    if constexpr (Level == 0)
        return rowProducts(k, q, dim);
    else
        return Isa::template fold<Level>(foldedRows<T, Level - 1>(k, q, dim),
                                         foldedRows<T, Level - 1>(k + (int64_t(1) << (Level - 1)) * dim, q, dim));
}

// out[r] = q . K[r] for n rows of K, dim elements each one after another
// (dim a multiple of N): attention's scores for one head. N rows at a time,
// their sums folded into one vector and stored at once; one row at a time
// (the GEMV's one-row kernel) spent most of a short row folding its vector
// into one number: 16 heads of 64 over 250 positions took 28 us hot, two
// threads.
template <class T>
void scoresOf(const void* k, const float* q, int64_t dim, int64_t n, float* out)
{
    const T* kp = static_cast<const T*>(k);
    int64_t r = 0;
    for (; r + Isa::N <= n; r += Isa::N)
        Isa::store(out + r, Isa::ordered(foldedRows<T, Isa::kFolds>(kp + r * dim, q, dim)));
    for (; r < n; ++r)
        out[r] = Isa::sum(rowProducts(kp + r * dim, q, dim));
}

// e^x one vector at a time: x = n ln2 + r with |r| <= ln2 / 2, e^r by
// Cephes' expf polynomial, times 2^n built in the exponent bits. x is held
// to [-87.3, 88.7]: below, where e^x is under 2^-126 (the smallest normal
// float), it gives about 2^-126 rather than a subnormal or 0, nothing
// softmax's sums or silu can tell; above, about 2^127 rather than infinity.
inline typename Isa::V expClamped(typename Isa::V x)
{
    using V = typename Isa::V;
    x = Isa::min(Isa::max(x, Isa::set(-87.33654f)), Isa::set(88.72283f));
    const V n = Isa::roundNearest(Isa::mul(x, Isa::set(1.44269504088896341f)));
    V r = Isa::fma(n, Isa::set(-0.693359375f), x); // ln 2 in two parts, so n ln2 is exact enough
    r = Isa::fma(n, Isa::set(2.12194440e-4f), r);
    V e = Isa::set(1.9875691500e-4f);
    e = Isa::fma(e, r, Isa::set(1.3981999507e-3f));
    e = Isa::fma(e, r, Isa::set(8.3334519073e-3f));
    e = Isa::fma(e, r, Isa::set(4.1665795894e-2f));
    e = Isa::fma(e, r, Isa::set(1.6666665459e-1f));
    e = Isa::fma(e, r, Isa::set(5.0000001201e-1f));
    e = Isa::fma(e, Isa::mul(r, r), Isa::add(r, Isa::set(1.0f)));
    return Isa::mul(e, Isa::pow2(n));
}

// v rounded to bf16 (to nearest, ties to even; finite v) and back, as
// c10::BFloat16(v) does.
inline float roundedBf16(float v)
{
    uint32_t b;
    std::memcpy(&b, &v, 4);
    b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&v, &b, 4);
    return v;
}
inline float roundedF16(float v) { return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT)); }

// rows::SoftmaxFn (gemv_rows.h): whole vectors here, the last n % N scores
// one at a time with expf.
inline float softmaxWeights(float* p, int64_t n, float scale, int round)
{
    using V = typename Isa::V;
    constexpr int N = Isa::N;
    const V s = Isa::set(scale);
    V top = Isa::set(-std::numeric_limits<float>::infinity());
    int64_t j = 0;
    for (; j + N <= n; j += N) {
        const V v = Isa::mul(Isa::load(p + j), s);
        Isa::store(p + j, v);
        top = Isa::max(top, v);
    }
    float most = Isa::maxAll(top);
    for (int64_t i = j; i < n; ++i)
        most = std::max(most, p[i] *= scale);
    const V m = Isa::set(most);
    V sum = Isa::zero();
    for (j = 0; j + N <= n; j += N) {
        const V e = expClamped(Isa::sub(Isa::load(p + j), m));
        sum = Isa::add(sum, e);
        Isa::store(p + j, round == 1 ? Isa::roundedBf16(e) : round == 2 ? Isa::roundedF16(e) : e);
    }
    float total = Isa::sum(sum);
    for (int64_t i = j; i < n; ++i) {
        const float e = std::exp(p[i] - most);
        total += e;
        p[i] = round == 1 ? roundedBf16(e) : round == 2 ? roundedF16(e) : e;
    }
    return total;
}

// One element widened to fp32, and an fp32 value (rounded to T already)
// stored as T: the scalar tails of the loops below.
inline float widened(float v) { return v; }
inline float widened(Bf16 v)
{
    const uint32_t bits = uint32_t(v.bits) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
inline float widened(F16 v) { return _cvtsh_ss(v.bits); }
inline void put(float* p, float v) { *p = v; }
inline void put(Bf16* p, float v)
{
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    p->bits = uint16_t(bits >> 16);
}
// v as T stores it (bf16: rounded), still in fp32.
template <class T>
inline float asStored(float v)
{
    return sizeof(T) == 2 ? roundedBf16(v) : v;
}
template <class T>
inline typename Isa::V asStored(typename Isa::V v)
{
    return sizeof(T) == 2 ? Isa::roundedBf16(v) : v;
}
inline void storeAs(float* p, typename Isa::V v) { Isa::store(p, v); }
inline void storeAs(Bf16* p, typename Isa::V v) { Isa::storeBf16(p, v); }

// rows::SiluMulFn (gemv_rows.h) for fp32 (T float) or bf16 (T Bf16): for
// bf16 each of x / (1 + exp(-x)) rounded, and the product, as LibTorch's
// bf16 vectors do.
template <class T>
void siluTimes(const void* a, const void* b, void* out, int64_t n)
{
    using V = typename Isa::V;
    constexpr int N = Isa::N;
    const T* ap = static_cast<const T*>(a);
    const T* bp = static_cast<const T*>(b);
    T* op = static_cast<T*>(out);
    const V one = Isa::set(1.0f);
    int64_t j = 0;
    for (; j + N <= n; j += N) {
        const V x = Isa::load(ap + j);
        const V e = asStored<T>(expClamped(Isa::sub(Isa::zero(), x)));
        const V s = asStored<T>(Isa::div(x, asStored<T>(Isa::add(one, e))));
        storeAs(op + j, asStored<T>(Isa::mul(s, Isa::load(bp + j))));
    }
    for (; j < n; ++j) {
        const float x = widened(ap[j]);
        const float s = asStored<T>(x / asStored<T>(1.0f + asStored<T>(std::exp(-x))));
        put(op + j, asStored<T>(s * widened(bp[j])));
    }
}

// rows::RotaryFn for T float or Bf16.
template <class T>
void rotateAll(const void* q, int64_t headStride, int64_t heads, int64_t dim, const void* cos, const void* sin,
               void* out)
{
    using V = typename Isa::V;
    constexpr int N = Isa::N;
    const int64_t half = dim / 2;
    const T* c = static_cast<const T*>(cos);
    const T* s = static_cast<const T*>(sin);
    for (int64_t h = 0; h < heads; ++h) {
        const T* a = static_cast<const T*>(q) + h * headStride;
        T* o = static_cast<T*>(out) + h * dim;
        int64_t i = 0;
        for (; i + N <= half; i += N) {
            const V lo = Isa::load(a + i), hi = Isa::load(a + i + half);
            const V turnedLo = asStored<T>(Isa::mul(Isa::sub(Isa::zero(), hi), Isa::load(s + i)));
            const V turnedHi = asStored<T>(Isa::mul(lo, Isa::load(s + i + half)));
            storeAs(o + i, asStored<T>(Isa::add(asStored<T>(Isa::mul(lo, Isa::load(c + i))), turnedLo)));
            storeAs(o + i + half,
                    asStored<T>(Isa::add(asStored<T>(Isa::mul(hi, Isa::load(c + i + half))), turnedHi)));
        }
        for (; i < half; ++i) {
            const float lo = widened(a[i]), hi = widened(a[i + half]);
            put(o + i, asStored<T>(asStored<T>(lo * widened(c[i])) + asStored<T>(-hi * widened(s[i]))));
            put(o + i + half,
                asStored<T>(asStored<T>(hi * widened(c[i + half])) + asStored<T>(lo * widened(s[i + half]))));
        }
    }
}

// rows::RmsNormFn for X float with W float or F16, or both Bf16.
template <class X, class W>
void rmsNormAll(const void* x, const void* w, int64_t rows, int64_t n, float eps, void* out)
{
    using V = typename Isa::V;
    constexpr int N = Isa::N;
    const W* wp = static_cast<const W*>(w);
    for (int64_t r = 0; r < rows; ++r) {
        const X* xp = static_cast<const X*>(x) + r * n;
        X* op = static_cast<X*>(out) + r * n;
        V a0 = Isa::zero(), a1 = Isa::zero();
        int64_t j = 0;
        for (; j + 2 * N <= n; j += 2 * N) {
            const V v0 = Isa::load(xp + j), v1 = Isa::load(xp + j + N);
            a0 = Isa::fma(v0, v0, a0);
            a1 = Isa::fma(v1, v1, a1);
        }
        float squares = Isa::sum(Isa::add(a0, a1));
        for (; j < n; ++j)
            squares += widened(xp[j]) * widened(xp[j]);
        const float scale = 1.0f / std::sqrt(squares / float(n) + eps);
        const V sv = Isa::set(scale);
        for (j = 0; j + N <= n; j += N)
            storeAs(op + j, asStored<X>(Isa::mul(Isa::load(wp + j), asStored<X>(Isa::mul(Isa::load(xp + j), sv)))));
        for (; j < n; ++j)
            put(op + j, asStored<X>(widened(wp[j]) * asStored<X>(widened(xp[j]) * scale)));
    }
}

// The dtype dispatch of the kernel tables' entries (gemv_rows.h Kernels), for both instruction sets.
inline void scoresOfKind(const void* k, int kind, const float* q, int64_t dim, int64_t n, float* out)
{
    kind == 0 ? scoresOf<float>(k, q, dim, n, out) : kind == 1 ? scoresOf<Bf16>(k, q, dim, n, out)
                                                               : scoresOf<F16>(k, q, dim, n, out);
}
inline void siluMulOf(const void* a, const void* b, void* out, int64_t n, bool bf16)
{
    bf16 ? siluTimes<Bf16>(a, b, out, n) : siluTimes<float>(a, b, out, n);
}
inline void rotaryOf(const void* q, int64_t headStride, int64_t heads, int64_t dim, const void* cos, const void* sin,
                     void* out, bool bf16)
{
    bf16 ? rotateAll<Bf16>(q, headStride, heads, dim, cos, sin, out)
         : rotateAll<float>(q, headStride, heads, dim, cos, sin, out);
}
inline void rmsNormOf(const void* x, const void* w, int64_t rows, int64_t n, float eps, void* out, int kind)
{
    if (kind == 2)
        rmsNormAll<Bf16, Bf16>(x, w, rows, n, eps, out);
    else if (kind == 1)
        rmsNormAll<float, F16>(x, w, rows, n, eps, out);
    else
        rmsNormAll<float, float>(x, w, rows, n, eps, out);
}

template <class T>
void widenAll(const void* src, float* dst, int64_t n)
{
    const T* p = static_cast<const T*>(src);
    int64_t i = 0;
    for (; i + Isa::N <= n; i += Isa::N)
        Isa::store(dst + i, Isa::load(p + i));
    for (; i < n; ++i)
        dst[i] = Isa::sum(Isa::loadPart(p + i, 1));
}

} // namespace
