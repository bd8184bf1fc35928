// A first convolution with its 2x2 max pooling and ReLU as one CPU kernel, forward and backward (issue #27):
// fedrun/fused_conv.py builds it once per CPU and says when it applies. For K clients' minibatches x (K, B, C, H, W),
// their weights w (K, O, C, R, R) and biases (K, O), forward gives relu(maxpool2x2(conv(x, w, padding pad)) + bias) as
// (B, P, Q, K * O) memory, the channels-last images that the cohort's next (grouped) convolution takes, and each
// pooled value's winning position in its window (0..3 in row-major order, the first of equal values as torch's
// max_pool2d; 4: the ReLU is off and no gradient flows). Backward gives the weights' and biases' gradients (the images
// need none). Why: oneDNN computes such a convolution (one input channel, 6 outputs per client) far below the CPU's
// peak, then the pooling writes, and its backward zero-fills and scatters, the full-resolution output; here each
// image stays in the L1 cache and the full-resolution output is never stored.
//
// How: an image row's even and odd columns are split into two planes, so that the convolution's output at the even
// (or odd) columns of a row, the candidates of Q <= 16 pooling windows, is one 16-lane vector: each tap is one
// vector load times a broadcast weight, shared by 6 output channels. Backward sums, for four taps at a time, the
// output gradient (nonzero at the windows' winners only) times the shifted input planes, lane by lane; lanes and threads
// are summed once at the end (each thread's images in a fixed split: the same sums in the same order on a rerun).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cstring>
#include <vector>

constexpr int L = 16;   // lanes of a vector: the pooled columns of one output row, computed at once (Q <= L)
constexpr int OG = 6;   // output channels that share each loaded input vector
constexpr int TG = 4;   // taps whose weight gradients backward sums at once
typedef float vf __attribute__((vector_size(64)));
typedef int vi __attribute__((vector_size(64)));
typedef uint8_t vu8 __attribute__((vector_size(16)));
static inline vf load(const float* p) { vf v; std::memcpy(&v, p, sizeof(v)); return v; }
static inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof(v)); }

template <int R>
struct Geo {
  static constexpr int64_t M = L + R;  // a plane's row: the even (or odd) columns of the padded image
  int64_t K, B, C, H, W, O, pad, P, Q, rows;
  Geo(const torch::Tensor& x, int64_t O_, int64_t pad_)
      : K(x.size(0)), B(x.size(1)), C(x.size(2)), H(x.size(3)), W(x.size(4)), O(O_), pad(pad_) {
    P = (H + 2 * pad - R + 1) / 2; Q = (W + 2 * pad - R + 1) / 2; rows = 2 * P + R - 1;
    TORCH_CHECK(P >= 1 && Q >= 1 && Q <= L, "conv_pool_relu: ", Q, " pooled columns (1 to 16 fit)");
  }
  int64_t plane() const { return C * rows * M; }
  // the zero-padded image in two planes, planes[par][c][y][m] = padded[c][y][2m + par], by way of one padded row
  // (``row``: 2M floats, zero but where an image row goes)
  void split(const float* src, float* planes, float* row) const {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < rows; ++y) {
        float* even = planes + (c * rows + y) * M;
        float* odd = even + plane();
        const int64_t sy = y - pad;
        if (sy < 0 || sy >= H) {
          std::fill(even, even + M, 0.f);
          std::fill(odd, odd + M, 0.f);
          continue;
        }
        std::memcpy(row + pad, src + (c * H + sy) * W, W * sizeof(float));
        for (int64_t m = 0; m < M; ++m) {
          even[m] = row[2 * m];
          odd[m] = row[2 * m + 1];
        }
      }
  }
};

template <int R>
std::vector<torch::Tensor> forward_r(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t pad) {
  const Geo<R> g(x, w.size(1), pad);
  constexpr int64_t M = Geo<R>::M;
  const int64_t K = g.K, B = g.B, C = g.C, O = g.O, P = g.P, Q = g.Q, rows = g.rows, KO = K * O, taps = C * R * R;
  auto out = torch::empty({B, P, Q, KO}, x.options());
  auto codes = torch::empty({B, KO, P, L}, x.options().dtype(torch::kUInt8));
  const float* xp = x.data_ptr<float>(); const float* wp = w.data_ptr<float>(); const float* bp = bias.data_ptr<float>();
  float* op = out.data_ptr<float>(); uint8_t* cp = codes.data_ptr<uint8_t>();
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> planes(2 * g.plane()), wt(taps * OG), row(2 * M, 0.f);
    float outs[OG][L];
    for (int64_t b = begin; b < end; ++b)
      for (int64_t k = 0; k < K; ++k) {
        g.split(xp + (k * B + b) * C * g.H * g.W, planes.data(), row.data());
        for (int64_t o0 = 0; o0 < O; o0 += OG) {
          const int64_t og = std::min<int64_t>(OG, O - o0);
          for (int64_t t = 0; t < taps; ++t)
            for (int o = 0; o < OG; ++o) wt[t * OG + o] = o < og ? wp[(k * O + o0 + o) * taps + t] : 0.f;
          for (int64_t p = 0; p < P; ++p) {
            vf best[OG]; vi code[OG];
            #pragma GCC unroll 4
            for (int win = 0; win < 4; ++win) {
              const int dy = win >> 1, dx = win & 1;
              vf acc[OG] = {};
              const float* wc = wt.data();
              for (int64_t c = 0; c < C; ++c) {
                const float* at = planes.data() + (c * rows + 2 * p + dy) * M;
                #pragma GCC unroll 8
                for (int i = 0; i < R; ++i)
                  #pragma GCC unroll 8
                  for (int j = 0; j < R; ++j, wc += OG) {
                    const vf v = load(at + ((dx + j) & 1) * g.plane() + i * M + ((dx + j) >> 1));
                    #pragma GCC unroll 8
                    for (int o = 0; o < OG; ++o) acc[o] += wc[o] * v;
                  }
              }
              #pragma GCC unroll 8
              for (int o = 0; o < OG; ++o) {
                if (win == 0) { best[o] = acc[o]; code[o] = vi{}; continue; }
                const vi more = acc[o] > best[o];
                best[o] = more ? acc[o] : best[o];
                code[o] = more ? vi{} + win : code[o];
              }
            }
            for (int64_t o = 0; o < og; ++o) {
              const int64_t ko = k * O + o0 + o;
              const vf v = best[o] + bp[ko];
              const vi on = v > 0.f;
              store(outs[o], on ? v : vf{});
              const vu8 c8 = __builtin_convertvector(on ? code[o] : vi{} + 4, vu8);
              std::memcpy(cp + ((b * KO + ko) * P + p) * L, &c8, L);
            }
            float* dst = op + (b * P + p) * Q * KO + k * O + o0;
            for (int64_t q = 0; q < Q; ++q)
              for (int64_t o = 0; o < og; ++o) dst[q * KO + o] = outs[o][q];
          }
        }
      }
  });
  return {out, codes};
}

template <int R>
std::vector<torch::Tensor> backward_r(torch::Tensor grad, torch::Tensor codes, torch::Tensor x, int64_t pad) {
  const int64_t KO = codes.size(1);
  const Geo<R> g(x, KO / x.size(0), pad);
  constexpr int64_t M = Geo<R>::M;
  const int64_t K = g.K, B = g.B, C = g.C, O = g.O, P = g.P, Q = g.Q, rows = g.rows, taps = C * R * R, YL = 2 * P;
  const int threads = at::get_num_threads();
  const int64_t per = (KO * taps + KO) * L;  // one thread's sums, lane by lane: every weight's, then every bias's
  std::vector<float> partial(threads * per, 0.f);
  const float* xp = x.data_ptr<float>(); const float* gp = grad.data_ptr<float>();
  const uint8_t* cp = codes.data_ptr<uint8_t>();
  const int64_t tp = (taps + TG - 1) / TG * TG;  // taps rounded up to whole groups (the extra ones: tap 0 again)
  std::vector<int64_t> offsets(2 * tp);  // where tap t's input starts in the planes, at row 0, for each dx
  for (int dx = 0; dx < 2; ++dx)
    for (int64_t t = 0; t < tp; ++t) {
      const int64_t u = t < taps ? t : 0, c = u / (R * R), i = u / R % R, j = u % R;
      offsets[dx * tp + t] = ((dx + j) & 1) * g.plane() + (c * rows + i) * M + ((dx + j) >> 1);
    }
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    float* mine = partial.data() + at::get_thread_num() * per;
    std::vector<float> planes(2 * g.plane()), gch(KO * P * L, 0.f), G(YL * 2 * OG * L), row(2 * M, 0.f);
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          const float* src = gp + ((b * P + p) * Q + q) * KO;
          for (int64_t ko = 0; ko < KO; ++ko) gch[(p * KO + ko) * L + q] = src[ko];
        }
      for (int64_t k = 0; k < K; ++k) {
        g.split(xp + (k * B + b) * C * g.H * g.W, planes.data(), row.data());
        for (int64_t o0 = 0; o0 < O; o0 += OG) {
          const int64_t og = std::min<int64_t>(OG, O - o0);
          // G[y][dx][o][q]: the output gradient before the pooling, at row y and column 2q + dx (every entry of the
          // og channels is written below; the rest stay zero)
          if (og < OG) std::fill(G.begin(), G.end(), 0.f);
          for (int64_t o = 0; o < og; ++o) {
            const int64_t ko = k * O + o0 + o;
            vf sum = {};
            for (int64_t p = 0; p < P; ++p) {
              vu8 c8; std::memcpy(&c8, cp + ((b * KO + ko) * P + p) * L, L);
              const vi cv = __builtin_convertvector(c8, vi);
              const vf gv = cv < 4 ? load(gch.data() + (p * KO + ko) * L) : vf{};
              sum += gv;
              for (int win = 0; win < 4; ++win)
                store(G.data() + (((2 * p + (win >> 1)) * 2 + (win & 1)) * OG + o) * L, cv == win ? gv : vf{});
            }
            float* to = mine + (KO * taps + ko) * L;
            store(to, load(to) + sum);
          }
          // each tap's sum over the rows and both column parities of G times the input shifted by the tap, for TG
          // taps at a time (TG x OG sums in registers; each loaded vector of G serves TG taps)
          for (int64_t t0 = 0; t0 < taps; t0 += TG) {
            vf acc[TG][OG] = {};
            const float* gy = G.data();
            for (int64_t y = 0; y < YL; ++y, gy += 2 * OG * L) {
              const float* py = planes.data() + y * M;
              #pragma GCC unroll 2
              for (int dx = 0; dx < 2; ++dx) {
                vf gv[OG];
                #pragma GCC unroll 8
                for (int o = 0; o < OG; ++o) gv[o] = load(gy + (dx * OG + o) * L);
                #pragma GCC unroll 8
                for (int t = 0; t < TG; ++t) {
                  const vf v = load(py + offsets[dx * tp + t0 + t]);
                  #pragma GCC unroll 8
                  for (int o = 0; o < OG; ++o) acc[t][o] += gv[o] * v;
                }
              }
            }
            for (int64_t t = 0; t < std::min<int64_t>(TG, taps - t0); ++t)
              for (int64_t o = 0; o < og; ++o) {
                float* to = mine + ((k * O + o0 + o) * taps + t0 + t) * L;
                store(to, load(to) + acc[t][o]);
              }
          }
        }
      }
    }
  });
  auto dw = torch::zeros({K, O, C, R, R}, x.options());
  auto db = torch::zeros({K, O}, x.options());
  float* dwp = dw.data_ptr<float>(); float* dbp = db.data_ptr<float>();
  for (int th = 0; th < threads; ++th) {
    const float* src = partial.data() + th * per;
    for (int64_t e = 0; e < KO * taps; ++e) for (int l = 0; l < L; ++l) dwp[e] += src[e * L + l];
    for (int64_t e = 0; e < KO; ++e) for (int l = 0; l < L; ++l) dbp[e] += src[(KO * taps + e) * L + l];
  }
  return {dw, db};
}

std::vector<torch::Tensor> forward(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t pad) {
  switch (w.size(3)) { case 3: return forward_r<3>(x, w, bias, pad); case 5: return forward_r<5>(x, w, bias, pad); }
  TORCH_CHECK(false, "kernel size ", w.size(3));
}
std::vector<torch::Tensor> backward(torch::Tensor grad, torch::Tensor codes, torch::Tensor x, int64_t R, int64_t pad) {
  switch (R) { case 3: return backward_r<3>(grad, codes, x, pad); case 5: return backward_r<5>(grad, codes, x, pad); }
  TORCH_CHECK(false, "kernel size ", R);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward);
  m.def("backward", &backward);
}
