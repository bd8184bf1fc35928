// A one-layer model's minibatch loss and gradient on the rows of the training inputs that an index picks, read in
// place: fedrun/model/native/indexed_rows.py says when it applies (build.py builds it once per CPU). For K clients'
// minibatches given as an index idx (K, B) into the training inputs x (N, d), their targets y (K, B) and their flat
// parameters (K, P), each a (C, d) weight row by row and then, where ``bias``, C biases (P = C * d [+ C]), it computes
// the outputs o[k, i] = w[k] x[idx[k, i]] + b[k], each client's mean loss over its minibatch and the loss's gradient
// (K, P), in the parameters' layout. Losses (fedrun/model/zoo.py has them in torch, the reference):
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
//
// A block of single-sample steps (fedrun/engine/blocked.py: local SGD on the softmax's HOG features, 1000 clients)
// takes three more calls: block_products (the block's rows' dots with the start weights and with each other, per
// client in tiles of 4 x 4 dot products, the next client's rows read ahead), block_steps (the steps at the outputs:
// each client's recurrence over the block, with the losses above) and row_sums_into (the gradient terms added to the
// weights, as the weights' gradient above). There a block was a gather of its rows, four batched products reading
// them again and, per step, some thirty tensor operations on a few numbers per client.
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
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
static inline float hsum(vf v) {  // a tree of halves (the lanes one by one would be a chain of 16 dependent adds)
  v8 lo, hi;
  std::memcpy(&lo, &v, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
  lo += hi;
  v4 a, b;
  std::memcpy(&a, &lo, sizeof(a));
  std::memcpy(&b, reinterpret_cast<const char*>(&lo) + sizeof(a), sizeof(b));
  a += b;
  return (a[0] + a[2]) + (a[1] + a[3]);
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

// out[r * stride + c] = a[r] . b[c] for RB rows a and CB rows b of d floats: RB x CB dot products at once, each in
// one chain of 16-lane vectors over the columns (so its value does not depend on the tile it is computed in)
template <int RB, int CB>
static inline void tile(const float* const* a, const float* const* b, int64_t d, float* out, int64_t stride) {
  vf acc[RB][CB] = {};
  int64_t j = 0;
  for (; j + L <= d; j += L) {
    vf u[RB];
    for (int r = 0; r < RB; ++r) u[r] = load(a[r] + j);
    for (int c = 0; c < CB; ++c) {
      const vf v = load(b[c] + j);
      for (int r = 0; r < RB; ++r) acc[r][c] += u[r] * v;
    }
  }
  if (j < d) {
    vf u[RB];
    for (int r = 0; r < RB; ++r) u[r] = load_part(a[r] + j, d - j);
    for (int c = 0; c < CB; ++c) {
      const vf v = load_part(b[c] + j, d - j);
      for (int r = 0; r < RB; ++r) acc[r][c] += u[r] * v;
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int c = 0; c < CB; ++c) out[r * stride + c] = hsum(acc[r][c]);
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

// gw[c, j0 : j0 + V * L] for CB outputs c (rows ``stride`` apart): the rows' sum, each row's columns times its
// gradient entry, written there or, where ``add``, added to what is there (V = 1: the n <= L columns from j0, the last
// of a row where n < L)
template <int CB, int V>
static inline void sums(const float* xp, const int64_t* ip, const float* g, int64_t B, int64_t C, int64_t d,
                        int64_t j0, float* gw, int64_t stride, bool add, int64_t n = L) {
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
      float* out = gw + c * stride + j0 + u * L;
      if (n < L) {
        float t[L];
        store(t, acc[c][u]);
        for (int64_t l = 0; l < n; ++l) out[l] = add ? out[l] + t[l] : t[l];
      } else {
        store(out, add ? load(out) + acc[c][u] : acc[c][u]);
      }
    }
}

// out[k, c, :] = (or, where ``add``, += ) sum_i g[k, i, c] x[idx[k, i]] for K clients' B rows and C outputs, the
// client's output rows ``stride`` apart and clients ``kstride`` apart: over (client, block of 128 columns) tasks, each
// summing the rows' columns in the rows' order
static void row_sums(const float* xp, const int64_t* ip, const float* gp, int64_t K, int64_t B, int64_t C, int64_t d,
                     float* op, int64_t kstride, int64_t stride, bool add) {
  const int64_t blocks = (d + BLOCK - 1) / BLOCK;
  at::parallel_for(0, K * blocks, std::max<int64_t>(1, WORK / (B * C * BLOCK)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t k = t / blocks, j0 = t % blocks * BLOCK, j1 = std::min(d, j0 + BLOCK);
      const int64_t* ik = ip + k * B;
      const float* gk = gp + k * B * C;
      for (int64_t c = 0; c < C;) {
        float* out = op + k * kstride + c * stride;
        const int64_t m = std::min<int64_t>(4, C - c) == 3 ? 2 : std::min<int64_t>(4, C - c);
        // the next outputs' rows of this block fetched for writing while these are summed: a cohort's weight gradient
        // (GIFT's CIFAR cohort: 19 MB a step) lies in memory the caches no longer hold, whose lines each write would
        // otherwise wait for
        for (int64_t r = 4; r < 8 && c + r < C; ++r)
          for (int64_t j = j0; j < j1; j += L) __builtin_prefetch(out + r * stride + j, 1, 3);
        int64_t j = j0;
        while (j + 2 * L <= j1) {  // eight vectors of columns at a time for one output, else two
          if (m == 1 && j + BLOCK <= j1) {
            sums<1, 8>(xp, ik, gk + c, B, C, d, j, out, stride, add);
            j += BLOCK;
            continue;
          }
          if (m == 1) sums<1, 2>(xp, ik, gk + c, B, C, d, j, out, stride, add);
          else if (m == 2) sums<2, 2>(xp, ik, gk + c, B, C, d, j, out, stride, add);
          else sums<4, 2>(xp, ik, gk + c, B, C, d, j, out, stride, add);
          j += 2 * L;
        }
        for (; j < j1; j += L) {  // the last columns, a vector (or what is left of one) at a time
          const int64_t n = std::min(L, j1 - j);
          if (m == 1) sums<1, 1>(xp, ik, gk + c, B, C, d, j, out, stride, add, n);
          else if (m == 2) sums<2, 1>(xp, ik, gk + c, B, C, d, j, out, stride, add, n);
          else sums<4, 1>(xp, ik, gk + c, B, C, d, j, out, stride, add, n);
        }
        c += m;
      }
    }
  });
}

// a row's dot products with C weight rows d apart, four (or two, or one) at a time
static inline void row_dots(const float* row, const float* w, int64_t C, int64_t d, float* o) {
  for (int64_t c = 0; c < C;) {
    const int64_t m = std::min<int64_t>(4, C - c) == 3 ? 2 : std::min<int64_t>(4, C - c);
    if (m == 4) dots<4>(row, w + c * d, d, o + c);
    else if (m == 2) dots<2>(row, w + c * d, d, o + c);
    else dots<1>(row, w + c * d, d, o + c);
    c += m;
  }
}

// calls f(r) for the rows r of [begin, end) of the index ip (rows d floats long), each row read ahead
template <class F>
static inline void over_rows(const float* xp, const int64_t* ip, int64_t d, int64_t begin, int64_t end, F f) {
  auto prefetch = [&](int64_t r) {
    const char* row = reinterpret_cast<const char*>(xp + ip[r] * d);
    for (int64_t byte = 0; byte < d * int64_t(sizeof(float)); byte += 64) __builtin_prefetch(row + byte);
  };
  for (int64_t r = begin; r < std::min(end, begin + AHEAD); ++r) prefetch(r);
  for (int64_t r = begin; r < end; ++r) {
    if (r + AHEAD < end) prefetch(r + AHEAD);
    f(r);
  }
}

static void check_index(const torch::Tensor& x, const torch::Tensor& idx) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat, "indexed_linear: x (N, d) float32");
  TORCH_CHECK(idx.dim() == 2 && idx.is_contiguous() && idx.scalar_type() == torch::kLong, "indexed_linear: idx (K, B)");
  TORCH_CHECK(idx.size(1) > 0, "indexed_linear: an empty minibatch");
  const int64_t* ip = idx.data_ptr<int64_t>();
  for (int64_t r = 0; r < idx.numel(); ++r)
    TORCH_CHECK(ip[r] >= 0 && ip[r] < x.size(0), "indexed_linear: row ", ip[r], " of ", x.size(0), " samples");
}

std::vector<torch::Tensor> loss_and_grad(torch::Tensor x, torch::Tensor idx, torch::Tensor y, torch::Tensor params,
                                         int64_t C, bool bias, int64_t loss) {
  check_index(x, idx);
  const int64_t K = idx.size(0), B = idx.size(1), d = x.size(1), P = C * d + (bias ? C : 0);
  TORCH_CHECK(y.sizes() == idx.sizes() && y.is_contiguous() && y.scalar_type() == torch::kLong, "indexed_linear: y (K, B)");
  TORCH_CHECK(params.dim() == 2 && params.is_contiguous() && params.size(0) == K && params.size(1) == P &&
              params.scalar_type() == torch::kFloat, "indexed_linear: params (K, ", P, ") float32");
  TORCH_CHECK((loss == 0 && C == 1) || loss == 1, "indexed_linear: loss ", loss, " with ", C, " outputs");
  const int64_t *ip = idx.data_ptr<int64_t>(), *yp = y.data_ptr<int64_t>();
  for (int64_t r = 0; r < K * B; ++r)
    TORCH_CHECK(loss == 0 || (yp[r] >= 0 && yp[r] < C), "indexed_linear: target ", yp[r], " outside 0..", C - 1);
  auto grad = torch::empty({K, P}, x.options());
  auto dout = torch::empty({K, B, C}, x.options());   // the outputs, then the loss's gradient in their place
  auto rloss = torch::empty({K, B}, x.options());
  const float *xp = x.data_ptr<float>(), *wp = params.data_ptr<float>();
  float *gp = grad.data_ptr<float>(), *op = dout.data_ptr<float>(), *lp = rloss.data_ptr<float>();
  at::parallel_for(0, K * B, std::max<int64_t>(1, WORK / (d * C)), [&](int64_t begin, int64_t end) {
    over_rows(xp, ip, d, begin, end, [&](int64_t r) {
      const int64_t k = r / B;
      float* o = op + r * C;
      row_dots(xp + ip[r] * d, wp + k * P, C, d, o);
      if (bias)
        for (int64_t c = 0; c < C; ++c) o[c] += wp[k * P + C * d + c];
      lp[r] = row_loss(loss, o, C, yp[r]);
      for (int64_t c = 0; c < C; ++c) o[c] /= float(B);
    });
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
  row_sums(xp, ip, op, K, B, C, d, gp, P, d, false);
  return {mean, grad};
}

// a (K or 1, C, d) float32 weight stack, rows contiguous: its clients' distance apart (0 for one shared by all)
static int64_t client_stride(const torch::Tensor& w, int64_t K, int64_t d) {
  TORCH_CHECK(w.dim() == 3 && w.scalar_type() == torch::kFloat && (w.size(0) == K || w.size(0) == 1) &&
              w.size(2) == d && w.stride(2) == 1 && w.stride(1) == d,
              "indexed_linear: weights (K or 1, C, ", d, ") float32 with contiguous rows");
  return w.size(0) == 1 ? 0 : w.stride(0);
}

// The products a block of steps starts from (fedrun/engine/blocked.py) on rows in place: for each of K clients' S
// rows x_s = x[idx[k, s]], its dots with the client's rows of each weight stack in ``weights`` (each (K or 1, C_w, d):
// the block's start weights, the global model's, the momentum's), then with the block's rows x_t (its Gram row), as
// (K, S, sum C_w + S).
torch::Tensor block_products(torch::Tensor x, torch::Tensor idx, std::vector<torch::Tensor> weights) {
  check_index(x, idx);
  const int64_t K = idx.size(0), S = idx.size(1), d = x.size(1);
  std::vector<int64_t> strides;
  int64_t R = 0;
  for (const auto& w : weights) {
    strides.push_back(client_stride(w, K, d));
    R += w.size(1);
  }
  const int64_t T = 4, rows = (S + T - 1) / T * T, cols = (R + S + T - 1) / T * T;  // in tiles of T x T
  auto out = torch::empty({K, S, R + S}, x.options());
  const float* xp = x.data_ptr<float>();
  const int64_t* ip = idx.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, K, std::max<int64_t>(1, WORK / (S * (R + S) * d)), [&](int64_t begin, int64_t end) {
    std::vector<const float*> a(rows), b(cols);
    std::vector<float> o(rows * cols);
    auto prefetch = [&](int64_t k) {  // a client's rows, read while the one before is computed
      for (int64_t s = 0; s < S; ++s) {
        const char* row = reinterpret_cast<const char*>(xp + ip[k * S + s] * d);
        for (int64_t byte = 0; byte < d * int64_t(sizeof(float)); byte += 64) __builtin_prefetch(row + byte);
      }
    };
    prefetch(begin);
    for (int64_t k = begin; k < end; ++k) {
      if (k + 1 < end) prefetch(k + 1);
      for (int64_t s = 0; s < rows; ++s) a[s] = xp + ip[k * S + std::min(s, S - 1)] * d;  // past S: repeats, unused
      int64_t c = 0;
      for (size_t w = 0; w < weights.size(); ++w)
        for (int64_t i = 0; i < weights[w].size(1); ++i) b[c++] = weights[w].data_ptr<float>() + k * strides[w] + i * d;
      for (int64_t s = 0; s < cols - R; ++s) b[c++] = a[std::min(s, S - 1)];
      for (int64_t s = 0; s < rows; s += T)
        for (int64_t j = 0; j < cols; j += T) tile<4, 4>(&a[s], &b[j], d, &o[s * cols + j], cols);
      for (int64_t s = 0; s < S; ++s) std::memcpy(op + (k * S + s) * (R + S), &o[s * cols], (R + S) * sizeof(float));
    }
  });
  return out;
}

// out[k] = g[k]^T X_k (or, where ``add``, += ) for K clients' S rows X_k = x[idx[k]] and coefficients g (K, S, C), into
// ``out`` (K, C, d) of contiguous rows, its clients any distance apart (a view of their flat parameters or gradient):
// a block's gradient terms added to its clients' weights in place, or a Linear layer's weight gradient written into a
// cohort's flat gradient (fedrun/model/cohort_network.py)
void row_sums_into(torch::Tensor x, torch::Tensor idx, torch::Tensor g, torch::Tensor out, bool add) {
  check_index(x, idx);
  const int64_t K = idx.size(0), S = idx.size(1), d = x.size(1);
  TORCH_CHECK(out.size(0) == K, "indexed_linear: out (K, C, d) for K = ", K);
  const int64_t kstride = client_stride(out, K, d), C = out.size(1);
  TORCH_CHECK(g.dim() == 3 && g.is_contiguous() && g.scalar_type() == torch::kFloat && g.size(0) == K &&
              g.size(1) == S && g.size(2) == C, "indexed_linear: g (K, S, C) float32");
  row_sums(x.data_ptr<float>(), idx.data_ptr<int64_t>(), g.data_ptr<float>(), K, S, C, d, out.data_ptr<float>(),
           kstride, d, add);
}

// A block's steps at the outputs (fedrun/engine/blocked.py), for K clients of S = steps x width samples: step s's
// outputs are base[k, r] (the block's start terms) plus its earlier steps' gradient terms,
// sum_{t < s} coef[s, t] sum_{r' of step t} gram[k, r, r'] grads[k, r'], and the loss's gradient there (its mean over
// the step's width samples, as in loss_and_grad) is grads[k, r] for each sample r of step s, for the clients' first
// done[k] steps (zero after them). Returns grads (K, S, C) and each client's sum of its steps' mean losses (K).
std::vector<torch::Tensor> block_steps(torch::Tensor base, torch::Tensor gram, torch::Tensor coef, torch::Tensor y,
                                       torch::Tensor done, int64_t width, int64_t loss) {
  TORCH_CHECK(base.dim() == 3 && base.is_contiguous() && base.scalar_type() == torch::kFloat,
              "indexed_linear: base (K, S, C) float32");
  const int64_t K = base.size(0), S = base.size(1), C = base.size(2), steps = S / width;
  TORCH_CHECK(width > 0 && steps * width == S, "indexed_linear: ", S, " samples in steps of ", width);
  TORCH_CHECK(gram.sizes() == torch::IntArrayRef({K, S, S}) && gram.is_contiguous() &&
              gram.scalar_type() == torch::kFloat, "indexed_linear: gram (K, S, S) float32");
  TORCH_CHECK(coef.sizes() == torch::IntArrayRef({steps, steps}) && coef.is_contiguous() &&
              coef.scalar_type() == torch::kFloat, "indexed_linear: coef (steps, steps) float32");
  TORCH_CHECK(y.sizes() == torch::IntArrayRef({K, S}) && y.is_contiguous() && y.scalar_type() == torch::kLong,
              "indexed_linear: y (K, S)");
  TORCH_CHECK(done.dim() == 1 && done.size(0) == K && done.is_contiguous() && done.scalar_type() == torch::kLong,
              "indexed_linear: done (K)");
  TORCH_CHECK((loss == 0 && C == 1) || loss == 1, "indexed_linear: loss ", loss, " with ", C, " outputs");
  const int64_t *yp = y.data_ptr<int64_t>(), *dp = done.data_ptr<int64_t>();
  for (int64_t r = 0; r < K * S; ++r)
    TORCH_CHECK(loss == 0 || (yp[r] >= 0 && yp[r] < C), "indexed_linear: target ", yp[r], " outside 0..", C - 1);
  auto grads = torch::zeros({K, S, C}, base.options());
  auto sums = torch::zeros({K}, base.options());
  const float *bp = base.data_ptr<float>(), *kp = gram.data_ptr<float>(), *cp = coef.data_ptr<float>();
  float *gp = grads.data_ptr<float>(), *sp = sums.data_ptr<float>();
  at::parallel_for(0, K, std::max<int64_t>(1, WORK / (S * S * C)), [&](int64_t begin, int64_t end) {
    std::vector<float> o(C);
    for (int64_t k = begin; k < end; ++k) {
      float* g = gp + k * S * C;
      for (int64_t s = 0; s < std::min(dp[k], steps); ++s) {
        float step_loss = 0.f;
        for (int64_t j = 0; j < width; ++j) {
          const int64_t r = s * width + j;
          const float* kr = kp + (k * S + r) * S;
          for (int64_t c = 0; c < C; ++c) o[c] = bp[(k * S + r) * C + c];
          for (int64_t t = 0; t < s * width; ++t) {
            const float a = cp[s * steps + t / width] * kr[t];
            for (int64_t c = 0; c < C; ++c) o[c] += a * g[t * C + c];
          }
          step_loss += row_loss(loss, o.data(), C, yp[k * S + r]);
          for (int64_t c = 0; c < C; ++c) g[r * C + c] = o[c] / float(width);
        }
        sp[k] += step_loss / float(width);
      }
    }
  });
  return {grads, sums};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("loss_and_grad", &loss_and_grad, "a one-layer model's minibatch losses and flat gradients on indexed rows");
  m.def("block_products", &block_products, "indexed rows' dots with weight stacks and with each other");
  m.def("block_steps", &block_steps, "a block's steps at a one-layer model's outputs");
  m.def("row_sums_into", &row_sums_into, "indexed rows' sums weighted per output, written or added into weights");
}
