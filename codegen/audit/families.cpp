// The op family table and its matcher (see families.h; documented in docs/audit.md).
#include "audit/families.h"

#include <fnmatch.h>

#include <string>

namespace autocastgen::audit {

const std::vector<OpFamily>& op_families() {
  // Order matters: earlier rows take precedence (`upsample_linear1d` is resampling, not linear;
  // `log_softmax` is softmax, not a logarithm; `cross_entropy_loss` is a loss, not a reduction).
  static const std::vector<OpFamily> families = {
      {"autograd", "autograd helpers (backward, jvp)", "rarely listed: autograd runs them on what the forward op produced",
       "*backward* *_jvp jvp*"},
      {"metadata", "metadata, testing and bookkeeping", "never listed: no floating-point math happens",
       "is_* sym_* dim dimI dimV size stride numel item detach data get_device output_nr version result_type retains_grad "
       "storage_offset dense_dim sparse_dim nnz local_scalar_dense fw_primal make_dual unpack_dual new_* shape_as_tensor "
       "has_same_storage_numel debug_has_internal_overlap add_batch_dim remove_batch_dim cast_* assert* functional_assert* "
       "functional_sym_constrain* test_* foobar pin_memory to_cpu propagate_xla_data autocast_to_* qscheme hash_tensor "
       "cudnn_is_acceptable"},
      {"foreach_fused", "foreach and fused multi-tensor ops", "rarely listed: optimizer internals that keep their own dtypes",
       "foreach_* fused_* amp_*"},
      {"quantized_sparse", "quantization, sparse and nested layouts", "rarely listed: integer or layout-specific kernels",
       "*quantiz* q_* qint* *qparams* *fbgemm* *int4* *int8* *pack* *sparse* *csr* *coo* *csc* *bsr* *bsc* cslt* "
       "to_mkldnn* mkldnn_reorder* mkldnn_reshape mkldnn_transpose to_dense *rowwise_prune* *nested* values indices *crow_indices* "
       "*col_indices* coalesce* *_coalesced* to_padded* *padded_tensor* int_repr dequantize*"},
      {"losses", "losses", "fp32 (accumulation over the batch); binary_cross_entropy is banned on CUDA",
       "*loss* *cross_entropy* nll* *kl_div* ctc* *margin* *triplet*"},
      {"norms", "normalizations and norms", "fp32 (statistics in low precision lose accuracy); norm.* may be fp32_append_dtype",
       "*norm *norm_* *normalize*"},
      {"softmax_activation", "softmax and activations",
       "softmax-like: fp32_set_opt_dtype or fp32; activations: usually unlisted (run in the input dtype)",
       "*softmax* *softmin* *sigmoid* *gelu* *silu* elu* *relu* selu* celu* *mish* *hardtanh* *hardswish* *hardsigmoid* "
       "*softplus* *softshrink* *hardshrink* *tanhshrink* *threshold* glu*"},
      {"resampling_pooling", "resampling, padding and pooling", "upsampling: fp32 on CUDA; pooling and padding: fp32 on CPU",
       "*upsample* *interpolate* *grid_sampler* *affine_grid* pixel_shuffle pixel_unshuffle *pool* *pad* *im2col* "
       "*col2im* *fold"},
      {"matmul_conv", "matmul, convolution, attention and RNN cells",
       "lower_precision_fp (tensor-core friendly); promote for mixed-input products (dot, vdot, bilinear)",
       "*mm *mm_v[0-9] mm* *bmm* *matmul* cross *transformer* *rescale_qkv* addmv mv addr dot *vdot* inner outer ger "
       "*einsum* *tensordot* *linear* *conv* *cudnn* *miopen* *mkldnn* *attention* lstm* gru* rnn* *_cell *multi_dot* "
       "kron prelu"},
      {"distance", "distances and similarities", "fp32", "*dist* *cosine_similarity*"},
      {"linalg_fft", "linear algebra and FFT", "fp32 (decompositions and transforms need the range)",
       "linalg_* fft_* *stft* *cholesky* qr *svd* *eig* lu* *_lu* *triangular_solve* *inverse* det *logdet* *matrix_exp* "
       "*matrix_power* *lstsq* *solve* *ormqr* *geqrf* *orgqr* *householder* *lobpcg* trace"},
      {"reductions", "reductions and scans", "fp32_set_opt_dtype when the op takes `ScalarType? dtype`, else fp32",
       "*sum* *mean* *prod* std* var* *median* mode *quantile* amax amin *aminmax* max min *argmax* *argmin* *logsumexp* "
       "*logcumsumexp* cum* *count_nonzero* all any *histc* *histogram* *bincount* cov *corrcoef* diff *gradient* *trapz* "
       "*trapezoid* *kthvalue* *segment_reduce*"},
      {"transcendental", "pointwise transcendental", "fp32 (exp/log/pow and friends overflow or lose precision in 16 bits)",
       "exp exp2 expm1 log log2 log10 log1p pow float_power sqrt rsqrt reciprocal sin cos tan asin acos atan arcsin arccos "
       "arctan arctan2 sinh cosh tanh asinh acosh atanh arcsinh arccosh arctanh erf erfc erfinv lgamma digamma polygamma "
       "mvlgamma logit sinc i0 xlogy logaddexp logaddexp2 igamma igammac hypot ldexp frexp special_*"},
      {"pointwise_arith", "pointwise arithmetic and comparison",
       "usually unlisted (they run in the input dtype); promote when several floating inputs combine (addcdiv, atan2)",
       "add sub subtract mul multiply div divide true_divide floor_divide rsub remainder fmod clamp clamp_min clamp_max clip "
       "where abs absolute neg negative sign sgn signbit round floor ceil trunc fix frac lerp addcmul addcdiv atan2 eq ne lt "
       "gt ge le equal greater greater_equal less less_equal not_equal isclose allclose minimum maximum fmin fmax copysign "
       "heaviside nan_to_num square positive conj conj_physical real imag angle logical_* bitwise_* __*__ isnan isinf "
       "isfinite isposinf isneginf isreal nextafter deg2rad rad2deg gcd lcm masked_fill masked_scale"},
      {"random", "random sampling and dropout", "unlisted (sampling keeps the input dtype)",
       "*dropout* *bernoulli* normal* rand* *multinomial* *poisson* binomial* *dirichlet* standard_gamma* *sample* *sobol* "
       "*philox*"},
      {"shape_indexing", "shape, indexing and data movement",
       "unlisted; promote when several inputs are combined into one tensor (cat, stack, index_put, scatter_add)",
       "*view* *reshape* cat *concat* *stack* *index* *gather* *scatter* *slice* *select* narrow* *permute* *transpose* t "
       "*expand* *repeat* *flip* *roll* *rot90* *split* *chunk* *squeeze* *flatten* *clone* *contiguous* to type_as* *copy* "
       "take* put* *masked* *nonzero* *sort* *topk* *unique* *embedding* *diag* *tril* *triu* *alias* as_strided* *movedim* "
       "*moveaxis* *swap* *unbind* *tile* *broadcast* align* rename* refine_names* row_stack column_stack hstack vstack "
       "dstack resize* fill* *zeros_like *ones_like *empty_like *full_like lift* *searchsorted* *bucketize* block_diag* "
       "cartesian_prod* combinations* meshgrid* atleast_* one_hot argwhere isin complex chalf adjoint mH mT matrix_H "
       "numpy_T ravel *channel_shuffle*"},
      {"other", "other", "review one by one", "*"},
  };
  return families;
}

const OpFamily& family_of(std::string_view op_name) {
  std::string_view name = op_name;
  while (name.starts_with('_') && !name.starts_with("__")) name.remove_prefix(1);
  const std::string text(name);
  for (const OpFamily& family : op_families()) {
    std::string_view patterns = family.patterns;
    while (!patterns.empty()) {
      const size_t space = patterns.find(' ');
      const std::string glob(patterns.substr(0, space));
      if (fnmatch(glob.c_str(), text.c_str(), 0) == 0) return family;
      patterns = space == std::string_view::npos ? std::string_view() : patterns.substr(space + 1);
    }
  }
  return op_families().back();
}

}  // namespace autocastgen::audit
