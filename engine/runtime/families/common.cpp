#include "runner.h"

#include "gemv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace stowage::arch {

UnitScope::UnitScope(WeightStore& store, const std::string& unit, at::Tensor& x)
    : m_store(store), m_unit(unit), m_prefix(unit.empty() ? "" : unit + "."),
      m_device(store.unitDevice(unit).torch), m_t0(0)
{
    m_store.enter(unit);
    m_t0 = m_store.telemetry().now();
    try {
        if (x.defined() && x.device() != m_device)
            x = x.to(m_device); // inputs follow the module, as Accelerate's hooks move them
    } catch (...) {
        m_store.leave(unit); // the destructor will not run for a half-built scope
        throw;
    }
}

UnitScope::~UnitScope()
{
    Telemetry& t = m_store.telemetry();
    t.event({m_t0, t.now(), TraceKind::Compute, m_unit, {}, m_store.unitDevice(m_unit).label(), 0});
    m_store.leave(m_unit);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale, int64_t window)
{
    if (q.size(2) == 1) { // decoding: the engine's kernel where it applies, over the window's keys
        const int64_t S = k.size(2), n = window > 0 ? std::min(S, window) : S;
        at::Tensor o = attendOne(q, k.narrow(2, S - n, n), v.narrow(2, S - n, n), scale);
        if (o.defined())
            return o;
    }
    const at::Tensor kk = repeatKv(k, q), vv = repeatKv(v, q);
    at::Tensor scores = at::matmul(q, kk.transpose(-1, -2)) * scale;
    const int64_t T = q.size(2), S = kk.size(2);
    // position i of the new block sees cached keys and new keys up to itself (and after i - window)
    if (T > 1 || (window > 0 && S > window))
        scores = scores.masked_fill(hiddenKeys(T, S, window, q.device()), -std::numeric_limits<float>::infinity());
    at::Tensor probs = at::softmax(scores.to(at::kFloat), -1).to(q.scalar_type());
    return at::matmul(probs, vv);
}

at::Tensor repeatKv(const at::Tensor& kv, const at::Tensor& q)
{
    at::Tensor out = kv.to(q.scalar_type());
    const int64_t heads = q.size(1), kvHeads = kv.size(1);
    return heads == kvHeads ? out : out.repeat_interleave(heads / kvHeads, 1);
}

at::Tensor hiddenKeys(int64_t T, int64_t S, int64_t window, at::Device device)
{
    const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
    const at::Tensor qpos = at::arange(S - T, S, opts).unsqueeze(1), kpos = at::arange(0, S, opts).unsqueeze(0);
    at::Tensor hidden = kpos > qpos;
    return window > 0 ? hidden.logical_or(kpos <= qpos - window) : hidden;
}

std::vector<at::Tensor> qkvProjections(const UnitScope& u, const at::Tensor& x, bool bias)
{
    std::vector<at::Tensor> ws, bs;
    for (const char* p : {"q_proj", "k_proj", "v_proj"}) {
        ws.push_back(u.w(std::string("self_attn.") + p + ".weight"));
        if (bias)
            bs.push_back(u.w(std::string("self_attn.") + p + ".bias"));
    }
    return denseAll(x, ws, bs);
}

namespace {
// A small weight (norm, bias) held in another dtype than the activations
// (fp16 on the CPU, weightstore.h) is widened for the call.
at::Tensor like(const at::Tensor& w, const at::Tensor& x)
{
    return w.defined() && w.scalar_type() != x.scalar_type() ? w.to(x.scalar_type()) : w;
}
bool gemvFits(const at::Tensor& x, const at::Tensor& w)
{
    const auto wt = w.scalar_type(), xt = x.scalar_type();
    return x.dim() == 2 && x.size(0) == 1 && w.is_cpu() && w.dim() == 2 && w.is_contiguous() &&
           (xt == wt || xt == at::kFloat) && (wt == at::kFloat || wt == at::kBFloat16 || wt == at::kHalf);
}

// x [T, in] times a large weight held narrower than x: widened a block of
// ~8 MiB at a time into one reused buffer, each block multiplied as it comes.
// Widening the whole matrix per call allocated its full fp32 size every
// call (prefill ran at a sixth of fp32's speed here, most of it in page
// faults). `inOut`: W is [in, out] (Conv1D), blocks are its columns.
at::Tensor widenedProduct(const at::Tensor& x, const at::Tensor& w, bool inOut)
{
    const int64_t in = inOut ? w.size(0) : w.size(1), out = inOut ? w.size(1) : w.size(0);
    const int64_t block = std::max<int64_t>(16, (int64_t(8) << 20) / (4 * std::max<int64_t>(1, in)));
    thread_local at::Tensor scratch;
    if (!scratch.defined() || scratch.numel() < block * in || scratch.scalar_type() != x.scalar_type())
        scratch = at::empty({block * in}, x.options());
    at::Tensor y = at::empty({x.size(0), out}, x.options());
    for (int64_t o = 0; o < out; o += block) {
        const int64_t n = std::min(block, out - o);
        at::Tensor part = inOut ? w.narrow(1, o, n) : w.narrow(0, o, n);
        at::Tensor wide = scratch.narrow(0, 0, n * in).view(inOut ? at::IntArrayRef{in, n} : at::IntArrayRef{n, in});
        if (inOut)
            wide.copy_(part);
        else
            widenInto(part, wide); // whole rows: contiguous
        y.narrow(1, o, n).copy_(at::mm(x, inOut ? wide : wide.t()));
    }
    return y;
}

// What LibTorch rounds to at each step, for the loops below.
template <class T>
float stored(float v)
{
    return float(T(v));
}

template <class X, class W>
void rmsNormRows(const X* x, const W* w, int64_t rows, int64_t n, float eps, X* out)
{
    for (int64_t r = 0; r < rows; ++r, x += n, out += n) {
        double squares = 0;
        for (int64_t i = 0; i < n; ++i)
            squares += double(float(x[i])) * double(float(x[i]));
        const float scale = 1.0f / std::sqrt(float(squares / double(n)) + eps);
        for (int64_t i = 0; i < n; ++i)
            out[i] = X(float(w[i]) * stored<X>(float(x[i]) * scale));
    }
}

template <class T>
void rotateHeads(const T* q, int64_t headStride, int64_t heads, int64_t dim, const T* cos, const T* sin, T* out)
{
    const int64_t half = dim / 2;
    for (int64_t h = 0; h < heads; ++h, q += headStride, out += dim)
        for (int64_t i = 0; i < dim; ++i) {
            const float turned = i < half ? -float(q[i + half]) : float(q[i - half]);
            out[i] = T(stored<T>(float(q[i]) * float(cos[i])) + stored<T>(turned * float(sin[i])));
        }
}

// Positions [at, at + T) of a contiguous cache buffer [B, KV, capacity, D]
// set from x [B, KV, T, D] (any strides, rows of D contiguous), on the CPU:
// a copy per head and position, or a conversion where the cache keeps fp16
// of fp32 x (LayerCache::storeAs), rounded as Tensor::to does. The two
// copy_ calls on strided views it replaces took 47-52 us a layer per decode
// step, this 25-26 us, most of it first touches of the cache's pages (fp32
// small benchmark model, Zen 4); the two .to(kHalf) of an fp16 model's keys
// and values before it another 11 us (Intel Xeon with AMX).
bool appendRows(at::Tensor& buf, int64_t at, const at::Tensor& x)
{
    const at::ScalarType bt = buf.scalar_type(), xt = x.scalar_type();
    if (!buf.is_cpu() || !x.is_cpu() || !buf.is_contiguous() || (bt != xt && !(bt == at::kHalf && xt == at::kFloat)) ||
        x.dim() != 4 || x.stride(3) != 1 || x.size(0) != buf.size(0) || x.size(1) != buf.size(1) ||
        x.size(3) != buf.size(3) || at + x.size(2) > buf.size(2))
        return false;
    const int64_t es = int64_t(x.element_size()), dim = x.size(3), rowBytes = dim * int64_t(buf.element_size());
    const char* src = static_cast<const char*>(x.data_ptr());
    char* dst = static_cast<char*>(buf.data_ptr());
    for (int64_t b = 0; b < x.size(0); ++b)
        for (int64_t h = 0; h < x.size(1); ++h)
            for (int64_t t = 0; t < x.size(2); ++t) {
                char* to = dst + (((b * buf.size(1) + h) * buf.size(2)) + at + t) * rowBytes;
                const char* from = src + (b * x.stride(0) + h * x.stride(1) + t * x.stride(2)) * es;
                if (bt == xt)
                    std::memcpy(to, from, size_t(rowBytes));
                else
                    narrowToHalf(reinterpret_cast<const float*>(from), to, dim);
            }
    return true;
}

at::Tensor rotateHalf(const at::Tensor& x)
{
    auto halves = x.chunk(2, -1);
    return at::cat({-halves[1], halves[0]}, -1);
}

} // namespace

at::Tensor dense(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b)
{
    // One row on the CPU is a matrix-vector product (gemv.h): the engine's
    // kernel for this CPU, else at::mv.
    if (gemvFits(x, w)) {
        at::Tensor y = gemvAll({w}, x)[0];
        return b.defined() ? y + like(b, y) : y;
    }
    if (w.scalar_type() != x.scalar_type() && x.dim() == 2) {
        at::Tensor y = widenedProduct(x, w, false);
        return b.defined() ? y + like(b, y) : y;
    }
    return b.defined() ? at::linear(x, like(w, x), like(b, x)) : at::linear(x, like(w, x));
}

std::vector<at::Tensor> denseAll(const at::Tensor& x, const std::vector<at::Tensor>& ws,
                                 const std::vector<at::Tensor>& bs)
{
    bool together = ws.size() > 1 && ws.size() <= kGemvMatrices;
    for (const at::Tensor& w : ws)
        together = together && gemvFits(x, w) && w.scalar_type() == ws[0].scalar_type();
    std::vector<at::Tensor> ys;
    if (!together) {
        for (size_t i = 0; i < ws.size(); ++i)
            ys.push_back(dense(x, ws[i], i < bs.size() ? bs[i] : at::Tensor()));
        return ys;
    }
    ys = gemvAll(ws, x);
    for (size_t i = 0; i < ys.size() && i < bs.size(); ++i)
        if (bs[i].defined())
            ys[i] = ys[i] + like(bs[i], ys[i]);
    return ys;
}

at::Tensor addDense(const at::Tensor& h, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b)
{
    if (!b.defined() && gemvFits(x, w) && h.is_cpu() && h.is_contiguous() && h.scalar_type() == x.scalar_type() &&
        h.dim() == 2 && h.size(0) == 1 && h.size(1) == w.size(0))
        return gemvAll({w}, x, {{h}, false})[0];
    return h + dense(x, w, b);
}

at::Tensor logits(const at::Tensor& x, const at::Tensor& w)
{
    if (gemvFits(x, w))
        return gemvAll({w}, x, {{}, true})[0];
    return dense(x, w).to(at::kFloat).cpu();
}

at::Tensor denseInOut(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b)
{
    // W is [in, out]. One row on the CPU: W^T x streamed by the engine's
    // kernel (LibTorch widened fp16 W whole per token, and its fp32 mv ran
    // OpenBLAS's threads beside ours).
    if (x.dim() == 2 && x.size(0) == 1 && w.is_cpu()) {
        at::Tensor y = gemvT(w, x[0]);
        if (y.defined())
            return (y + like(b, y)).unsqueeze(0);
    }
    if (w.scalar_type() != x.scalar_type() && x.dim() == 2)
        return widenedProduct(x, w, true) + like(b, x);
    if (x.dim() == 2 && x.size(0) == 1 && w.is_cpu())
        return (at::mv(w.t(), x[0]) + b).unsqueeze(0);
    return at::addmm(b, x, w);
}

at::Tensor layerNorm(const at::Tensor& x, int64_t n, const at::Tensor& w, const at::Tensor& b, double eps)
{
    return at::layer_norm(x, {n}, like(w, x), like(b, x), eps);
}

at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& w, double eps)
{
    const at::ScalarType xt = x.scalar_type(), wt = w.scalar_type();
    const int64_t n = x.size(-1);
    if (x.is_cpu() && w.is_cpu() && x.is_contiguous() && w.is_contiguous() && w.numel() == n &&
        ((xt == at::kFloat && (wt == at::kFloat || wt == at::kHalf)) || (xt == at::kBFloat16 && wt == xt))) {
        at::Tensor out = at::empty_like(x);
        const int64_t rows = x.numel() / n;
        if (const rows::RmsNormFn f = rmsNormKernel())
            f(x.data_ptr(), w.data_ptr(), rows, n, float(eps), out.data_ptr(),
              xt == at::kBFloat16 ? 2 : wt == at::kHalf ? 1 : 0);
        else if (xt == at::kBFloat16)
            rmsNormRows(x.data_ptr<at::BFloat16>(), w.data_ptr<at::BFloat16>(), rows, n, float(eps),
                        out.data_ptr<at::BFloat16>());
        else if (wt == at::kHalf)
            rmsNormRows(x.data_ptr<float>(), w.data_ptr<at::Half>(), rows, n, float(eps), out.data_ptr<float>());
        else
            rmsNormRows(x.data_ptr<float>(), w.data_ptr<float>(), rows, n, float(eps), out.data_ptr<float>());
        return out;
    }
    at::Tensor f = x.to(at::kFloat);
    f = f * at::rsqrt(f.pow(2).mean(-1, true) + eps);
    return w * f.to(x.scalar_type());
}

at::Tensor rotary(const at::Tensor& q, const at::Tensor& cos, const at::Tensor& sin)
{
    const at::ScalarType t = q.scalar_type();
    const int64_t heads = q.size(1), dim = q.size(3);
    if (q.is_cpu() && q.size(0) == 1 && q.size(2) == 1 && q.stride(3) == 1 && dim % 2 == 0 && cos.is_contiguous() &&
        sin.is_contiguous() && cos.scalar_type() == t && sin.scalar_type() == t && cos.is_cpu() &&
        (t == at::kFloat || t == at::kBFloat16)) {
        at::Tensor out = at::empty({1, heads, 1, dim}, q.options());
        if (const rows::RotaryFn f = rotaryKernel())
            f(q.data_ptr(), q.stride(1), heads, dim, cos.data_ptr(), sin.data_ptr(), out.data_ptr(),
              t == at::kBFloat16);
        else if (t == at::kBFloat16)
            rotateHeads(q.data_ptr<at::BFloat16>(), q.stride(1), heads, dim, cos.data_ptr<at::BFloat16>(),
                        sin.data_ptr<at::BFloat16>(), out.data_ptr<at::BFloat16>());
        else
            rotateHeads(q.data_ptr<float>(), q.stride(1), heads, dim, cos.data_ptr<float>(), sin.data_ptr<float>(),
                        out.data_ptr<float>());
        return out;
    }
    return q * cos + rotateHalf(q) * sin;
}

at::Tensor siluMul(const at::Tensor& gate, const at::Tensor& up)
{
    at::Tensor y = siluTimes(gate, up);
    return y.defined() ? y : at::silu(gate) * up;
}

at::Tensor embed(const at::Tensor& w, const at::Tensor& ids, at::ScalarType dtype)
{
    // One id on the CPU: its row copied, or widened to fp32 (at::embedding,
    // an index_select, and .to() cost 4-7 us a token in decode).
    const at::ScalarType wt = w.scalar_type();
    if (ids.numel() == 1 && ids.dim() == 1 && ids.scalar_type() == at::kLong && ids.is_cpu() && w.is_cpu() &&
        w.dim() == 2 && w.is_contiguous() && (wt == dtype || dtype == at::kFloat) &&
        (wt == at::kFloat || wt == at::kBFloat16 || wt == at::kHalf)) {
        const int64_t id = ids.data_ptr<int64_t>()[0], n = w.size(1);
        if (id >= 0 && id < w.size(0)) {
            at::Tensor row = at::empty({1, n}, w.options().dtype(dtype));
            const char* from = static_cast<const char*>(w.data_ptr()) + size_t(id * n) * w.element_size();
            if (wt == dtype)
                std::memcpy(row.data_ptr(), from, size_t(n) * w.element_size());
            else
                widen(from, wt, row.data_ptr<float>(), n);
            return row;
        }
    }
    return at::embedding(w, ids).to(dtype);
}

namespace {
// The most positions taken ahead of use (address space only, until written).
constexpr int64_t kMaxExpected = 8192;
} // namespace

std::pair<at::Tensor, at::Tensor> appendCache(LayerCache& c, const at::Tensor& k, const at::Tensor& v, int64_t window)
{
    // Concatenating per step copied the whole cache every token and asked the
    // allocator for it anew (decode of the small benchmark model fell from 45
    // to 32 tokens/s between 100 and 600 tokens). The buffer grows by blocks
    // of an eighth of what it holds (16 to 256 positions): each growth copies
    // the cache once, about every length/8 steps, and at most an eighth (or
    // 15 positions) stands unused, so a planned KV budget is barely exceeded.
    //
    // A sliding layer keeps its last window - 1 positions between steps, as
    // transformers 5.6's DynamicSlidingWindowLayer does (and the KV reserve
    // counts): older ones are dropped by moving `start` on, and the held
    // positions slide back to the buffer's front when the slack (an eighth of
    // the window, 16 to 256 positions) is used up, so each position is copied
    // about eight times over its life instead of the window every step. A
    // buffer a long prompt left larger than that is replaced once.
    const int64_t n = k.size(2);
    const int64_t slack = window > 0 ? std::clamp<int64_t>(window / 8, 16, 256) : 0;
    if (window > 0 && c.length > window - 1) {
        c.start += c.length - (window - 1);
        c.length = window - 1;
    }
    const int64_t need = c.length + n;
    const at::ScalarType dt = c.storeAs != at::ScalarType::Undefined ? c.storeAs : k.scalar_type();
    const bool moved = c.k.defined() && (c.k.device() != k.device() || c.k.scalar_type() != dt);
    const bool oversized = window > 0 && c.k.defined() && c.k.size(2) > window - 1 + n + 2 * slack;
    if (c.k.defined() && !moved && !oversized && c.start + need > c.k.size(2) && need <= c.k.size(2)) {
        // room at the front: slide the held positions there (through a copy, as the ranges may overlap)
        if (c.length > 0) {
            const at::Tensor hk = c.k.narrow(2, c.start, c.length).clone(), hv = c.v.narrow(2, c.start, c.length).clone();
            c.k.narrow(2, 0, c.length).copy_(hk);
            c.v.narrow(2, 0, c.length).copy_(hv);
        }
        c.start = 0;
    }
    if (!c.k.defined() || moved || oversized || c.start + need > c.k.size(2)) {
        const int64_t block = std::clamp<int64_t>(need / 8, 16, 256);
        std::vector<int64_t> shape = k.sizes().vec();
        shape[2] = (need + block - 1) / block * block;
        const int64_t most = window > 0 ? window - 1 + n + slack : std::numeric_limits<int64_t>::max();
        shape[2] = std::min(shape[2], most);
        // Growths (a copy, and the new buffer's pages faulted in) cost
        // 30-40 us a layer per step on average over 150 steps (small
        // benchmark model). On the CPU the expected length is taken at once;
        // its pages are only touched as positions are written. GPU memory is
        // taken when used, as before.
        if (k.is_cpu() && need <= c.expected)
            shape[2] = std::max(shape[2], std::min({c.expected, kMaxExpected, most}));
        // v's last dimension may differ from k's (MLA's latent and rope part).
        std::vector<int64_t> vShape = v.sizes().vec();
        vShape[2] = shape[2];
        at::Tensor nk = at::empty(shape, k.options().dtype(dt)), nv = at::empty(vShape, v.options().dtype(dt));
        if (c.length > 0) {
            nk.narrow(2, 0, c.length).copy_(c.k.narrow(2, c.start, c.length));
            nv.narrow(2, 0, c.length).copy_(c.v.narrow(2, c.start, c.length));
        }
        c.k = nk;
        c.v = nv;
        c.start = 0;
    }
    const int64_t at = c.start + c.length;
    if (!appendRows(c.k, at, k) || !appendRows(c.v, at, v)) {
        c.k.narrow(2, at, n).copy_(k); // copy_ converts as .to() does
        c.v.narrow(2, at, n).copy_(v);
    }
    c.length = need;
    return {c.k.narrow(2, c.start, need), c.v.narrow(2, c.start, need)};
}

std::vector<int64_t> cacheWindows(const ModelConfig& config, int64_t layers)
{
    std::vector<int64_t> out(size_t(std::max<int64_t>(layers, 0)), 0);
    const auto shape = attentionShape(config);
    if (shape && shape->cache.size() == out.size())
        for (size_t i = 0; i < out.size(); ++i)
            out[i] = shape->cache[i].window;
    return out;
}

} // namespace stowage::arch
