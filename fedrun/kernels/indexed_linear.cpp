// A one-layer model's minibatch loss and gradient on the rows of the training inputs that an index picks, read in
// place (issue #27): fedrun/indexed_rows.py builds it once per CPU and says when it applies. For K clients'
// minibatches given as an index idx (K, B) into the training inputs x (N, d), their targets y (K, B) and their flat
// parameters (K, P), each a (C, d) weight row by row and then, where ``bias``, C biases (P = C * d [+ C]), it computes
// the outputs o[k, i] = w[k] x[idx[k, i]] + b[k], each client's mean loss over its minibatch and the loss's gradient
// (K, P), in the parameters' layout. Losses (fedrun/models.py has them in torch, the reference):
//   0  the smooth SVM on even/odd digits (SQUARED_HINGE_PARITY, C = 1): t = +1 for an even target, -1 for an odd
//      one, m = max(0, 1 - t o), loss 1/2 mean m^2, dloss/do = -t m / B;
//   1  cross-entropy (CROSS_ENTROPY, every target a class 0..C-1): loss mean(logsumexp(o) - o[y]),
//      dloss/do = (softmax(o) - onehot(y)) / B.
// Why: such a step (the smooth SVM's, 5 clients of B = 100 MNIST rows) was its minibatch gather, 1.5 MB copied out of
// the training set and read again by two small products, among dozens of small tensor operations.
//
// How: the forward runs over the K * B rows, each thread a fixed range of them (rows read ahead), a row's dot products
// with up to 4 of its client's weight rows at once in 16-lane vectors, then the row's loss and output gradient. The
// weights' gradient runs over (client, block of 128 columns) pairs, summing the rows' columns in the rows' order; the
// losses and the biases' gradient are summed in the rows' order too. So every sum has the same order whatever the
// threads and K: a lone client's step gives the bits of its row in a cohort's.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

constexpr int64_t L = 16;          // lanes of a vector
constexpr int64_t BLOCK = 8 * L;   // columns of one gradient task
constexpr int64_t WORK = 1 << 15;  // multiply-adds worth a thread of their own
constexpr int64_t AHEAD = 4;       // rows read ahead
typedef float vf __attribute__((vector_size(64)));
static inline vf load(const float* p) { vf v; std::memcpy(&v, p, sizeof(v)); return v; }
static inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof(v)); }
static inline vf load_part(const float* p, int64_t n) {  // n < L floats, zero above
  float t[L] = {};
  std::memcpy(t, p, n * sizeof(float));
  return load(t);
}
static inline float hsum(vf v) {
  float s = 0.f;
  for (int64_t l = 0; l < L; ++l) s += v[l];
  return s;
}

// CB outputs of one row: out[c] = row . w[c] (a row of d floats, weight rows d apart), in CH chains per output
template <int CB>
static inline void dots(const float* row, const float* w, int64_t d, float* out) {
  constexpr int CH = CB == 1 ? 4 : 2;
  vf acc[CB][CH] = {};
  const int64_t full = d / (CH * L) * (CH * L);
  int64_t j = 0;
  for (; j < full; j += CH * L)
    for (int h = 0; h < CH; ++h) {
      const vf v = load(row + j + h * L);
      for (int c = 0; c < CB; ++c) acc[c][h] += v * load(w + c * d + j + h * L);
    }
  for (; j + L <= d; j += L) {
    const vf v = load(row + j);
    for (int c = 0; c < CB; ++c) acc[c][0] += v * load(w + c * d + j);
  }
  if (j < d) {
    const vf v = load_part(row + j, d - j);
    for (int c = 0; c < CB; ++c) acc[c][0] += v * load_part(w + c * d + j, d - j);
  }
  for (int c = 0; c < CB; ++c) {
    vf a = acc[c][0];
    for (int h = 1; h < CH; ++h) a += acc[c][h];
    out[c] = hsum(a);
  }
}

// a row's loss (times B, for the smooth SVM's 1/2 m^2 and cross-entropy's -log p[y]) and its outputs o (C) replaced
// by the loss's gradient (not yet divided by B)
static inline float row_loss(int64_t loss, float* o, int64_t C, int64_t y) {
  if (loss == 0) {
    const float t = y % 2 == 0 ? 1.f : -1.f, m = std::max(0.f, 1.f - t * o[0]);
    o[0] = -t * m;
    return 0.5f * m * m;
  }
  float top = o[0];
  for (int64_t c = 1; c < C; ++c) top = std::max(top, o[c]);
  float sum = 0.f;
  for (int64_t c = 0; c < C; ++c) sum += std::exp(o[c] - top);
  const float lse = top + std::log(sum), nll = lse - o[y];
  for (int64_t c = 0; c < C; ++c) o[c] = std::exp(o[c] - lse);
  o[y] -= 1.f;
  return nll;
}

// gw[c, j0 : j0 + V * L] for CB outputs c: the rows' sum, each row's columns times its gradient entry
// (V = 1: the n <= L columns from j0, the last of a row where n < L)
template <int CB, int V>
static inline void sums(const float* xp, const int64_t* ip, const float* g, int64_t B, int64_t C, int64_t d,
                        int64_t j0, float* gw, int64_t n = L) {
  vf acc[CB][V] = {};
  for (int64_t i = 0; i < B; ++i) {
    const float* row = xp + ip[i] * d + j0;
    for (int u = 0; u < V; ++u) {
      const vf v = n < L ? load_part(row, n) : load(row + u * L);
      for (int c = 0; c < CB; ++c) acc[c][u] += g[i * C + c] * v;
    }
  }
  for (int c = 0; c < CB; ++c)
    for (int u = 0; u < V; ++u) {
      if (n < L) {
        float t[L];
        store(t, acc[c][u]);
        std::memcpy(gw + c * d + j0, t, n * sizeof(float));
      } else {
        store(gw + c * d + j0 + u * L, acc[c][u]);
      }
    }
}

std::vector<torch::Tensor> loss_and_grad(torch::Tensor x, torch::Tensor idx, torch::Tensor y, torch::Tensor params,
                                         int64_t C, bool bias, int64_t loss) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat, "indexed_linear: x (N, d) float32");
  TORCH_CHECK(idx.dim() == 2 && idx.is_contiguous() && idx.scalar_type() == torch::kLong, "indexed_linear: idx (K, B)");
  const int64_t K = idx.size(0), B = idx.size(1), d = x.size(1), n = x.size(0), P = C * d + (bias ? C : 0);
  TORCH_CHECK(y.sizes() == idx.sizes() && y.is_contiguous() && y.scalar_type() == torch::kLong, "indexed_linear: y (K, B)");
  TORCH_CHECK(params.dim() == 2 && params.is_contiguous() && params.size(0) == K && params.size(1) == P &&
              params.scalar_type() == torch::kFloat, "indexed_linear: params (K, ", P, ") float32");
  TORCH_CHECK((loss == 0 && C == 1) || loss == 1, "indexed_linear: loss ", loss, " with ", C, " outputs");
  TORCH_CHECK(B > 0, "indexed_linear: an empty minibatch");
  const int64_t *ip = idx.data_ptr<int64_t>(), *yp = y.data_ptr<int64_t>();
  for (int64_t r = 0; r < K * B; ++r) {
    TORCH_CHECK(ip[r] >= 0 && ip[r] < n, "indexed_linear: row ", ip[r], " of ", n, " samples");
    TORCH_CHECK(loss == 0 || (yp[r] >= 0 && yp[r] < C), "indexed_linear: target ", yp[r], " outside 0..", C - 1);
  }
  auto grad = torch::empty({K, P}, x.options());
  auto dout = torch::empty({K, B, C}, x.options());   // the outputs, then the loss's gradient in their place
  auto rloss = torch::empty({K, B}, x.options());
  const float *xp = x.data_ptr<float>(), *wp = params.data_ptr<float>();
  float *gp = grad.data_ptr<float>(), *op = dout.data_ptr<float>(), *lp = rloss.data_ptr<float>();
  at::parallel_for(0, K * B, std::max<int64_t>(1, WORK / (d * C)), [&](int64_t begin, int64_t end) {
    auto prefetch = [&](int64_t r) {
      const char* row = reinterpret_cast<const char*>(xp + ip[r] * d);
      for (int64_t byte = 0; byte < d * int64_t(sizeof(float)); byte += 64) __builtin_prefetch(row + byte);
    };
    for (int64_t r = begin; r < std::min(end, begin + AHEAD); ++r) prefetch(r);
    for (int64_t r = begin; r < end; ++r) {
      if (r + AHEAD < end) prefetch(r + AHEAD);
      const int64_t k = r / B;
      const float* row = xp + ip[r] * d;
      float* o = op + r * C;
      for (int64_t c = 0; c < C;) {
        const int64_t m = std::min<int64_t>(4, C - c) == 3 ? 2 : std::min<int64_t>(4, C - c);
        const float* wc = wp + k * P + c * d;
        if (m == 4) dots<4>(row, wc, d, o + c);
        else if (m == 2) dots<2>(row, wc, d, o + c);
        else dots<1>(row, wc, d, o + c);
        c += m;
      }
      if (bias)
        for (int64_t c = 0; c < C; ++c) o[c] += wp[k * P + C * d + c];
      lp[r] = row_loss(loss, o, C, yp[r]);
      for (int64_t c = 0; c < C; ++c) o[c] /= float(B);
    }
  });
  auto mean = torch::empty({K}, x.options());
  float* mp = mean.data_ptr<float>();
  for (int64_t k = 0; k < K; ++k) {
    float s = 0.f;
    for (int64_t i = 0; i < B; ++i) s += lp[k * B + i];
    mp[k] = s / float(B);
    if (bias)
      for (int64_t c = 0; c < C; ++c) {
        float gb = 0.f;
        for (int64_t i = 0; i < B; ++i) gb += op[(k * B + i) * C + c];
        gp[k * P + C * d + c] = gb;
      }
  }
  const int64_t blocks = (d + BLOCK - 1) / BLOCK;
  at::parallel_for(0, K * blocks, std::max<int64_t>(1, WORK / (B * C * BLOCK)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t k = t / blocks, j0 = t % blocks * BLOCK, j1 = std::min(d, j0 + BLOCK);
      const int64_t* ik = ip + k * B;
      const float* gk = op + k * B * C;
      for (int64_t c = 0; c < C;) {
        float* out = gp + k * P + c * d;
        const int64_t m = std::min<int64_t>(4, C - c) == 3 ? 2 : std::min<int64_t>(4, C - c);
        int64_t j = j0;
        while (j + 2 * L <= j1) {  // eight vectors of columns at a time for one output, else two
          if (m == 1 && j + BLOCK <= j1) {
            sums<1, 8>(xp, ik, gk + c, B, C, d, j, out);
            j += BLOCK;
            continue;
          }
          if (m == 1) sums<1, 2>(xp, ik, gk + c, B, C, d, j, out);
          else if (m == 2) sums<2, 2>(xp, ik, gk + c, B, C, d, j, out);
          else sums<4, 2>(xp, ik, gk + c, B, C, d, j, out);
          j += 2 * L;
        }
        for (; j < j1; j += L) {  // the last columns, a vector (or what is left of one) at a time
          const int64_t n = std::min(L, j1 - j);
          if (m == 1) sums<1, 1>(xp, ik, gk + c, B, C, d, j, out, n);
          else if (m == 2) sums<2, 1>(xp, ik, gk + c, B, C, d, j, out, n);
          else sums<4, 1>(xp, ik, gk + c, B, C, d, j, out, n);
        }
        c += m;
      }
    }
  });
  return {mean, grad};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("loss_and_grad", &loss_and_grad, "a one-layer model's minibatch losses and flat gradients on indexed rows");
}
