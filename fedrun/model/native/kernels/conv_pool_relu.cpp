// A convolution with its 2x2 max pooling and ReLU as one CPU kernel, forward and backward:
// fedrun/model/native/fused_conv.py says when it applies (build.py builds it once per CPU). Two kernels: a first
// layer's, on K clients' minibatches x (K, B, C, H, W), given as the training images (N, C, H, W) and an index (K, B)
// into them, each image read where it lies (forward, backward below: no minibatch gathered), and a later layer's, on
// the images before it (forward_images, backward_images further down). For weights w (K, O, C, R, R) (each client's
// contiguous, any distance apart: a view of the cohort's flat parameters) and biases (K, O), forward writes
// relu(maxpool2x2(conv(x, w, padding pad)) + bias) into ``out``, a (K, B, O, P, Q) view whose strides give the memory
// that the layer after it reads (fused_conv.py: LAYOUTS), and returns each pooled value's winning position in its
// window (0..3 in row-major order, the first of equal values as torch's max_pool2d; 4: the ReLU is off and no gradient
// flows). Backward reads the output's gradient through its strides and gives the weights' and biases' gradients (and
// a later layer's, the images'). Why: oneDNN computes such a convolution (one input channel, 6 outputs per client) far
// below the CPU's peak, then the pooling writes, and its backward zero-fills and scatters, the full-resolution output;
// here each image stays in the L1 cache and the full-resolution output is never stored.
//
// How (the first layer's): an image row's even and odd columns are split into two planes, so that the convolution's
// output at the even (or odd) columns of a row, the candidates of Q <= 16 pooling windows, is one 16-lane vector: each
// tap is one vector load times a broadcast weight, shared by 6 output channels, and the four candidates of a row's
// windows are summed at once (24 independent sums: the multiply-adds overlap). Backward sums, for three taps at a
// time, the output gradient (nonzero at the windows' winners only) times the shifted input planes, lane by lane, over
// a client's chunk of CB images, then the lanes, then the chunks in order: a client's gradient has the same bits
// whatever the cohort around it and the number of threads.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cstring>
#include <immintrin.h>
#include <vector>

constexpr int L = 16;   // lanes of a vector: the pooled columns of one output row, computed at once (Q <= L)
constexpr int OG = 6;   // output channels that share each loaded input vector
constexpr int TG = 3;   // taps whose weight gradients backward sums at once
constexpr int64_t CB = 16;  // images of a client whose weight gradients backward sums as one piece
typedef float vf __attribute__((vector_size(64)));
typedef int vi __attribute__((vector_size(64)));
typedef uint8_t vu8 __attribute__((vector_size(16)));
typedef float vfu __attribute__((vector_size(64), aligned(4)));  // at any float's address
// typed loads and stores (not memcpy, which may alias anything): the compiler keeps sizes and indices in registers
static inline vf load(const float* p) { return *reinterpret_cast<const vfu*>(p); }
static inline void store(float* p, vf v) { *reinterpret_cast<vfu*>(p) = v; }
// a row's 16 codes (bytes) as ints and back: one instruction each with AVX-512 (GCC widens a byte vector by
// __builtin_convertvector one byte at a time)
typedef uint8_t vu8u __attribute__((vector_size(16), aligned(1)));
static inline vi codes_at(const uint8_t* p) {
#ifdef __AVX512F__
  return (vi)_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
  return __builtin_convertvector(*reinterpret_cast<const vu8u*>(p), vi);
#endif
}
static inline void store_codes(uint8_t* p, vi v) {
#ifdef __AVX512F__
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8((__m512i)v));
#else
  *reinterpret_cast<vu8u*>(p) = __builtin_convertvector(v, vu8);
#endif
}
// buffers that start on a cache line: a vector load across two lines costs two loads, and backward's inner loops are
// bound by their loads
template <class T>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <class U> LineAllocator(const LineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U> bool operator==(const LineAllocator<U>&) const { return true; }
};
using Floats = std::vector<float, LineAllocator<float>>;
// f(k) for each client k, the clients shared among the threads (the weights' layouts and sums, client by client:
// each client's values in the same order whatever the threads)
template <class F>
void each_client(int64_t K, const F& f) {
  at::parallel_for(0, K, 1, [&](int64_t begin, int64_t end) { for (int64_t k = begin; k < end; ++k) f(k); });
}

// a (K, O, C, R, R) weight stack whose clients' blocks are each contiguous, any distance apart (a view of a cohort's
// flat parameters or gradient): the distance between them
static int64_t client_stride(const torch::Tensor& w) {
  TORCH_CHECK(w.dim() == 5 && w.scalar_type() == torch::kFloat && w.stride(4) == 1 && w.stride(3) == w.size(4) &&
              w.stride(2) == w.size(3) * w.size(4) && w.stride(1) == w.size(2) * w.stride(2),
              "conv_pool_relu: weights (K, O, C, R, R) float32, each client's contiguous");
  return w.size(0) == 1 ? w.size(1) * w.stride(1) : w.stride(0);
}
// the weights' gradient: ``into`` (zeroed; a view of the cohort's flat gradient, each client's block contiguous) where
// given, else new zeros
static torch::Tensor gradient_into(const c10::optional<torch::Tensor>& into, at::IntArrayRef sizes,
                                   const torch::TensorOptions& options) {
  if (!into.has_value()) return torch::zeros(sizes, options);
  TORCH_CHECK(into->sizes() == sizes, "conv_pool_relu: the weights' gradient into a view of their shape");
  client_stride(*into);
  into->zero_();
  return *into;
}

struct Strides {  // a (K, B, C, H, W) view's strides, in elements: where element [k][b][c][y][x] is
  int64_t k, b, c, y, x;
  explicit Strides(const torch::Tensor& t)
      : k(t.stride(0)), b(t.stride(1)), c(t.stride(2)), y(t.stride(3)), x(t.stride(4)) {}
  int64_t at(int64_t k_, int64_t b_, int64_t c_, int64_t y_, int64_t x_) const {
    return k_ * k + b_ * b + c_ * c + y_ * y + x_ * x;
  }
};

// from[l * stride] for the first n lanes l (zero above): one gather instruction with AVX-512
static inline vf gather(const float* from, int64_t stride, int64_t n) {
#ifdef __AVX512F__
  if (stride * (L - 1) <= INT32_MAX) {
    const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(int(stride)));
    return (vf)_mm512_mask_i32gather_ps(_mm512_setzero_ps(), __mmask16((1u << n) - 1), at, from, 4);
  }
#endif
  vf v = {};
  for (int64_t l = 0; l < n; ++l) v[l] = from[l * stride];
  return v;
}

// n floats from ``from`` to ``to`` in vectors (a call to memcpy costs more than the copy of an image row)
static inline void copy_row(const float* from, int64_t n, float* to) {
  if (n < L) {
    for (int64_t x = 0; x < n; ++x) to[x] = from[x];
    return;
  }
  for (int64_t x = 0; x + L <= n; x += L) store(to + x, load(from + x));
  if (n % L) store(to + n - L, load(from + n - L));
}

template <int R>
struct Geo {
  static constexpr int64_t M = L + R;  // a plane's row: the even (or odd) columns of the padded image
  int64_t K, B, C, H, W, O, pad, P, Q, rows;
  Geo(const torch::Tensor& images, const torch::Tensor& index, int64_t O_, int64_t pad_)
      : K(index.size(0)), B(index.size(1)), C(images.size(1)), H(images.size(2)), W(images.size(3)), O(O_), pad(pad_) {
    TORCH_CHECK(images.dim() == 4 && images.is_contiguous() && index.dim() == 2 && index.is_contiguous() &&
                index.scalar_type() == torch::kLong, "conv_pool_relu: images (N, C, H, W), index (K, B)");
    const int64_t* ip = index.data_ptr<int64_t>();
    for (int64_t r = 0; r < index.numel(); ++r)
      TORCH_CHECK(ip[r] >= 0 && ip[r] < images.size(0), "conv_pool_relu: image ", ip[r], " of ", images.size(0));
    P = (H + 2 * pad - R + 1) / 2; Q = (W + 2 * pad - R + 1) / 2; rows = 2 * P + R - 1;
    TORCH_CHECK(P >= 1 && Q >= 1 && Q <= L, "conv_pool_relu: ", Q, " pooled columns (1 to 16 fit)");
  }
  int64_t plane() const { return C * rows * M; }
  // client k's image b: images[index[k, b]]
  const float* image(const float* images, const int64_t* index, int64_t k, int64_t b) const {
    return images + index[k * B + b] * C * H * W;
  }
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
        copy_row(src + (c * H + sy) * W, W, row + pad);
        for (int64_t m = 0; m < M; ++m) {
          even[m] = row[2 * m];
          odd[m] = row[2 * m + 1];
        }
      }
  }
};

template <int R>
torch::Tensor forward_r(torch::Tensor x, torch::Tensor index, torch::Tensor w, torch::Tensor bias, int64_t pad,
                        torch::Tensor out) {
  const Geo<R> g(x, index, w.size(1), pad);
  constexpr int64_t M = Geo<R>::M;
  const int64_t K = g.K, B = g.B, C = g.C, O = g.O, P = g.P, Q = g.Q, rows = g.rows, KO = K * O, taps = C * R * R;
  const Strides so(out);
  auto codes = torch::empty({B, KO, P, L}, x.options().dtype(torch::kUInt8));
  const float* xp = x.data_ptr<float>(); const float* wp = w.data_ptr<float>(); const float* bp = bias.data_ptr<float>();
  const int64_t* ip = index.data_ptr<int64_t>(), ws = client_stride(w);
  float* op = out.data_ptr<float>(); uint8_t* cp = codes.data_ptr<uint8_t>();
  // the images client by client, so that a thread lays out a client's weights once for its images
  at::parallel_for(0, K * B, 1, [&](int64_t begin, int64_t end) {
    Floats planes(2 * g.plane()), wt((O + OG - 1) / OG * taps * OG), row(2 * M, 0.f);
    alignas(64) float outs[OG][L];
    for (int64_t item = begin, laid = -1; item < end; ++item) {
      const int64_t k = item / B, b = item % B;
      if (k != laid) {  // wt[o0 / OG][t][o]: the weights of output channel o0 + o at tap t, zero past O
        for (int64_t o0 = 0; o0 < O; o0 += OG)
          for (int64_t t = 0; t < taps; ++t)
            for (int o = 0; o < OG; ++o)
              wt[o0 * taps + t * OG + o] = o0 + o < O ? wp[k * ws + (o0 + o) * taps + t] : 0.f;
        laid = k;
      }
      g.split(g.image(xp, ip, k, b), planes.data(), row.data());
      for (int64_t o0 = 0; o0 < O; o0 += OG) {
        const int64_t og = std::min<int64_t>(OG, O - o0);
        for (int64_t p = 0; p < P; ++p) {
          // the four candidates of the row's windows at once: each broadcast weight serves four vectors, and the
          // 4 x OG sums are independent (the multiply-adds overlap)
          vf acc[4][OG] = {};
          const float* wc = wt.data() + o0 * taps;
          for (int64_t c = 0; c < C; ++c) {
            const float* at = planes.data() + (c * rows + 2 * p) * M;
            #pragma GCC unroll 8
            for (int i = 0; i < R; ++i)
              #pragma GCC unroll 8
              for (int j = 0; j < R; ++j, wc += OG) {
                vf v[4];
                #pragma GCC unroll 4
                for (int win = 0; win < 4; ++win) {
                  const int dy = win >> 1, dx = win & 1;
                  v[win] = load(at + ((dx + j) & 1) * g.plane() + (i + dy) * M + ((dx + j) >> 1));
                }
                #pragma GCC unroll 8
                for (int o = 0; o < OG; ++o) {
                  const float wo = wc[o];
                  #pragma GCC unroll 4
                  for (int win = 0; win < 4; ++win) acc[win][o] += wo * v[win];
                }
              }
          }
          vf best[OG]; vi code[OG];
          #pragma GCC unroll 8
          for (int o = 0; o < OG; ++o) {
            best[o] = acc[0][o]; code[o] = vi{};
            #pragma GCC unroll 4
            for (int win = 1; win < 4; ++win) {
              const vi more = acc[win][o] > best[o];
              best[o] = more ? acc[win][o] : best[o];
              code[o] = more ? vi{} + win : code[o];
            }
          }
          for (int64_t o = 0; o < og; ++o) {
            const int64_t ko = k * O + o0 + o;
            const vf v = best[o] + bp[ko];
            const vi on = v > 0.f;
            store(outs[o], on ? v : vf{});
            store_codes(cp + ((b * KO + ko) * P + p) * L, on ? code[o] : vi{} + 4);
          }
          for (int64_t o = 0; o < og; ++o)
            for (int64_t q = 0; q < Q; ++q) op[so.at(k, b, o0 + o, p, q)] = outs[o][q];
        }
      }
    }
  });
  return codes;
}

template <int R>
std::vector<torch::Tensor> backward_r(torch::Tensor grad, torch::Tensor codes, torch::Tensor x, torch::Tensor index,
                                      int64_t pad, const c10::optional<torch::Tensor>& dw_into) {
  const int64_t KO = codes.size(1);
  const Geo<R> g(x, index, KO / index.size(0), pad);
  constexpr int64_t M = Geo<R>::M;
  const int64_t K = g.K, B = g.B, C = g.C, O = g.O, P = g.P, Q = g.Q, rows = g.rows, taps = C * R * R, YL = 2 * P;
  const int64_t chunks = (B + CB - 1) / CB, per = O * taps + O;  // a chunk's sums: every weight's, then every bias's
  Floats sums(K * chunks * per);
  const float* xp = x.data_ptr<float>(); const float* gp = grad.data_ptr<float>();
  const int64_t* ip = index.data_ptr<int64_t>();
  const Strides sg(grad);
  const uint8_t* cp = codes.data_ptr<uint8_t>();
  const int64_t tp = (taps + TG - 1) / TG * TG;  // taps rounded up to whole groups (the extra ones: tap 0 again)
  std::vector<int64_t> offsets(2 * tp);  // where tap t's input starts in the planes, at row 0, for each dx
  for (int dx = 0; dx < 2; ++dx)
    for (int64_t t = 0; t < tp; ++t) {
      const int64_t u = t < taps ? t : 0, c = u / (R * R), i = u / R % R, j = u % R;
      offsets[dx * tp + t] = ((dx + j) & 1) * g.plane() + (c * rows + i) * M + ((dx + j) >> 1);
    }
  // one item: the sums of a part of the taps (all of them, unless the chunks are fewer than the threads: a lone
  // client's) over a client's chunk of CB images, lane by lane, the lanes then in order into the chunk's sums
  const int64_t groups = (taps + TG - 1) / TG, pieces = K * chunks;
  const int64_t parts = std::min<int64_t>(groups, std::max<int64_t>(1, at::get_num_threads() / pieces));
  at::parallel_for(0, pieces * parts, 1, [&](int64_t begin, int64_t end) {
    Floats planes(2 * g.plane()), gch(O * P * L, 0.f), G(YL * 2 * OG * L), row(2 * M, 0.f);
    Floats lanes(per * L);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t piece = item / parts, part = item % parts, k = piece / chunks, chunk = piece % chunks;
      const int64_t first = part * groups / parts * TG, last = std::min(taps, (part + 1) * groups / parts * TG);
      std::fill(lanes.begin(), lanes.end(), 0.f);
      for (int64_t b = chunk * CB; b < std::min(B, (chunk + 1) * CB); ++b) {
        for (int64_t o = 0; o < O; ++o)
          for (int64_t p = 0; p < P; ++p)
            store(gch.data() + (p * O + o) * L, gather(gp + sg.at(k, b, o, p, 0), sg.x, Q));
        g.split(g.image(xp, ip, k, b), planes.data(), row.data());
        for (int64_t o0 = 0; o0 < O; o0 += OG) {
          const int64_t og = std::min<int64_t>(OG, O - o0);
          // G[y][dx][o][q]: the output gradient before the pooling, at row y and column 2q + dx (every entry of the
          // og channels is written below; the rest stay zero)
          if (og < OG) std::fill(G.begin(), G.end(), 0.f);
          for (int64_t o = 0; o < og; ++o) {
            const int64_t ko = k * O + o0 + o;
            vf sum = {};
            for (int64_t p = 0; p < P; ++p) {
              const vi cv = codes_at(cp + ((b * KO + ko) * P + p) * L);
              const vf gv = cv < 4 ? load(gch.data() + (p * O + o0 + o) * L) : vf{};
              sum += gv;
              for (int win = 0; win < 4; ++win)
                store(G.data() + (((2 * p + (win >> 1)) * 2 + (win & 1)) * OG + o) * L, cv == win ? gv : vf{});
            }
            float* to = lanes.data() + (O * taps + o0 + o) * L;
            store(to, load(to) + sum);
          }
          // each tap's sum over the rows and both column parities of G times the input shifted by the tap, for TG
          // taps at a time (TG x OG sums in registers; each loaded vector of G serves TG taps)
          for (int64_t t0 = first; t0 < last; t0 += TG) {
            vf acc[TG][OG] = {};
            const float* gy = G.data();
            for (int64_t y = 0; y < YL; ++y, gy += 2 * OG * L) {
              const float* py = planes.data() + y * M;
              #pragma GCC unroll 2
              for (int dx = 0; dx < 2; ++dx) {
                // G's six vectors in registers for the TG taps, as named variables (an array indexed in a loop
                // stays in memory until the loop is unrolled, after the compiler decides what lives in registers:
                // each multiply-add then loaded its G again, and the loop waited on its loads)
                static_assert(OG == 6, "six named vectors of G");
                const float* gd = gy + dx * OG * L;
                vf g0 = load(gd), g1 = load(gd + L), g2 = load(gd + 2 * L), g3 = load(gd + 3 * L),
                   g4 = load(gd + 4 * L), g5 = load(gd + 5 * L);
#ifdef __AVX512F__
                asm("" : "+v"(g0), "+v"(g1), "+v"(g2), "+v"(g3), "+v"(g4), "+v"(g5));  // loaded once, here
#endif
                #pragma GCC unroll 8
                for (int t = 0; t < TG; ++t) {
                  const vf v = load(py + offsets[dx * tp + t0 + t]);
                  acc[t][0] += g0 * v; acc[t][1] += g1 * v; acc[t][2] += g2 * v;
                  acc[t][3] += g3 * v; acc[t][4] += g4 * v; acc[t][5] += g5 * v;
                }
              }
            }
            for (int64_t t = 0; t < std::min<int64_t>(TG, taps - t0); ++t)
              for (int64_t o = 0; o < og; ++o) {
                float* to = lanes.data() + ((o0 + o) * taps + t0 + t) * L;
                store(to, load(to) + acc[t][o]);
              }
          }
        }
      }
      float* mine = sums.data() + piece * per;
      for (int64_t e = 0; e < per; ++e) {
        const int64_t t = e % taps;
        if (e < O * taps ? t < first || t >= last : part > 0) continue;  // another part's taps, or its biases
        float total = 0.f;
        for (int l = 0; l < L; ++l) total += lanes[e * L + l];
        mine[e] = total;
      }
    }
  });
  auto dw = gradient_into(dw_into, {K, O, C, R, R}, x.options());
  auto db = torch::zeros({K, O}, x.options());
  float* dwp = dw.data_ptr<float>(); float* dbp = db.data_ptr<float>();
  const int64_t dws = client_stride(dw);
  each_client(K, [&](int64_t k) {
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const float* src = sums.data() + (k * chunks + chunk) * per;
      for (int64_t e = 0; e < O * taps; ++e) dwp[k * dws + e] += src[e];
      for (int64_t o = 0; o < O; ++o) dbp[k * O + o] += src[O * taps + o];
    }
  });
  return {dw, db};
}

// The later layer's kernel (LeNet-5's second convolution), on K clients' images x, a (K, B, C, H, W) view of any
// strides: the cohort's images side by side as oneDNN's grouped convolution takes them, or each client's own as the
// first kernel writes them for this one. Its codes: (B, K, OC, P, Q, 16), OC = ceil(O / 16) groups of 16 output
// channels. Why: oneDNN's grouped convolution runs these shapes (6 input and 16 output channels a client) at a third
// of the peak, and its backward computes the whole output's gradient, three quarters of it the zeros that the pooling
// leaves; here the output never leaves the registers and backward visits the pooling's winners only.
//
// How: forward vectorises over 16 output channels: each tap is one vector of weights times a broadcast input value,
// for the 2 x 2QG candidates of QG pooling windows in registers. Backward, output channel by channel, adds each
// winner's gradient times the input window under it (R rows of R * C contiguous values in a client's image) to the
// channel's weight gradient, held in registers, and times the channel's weights to the images' gradient; each
// client's minibatch is summed in chunks of CB images in a fixed order, the chunks' sums then in order: a client's
// gradient has the same bits whatever the cohort around it and the number of threads.
constexpr int64_t KG = 4;  // clients whose images backward reads together (their channels share cache lines)

// K clients' images x, a (K, B, C, H, W) view of any strides, and a client's zero-padded copy [y][x][c]
struct Images {
  int64_t K, B, C, H, W, pad, Hp, Wb, P, Q, size;
  Strides st;
  Images(const torch::Tensor& x, int64_t R, int64_t pad_, int64_t wide)
      : K(x.size(0)), B(x.size(1)), C(x.size(2)), H(x.size(3)), W(x.size(4)), pad(pad_), st(x) {
    Hp = H + 2 * pad;
    P = (Hp - R + 1) / 2; Q = (W + 2 * pad - R + 1) / 2;
    Wb = std::max(W + 2 * pad, wide + R - 1);
    size = Hp * Wb * C + 64;  // and room for backward's last vector of a window row
  }
  // image b of client k into a padded copy: a row at a time where the view's pixels are C contiguous values
  void copy_in(const float* x, int64_t k, int64_t b, float* img) const {
    const int64_t H = this->H, W = this->W, C = this->C, pad = this->pad, Wb = this->Wb;
    std::memset(img, 0, size * sizeof(float));
    x += st.at(k, b, 0, 0, 0);
    const bool rows = st.c == 1 && st.x == C;
    for (int64_t y = 0; y < H; ++y) {
      float* to = img + ((y + pad) * Wb + pad) * C;
      if (rows) { copy_row(x + y * st.y, W * C, to); continue; }
      for (int64_t xx = 0; xx < W; ++xx)
        for (int64_t c = 0; c < C; ++c) to[xx * C + c] = x[c * st.c + y * st.y + xx * st.x];
    }
  }
  // a padded copy's interior to image b of client k of ``x``, a view of the images' sizes and strides
  void copy_out(const float* img, int64_t k, int64_t b, float* x) const {
    const int64_t H = this->H, W = this->W, C = this->C, pad = this->pad, Wb = this->Wb;
    x += st.at(k, b, 0, 0, 0);
    const bool rows = st.c == 1 && st.x == C;
    for (int64_t y = 0; y < H; ++y) {
      const float* from = img + ((y + pad) * Wb + pad) * C;
      if (rows) { copy_row(from, W * C, x + y * st.y); continue; }
      for (int64_t xx = 0; xx < W; ++xx)
        for (int64_t c = 0; c < C; ++c) x[c * st.c + y * st.y + xx * st.x] = from[xx * C + c];
    }
  }
};

template <int R, int QG, int CC = 0>  // CC: the images' channels where fixed at compile time (0: read at run time)
torch::Tensor forward_images_r(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t pad, torch::Tensor out) {
  const int64_t K = w.size(0), O = w.size(1), OC = (O + L - 1) / L;
  const int64_t tiles0 = (x.size(4) + 2 * pad - R + 1) / 2;
  const Images im(x, R, pad, 2 * ((tiles0 + QG - 1) / QG) * QG);
  const int64_t B = im.B, C = CC ? CC : im.C, P = im.P, Q = im.Q, Wb = im.Wb, taps = R * R * C;
  TORCH_CHECK(P >= 1 && Q >= 1 && x.size(0) == K && C == w.size(2), "conv_pool_relu: images ", x.sizes(),
              " for weights ", w.sizes());
  const Strides so(out);
  auto codes = torch::empty({B, K, OC, P, Q, L}, x.options().dtype(torch::kUInt8));
  Floats wt(K * OC * taps * L, 0.f);  // [k][oc][(i * R + j) * C + c][lane]
  const float* wp = w.data_ptr<float>();
  const int64_t ws = client_stride(w);
  each_client(K, [&](int64_t k) {
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < R * R; ++t)
          wt[((k * OC + o / L) * taps + t * C + c) * L + o % L] = wp[k * ws + (o * C + c) * R * R + t];
  });
  const float* xp = x.data_ptr<float>(); const float* bp = bias.data_ptr<float>();
  float* op = out.data_ptr<float>(); uint8_t* cp = codes.data_ptr<uint8_t>();
  at::parallel_for(0, B * K, 1, [&](int64_t begin, int64_t end) {
    Floats img(im.size);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / K, k = item % K;
      im.copy_in(xp, k, b, img.data());
      for (int64_t oc = 0; oc < OC; ++oc) {
        const float* wk = wt.data() + (k * OC + oc) * taps * L;
        const int64_t og = std::min<int64_t>(L, O - oc * L);
        for (int64_t p = 0; p < P; ++p)
          for (int64_t q0 = 0; q0 < Q; q0 += QG) {
            vf acc[2][2 * QG] = {};
            for (int i = 0; i < R; ++i)
              for (int j = 0; j < R; ++j) {
                const float* at = img.data() + ((2 * p + i) * Wb + 2 * q0 + j) * C;
                const float* wc = wk + (i * R + j) * C * L;
                for (int64_t c = 0; c < C; ++c) {
                  const vf v = load(wc + c * L);
                  #pragma GCC unroll 2
                  for (int dy = 0; dy < 2; ++dy)
                    #pragma GCC unroll 16
                    for (int n = 0; n < 2 * QG; ++n) acc[dy][n] += at[(dy * Wb + n) * C + c] * v;
                }
              }
            for (int64_t n = 0; n < std::min<int64_t>(QG, Q - q0); ++n) {
              vf best = acc[0][2 * n]; vi code = {};
              #pragma GCC unroll 4
              for (int win = 1; win < 4; ++win) {
                const vf a = acc[win >> 1][2 * n + (win & 1)];
                const vi more = a > best;
                best = more ? a : best;
                code = more ? vi{} + win : code;
              }
              vf bv = {};
              std::memcpy(&bv, bp + k * O + oc * L, og * sizeof(float));
              const vf v = best + bv;
              const vi on = v > 0.f;
              const vf r = on ? v : vf{};
              store_codes(cp + ((((b * K + k) * OC + oc) * P + p) * Q + q0 + n) * L, on ? code : vi{} + 4);
              float* to = op + so.at(k, b, oc * L, p, q0 + n);
              for (int64_t o = 0; o < og; ++o) to[o * so.c] = r[o];
            }
          }
      }
    }
  });
  return codes;
}

template <int R, int V>
std::vector<torch::Tensor> backward_images_r(torch::Tensor grad, torch::Tensor codes, torch::Tensor x, torch::Tensor w,
                                             int64_t pad, torch::Tensor dx,
                                             const c10::optional<torch::Tensor>& dw_into) {
  const int64_t K = w.size(0), O = w.size(1), OC = (O + L - 1) / L;
  const Images im(x, R, pad, 0);
  const int64_t B = im.B, C = im.C, P = im.P, Q = im.Q, Wb = im.Wb, row = V * L, size = im.size;
  const bool images = dx.defined();
  const Strides sg(grad);
  const int64_t chunks = (B + CB - 1) / CB, per = O * R * row + OC * L;  // a chunk's sums: weights', then biases'
  Floats wr(K * O * R * row, 0.f);  // [k][o][i][j * C + c], zero past R * C
  const float* wp = w.data_ptr<float>();
  const int64_t ws = client_stride(w);
  each_client(K, [&](int64_t k) {
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < R; ++i)
          for (int64_t j = 0; j < R; ++j)
            wr[((k * O + o) * R + i) * row + j * C + c] = wp[k * ws + ((o * C + c) * R + i) * R + j];
  });
  Floats partial(K * chunks * per, 0.f);
  const Images dims(images ? dx : x, R, pad, 0);  // the images' gradient: dx's strides
  const float* xp = x.data_ptr<float>(); const float* gp = grad.data_ptr<float>();
  const uint8_t* cp = codes.data_ptr<uint8_t>();
  float* dxp = images ? dx.data_ptr<float>() : nullptr;
  const int64_t groups = (K + KG - 1) / KG;
  at::parallel_for(0, chunks * groups, 1, [&](int64_t begin, int64_t end) {
    Floats img(size), dimg(size), gs(P * Q * L), gw(P * Q + 1);
    // the windows in an order where consecutive ones (but at 8 switches) are 3 or more apart in a row or column: their
    // inputs (R <= 5) do not overlap, so a winner's read of the images' gradient does not wait on the one before's write
    std::vector<int> where(P * Q + 1), spot(P * Q * L), order;
    for (int pr = 0; pr < 3; ++pr)
      for (int qr = 0; qr < 3; ++qr)
        for (int64_t p = pr; p < P; p += 3)
          for (int64_t q = qr; q < Q; q += 3) order.push_back(p * Q + q);
    std::vector<uint8_t> cs(P * Q * L);
    for (int64_t item = begin; item < end; ++item)
      for (int64_t b = item / groups * CB; b < std::min(B, (item / groups + 1) * CB); ++b)
        for (int64_t k = item % groups * KG; k < std::min(K, (item % groups + 1) * KG); ++k) {
        float* mine = partial.data() + (k * chunks + item / groups) * per;
        im.copy_in(xp, k, b, img.data());
        if (images) std::memset(dimg.data(), 0, dimg.size() * sizeof(float));
        for (int64_t oc = 0; oc < OC; ++oc) {
          const int64_t og = std::min<int64_t>(L, O - oc * L);
          std::memcpy(cs.data(), cp + (((b * K + k) * OC + oc) * P) * Q * L, P * Q * L);
          vf sum = {};
          for (int64_t p = 0, pq = 0; p < P; ++p)
            for (int64_t q = 0; q < Q; ++q, ++pq) {
              const float* from = gp + sg.at(k, b, oc * L, p, q);
              vf g = gather(from, sg.c, og);
              g = codes_at(cs.data() + pq * L) < 4 ? g : vf{};
              sum += g;
              store(gs.data() + pq * L, g);
            }
          float* db = mine + O * R * row + oc * L;
          store(db, load(db) + sum);
          for (int64_t p = 0; p < P; ++p)  // where each window's winner starts in the image, channel by channel
            for (int64_t q = 0; q < Q; ++q) {
              const vi cv = codes_at(cs.data() + (p * Q + q) * L);
              const vi at = (int)((2 * p * Wb + 2 * q) * C) + ((cv >> 1) & 1) * (int)(Wb * C) + (cv & 1) * (int)C;
              std::memcpy(spot.data() + (p * Q + q) * L, &at, sizeof(at));
            }
          for (int64_t o = 0; o < og; ++o) {
            int64_t n = 0;  // the channel's winners: where each window starts in the image, and its gradient
            for (const int pq : order) {
              where[n] = spot[pq * L + o];
              gw[n] = gs[pq * L + o];
              n += cs[pq * L + o] < 4;
            }
            const int64_t oo = oc * L + o;
            float* dw = mine + oo * R * row;
            const float* wo = wr.data() + (k * O + oo) * R * row;
            vf acc[R][V], wv[R][V];
            #pragma GCC unroll 8
            for (int i = 0; i < R; ++i)
              #pragma GCC unroll 8
              for (int v = 0; v < V; ++v) {
                acc[i][v] = load(dw + i * row + v * L);
                wv[i][v] = load(wo + i * row + v * L);
              }
            const float* gwp = gw.data(); const int* wherep = where.data();
            const float* imgp = img.data(); float* dimgp = dimg.data();
            for (int64_t m = 0; m < n; ++m) {
              const float gv = gwp[m];
              const int64_t at = wherep[m];
              #pragma GCC unroll 8
              for (int i = 0; i < R; ++i)
                #pragma GCC unroll 8
                for (int v = 0; v < V; ++v) acc[i][v] += gv * load(imgp + at + i * Wb * C + v * L);
              if (images)
                #pragma GCC unroll 8
                for (int i = 0; i < R; ++i)
                  #pragma GCC unroll 8
                  for (int v = 0; v < V; ++v) {
                    float* d = dimgp + at + i * Wb * C + v * L;
                    store(d, load(d) + gv * wv[i][v]);
                  }
            }
            #pragma GCC unroll 8
            for (int i = 0; i < R; ++i)
              #pragma GCC unroll 8
              for (int v = 0; v < V; ++v) store(dw + i * row + v * L, acc[i][v]);
          }
        }
        if (images) dims.copy_out(dimg.data(), k, b, dxp);
      }
  });
  auto dw = gradient_into(dw_into, w.sizes(), w.options());
  auto db = torch::zeros({K, O}, x.options());
  float* dwp = dw.data_ptr<float>(); float* dbp = db.data_ptr<float>();
  const int64_t dws = client_stride(dw);
  each_client(K, [&](int64_t k) {
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const float* src = partial.data() + (k * chunks + chunk) * per;
      for (int64_t o = 0; o < O; ++o) {
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < R; ++i)
            for (int64_t j = 0; j < R; ++j)
              dwp[k * dws + ((o * C + c) * R + i) * R + j] += src[(o * R + i) * row + j * C + c];
        dbp[k * O + o] += src[O * R * row + o];
      }
    }
  });
  return {dw, db};
}

// the entry points: forward writes into ``out``, a (K, B, O, P, Q) view of any strides, and returns the winners' codes;
// backward writes the weights' gradient into ``dw`` where given (a view of the cohort's flat gradient: no copy)
torch::Tensor forward(torch::Tensor x, torch::Tensor index, torch::Tensor w, torch::Tensor bias, int64_t pad,
                      torch::Tensor out) {
  switch (w.size(3)) {
    case 3: return forward_r<3>(x, index, w, bias, pad, out);
    case 5: return forward_r<5>(x, index, w, bias, pad, out);
  }
  TORCH_CHECK(false, "kernel size ", w.size(3));
}
std::vector<torch::Tensor> backward(torch::Tensor grad, torch::Tensor codes, torch::Tensor x, torch::Tensor index,
                                    int64_t R, int64_t pad, c10::optional<torch::Tensor> dw) {
  switch (R) {
    case 3: return backward_r<3>(grad, codes, x, index, pad, dw);
    case 5: return backward_r<5>(grad, codes, x, index, pad, dw);
  }
  TORCH_CHECK(false, "kernel size ", R);
}

template <int R>
torch::Tensor forward_images_q(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t pad, torch::Tensor out) {
  const int64_t Q = (x.size(4) + 2 * pad - R + 1) / 2;
  switch (std::min<int64_t>(Q, 6)) {  // pooled columns in registers at once: 2 x 2QG accumulators
    case 1: return forward_images_r<R, 1>(x, w, bias, pad, out);
    case 2: return forward_images_r<R, 2>(x, w, bias, pad, out);
    case 3: return forward_images_r<R, 3>(x, w, bias, pad, out);
    case 4: return forward_images_r<R, 4>(x, w, bias, pad, out);
    // LeNet-5's second convolution (6 channels, 5 pooled columns) with its channels fixed: the inner loop's input
    // addresses are then constant offsets, not 2 x 2QG offsets reloaded from registers that it runs short of
    case 5: return x.size(2) == 6 ? forward_images_r<R, 5, 6>(x, w, bias, pad, out)
                                  : forward_images_r<R, 5>(x, w, bias, pad, out);
    default: return forward_images_r<R, 6>(x, w, bias, pad, out);
  }
}
torch::Tensor forward_images(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t pad, torch::Tensor out) {
  switch (w.size(3)) {
    case 3: return forward_images_q<3>(x, w, bias, pad, out);
    case 5: return forward_images_q<5>(x, w, bias, pad, out);
  }
  TORCH_CHECK(false, "kernel size ", w.size(3));
}

// backward of the later kernel: the weights' and biases' gradients (the weights' into ``dw`` where given, as the first
// kernel's); the images' into ``dx`` (a view of the images' sizes, any strides) where it is defined
template <int R>
std::vector<torch::Tensor> backward_images_v(torch::Tensor grad, torch::Tensor codes, torch::Tensor x, torch::Tensor w,
                                             int64_t pad, torch::Tensor dx, const c10::optional<torch::Tensor>& dw) {
  switch ((R * w.size(2) + L - 1) / L) {  // vectors of a window row's R * C values
    case 1: return backward_images_r<R, 1>(grad, codes, x, w, pad, dx, dw);
    case 2: return backward_images_r<R, 2>(grad, codes, x, w, pad, dx, dw);
    case 3: return backward_images_r<R, 3>(grad, codes, x, w, pad, dx, dw);
    case 4: return backward_images_r<R, 4>(grad, codes, x, w, pad, dx, dw);
  }
  TORCH_CHECK(false, "conv_pool_relu: ", w.size(2), " input channels of a ", R, "x", R, " kernel (at most ",
              4 * L / R, ")");
}
std::vector<torch::Tensor> backward_images(torch::Tensor grad, torch::Tensor codes, torch::Tensor x, torch::Tensor w,
                                           int64_t pad, std::optional<torch::Tensor> dx,
                                           c10::optional<torch::Tensor> dw) {
  const torch::Tensor into = dx.has_value() ? *dx : torch::Tensor();
  switch (w.size(3)) {
    case 3: return backward_images_v<3>(grad, codes, x, w, pad, into, dw);
    case 5: return backward_images_v<5>(grad, codes, x, w, pad, into, dw);
  }
  TORCH_CHECK(false, "kernel size ", w.size(3));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward);
  m.def("backward", &backward);
  m.def("forward_images", &forward_images);
  m.def("backward_images", &backward_images);
}
