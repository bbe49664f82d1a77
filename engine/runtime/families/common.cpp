#include "runner.h"

#include "gemv.h"

#include <cmath>

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

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale)
{
    const int64_t heads = q.size(1), kvHeads = k.size(1);
    at::Tensor kk = k, vv = v;
    if (heads != kvHeads) { // repeat_kv
        kk = k.repeat_interleave(heads / kvHeads, 1);
        vv = v.repeat_interleave(heads / kvHeads, 1);
    }
    at::Tensor scores = at::matmul(q, kk.transpose(-1, -2)) * scale;
    const int64_t T = q.size(2), S = kk.size(2);
    if (T > 1) {
        // position i of the new block sees cached keys and new keys up to itself
        at::Tensor mask = at::ones({T, S}, at::TensorOptions().dtype(at::kBool).device(q.device())).triu(S - T + 1);
        scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    }
    at::Tensor probs = at::softmax(scores.to(at::kFloat), -1).to(q.scalar_type());
    return at::matmul(probs, vv);
}

at::Tensor dense(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b)
{
    // One row on the CPU is a matrix-vector product (gemv.h): the engine's
    // kernel for this CPU, else at::mv (OpenBLAS sgemv for fp32, 2.5x the
    // one-row matmul).
    if (x.dim() == 2 && x.size(0) == 1 && w.is_cpu() && w.dim() == 2 && x.scalar_type() == w.scalar_type() &&
        (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16)) {
        at::Tensor y = w.is_contiguous() ? gemv(w, x[0]) : at::mv(w, x[0]);
        return (b.defined() ? y + b : y).unsqueeze(0);
    }
    return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

at::Tensor denseInOut(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b)
{
    if (x.dim() == 2 && x.size(0) == 1 && w.is_cpu() &&
        (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16))
        return (at::mv(w.t(), x[0]) + b).unsqueeze(0);
    return at::addmm(b, x, w);
}

std::pair<at::Tensor, at::Tensor> appendCache(LayerCache& c, const at::Tensor& k, const at::Tensor& v)
{
    if (c.k.defined() && c.k.device() != k.device()) {
        c.k = c.k.to(k.device());
        c.v = c.v.to(k.device());
    }
    c.k = c.k.defined() ? at::cat({c.k, k}, 2) : k;
    c.v = c.v.defined() ? at::cat({c.v, v}, 2) : v;
    return {c.k, c.v};
}

} // namespace stowage::arch
