// SimpleDeepFMNN (torchrec.models.deepfm), returning the logit.
#include <fmt/format.h>

#include "over_arch.h"
#include "pairwise_interaction.h"
#include "shardrec/core/dense/activations.h"
#include "shardrec/core/dense/factorization_machine.h"

namespace shardrec::models {

namespace {

class DeepFmModel : public RecModel {
 public:
  DeepFmModel(const ModelConfig& c, int64_t features, int64_t dim, const dense::DenseInit& init)
      : features_(features),
        dim_(dim),
        dense_in_(c.dense_in_features),
        deep_dim_(c.deep_fm_dimension),
        dense0_("dense_arch.model.0.", c.dense_in_features, c.deepfm_hidden_layer_size, true, init),
        dense2_("dense_arch.model.2.", c.deepfm_hidden_layer_size, dim, true, init),
        deep_("inter_arch.deep_fm.dense_module.0.", (features + 1) * dim, c.deep_fm_dimension, true, init),
        over_("over_arch.model.0.", dim + c.deep_fm_dimension + 1, 1, true, init) {}

  StatusOr<Tensor> Forward(const Tensor& dense, const Tensor& pooled) override {
    if (dense.ndim() != 2 || pooled.ndim() != 2 || dense.size(1) != dense_in_ || pooled.size(1) != features_ * dim_ ||
        pooled.size(0) != dense.size(0)) {
      return InvalidArgumentError(fmt::format("deepfm: dense features [B, {}] and pooled embeddings [B, {}] expected, got {} "
                                              "and {}", dense_in_, features_ * dim_, ShapeString(dense.shape()),
                                              ShapeString(pooled.shape())));
    }
    SR_ASSIGN_OR_RETURN(Tensor h, dense0_.Forward(dense));
    SR_ASSIGN_OR_RETURN(h, relu0_.Forward(h));
    SR_ASSIGN_OR_RETURN(h, dense2_.Forward(h));
    SR_ASSIGN_OR_RETURN(Tensor d, relu2_.Forward(h));
    const Tensor flat = ConcatColumns(d, pooled);
    SR_ASSIGN_OR_RETURN(Tensor deep, deep_.Forward(flat));
    SR_ASSIGN_OR_RETURN(deep, deep_relu_.Forward(deep));
    SR_ASSIGN_OR_RETURN(Tensor fm, fm_.Forward(flat));
    SR_ASSIGN_OR_RETURN(Tensor logits, over_.Forward(ConcatColumns(ConcatColumns(d, deep), fm)));
    return logits.Reshape({logits.size(0)});
  }

  StatusOr<Tensor> Backward(const Tensor& dlogits, const GradientsReady& ready) override {
    SR_ASSIGN_OR_RETURN(Tensor column, AsColumn(dlogits));
    SR_ASSIGN_OR_RETURN(Tensor dcat, over_.Backward(column));
    SR_RETURN_IF_ERROR(Ready(ready, over_.Parameters()));
    Tensor dd, drest, ddeep, dfm;
    SplitColumns(dcat, dim_, &dd, &drest);
    SplitColumns(drest, deep_dim_, &ddeep, &dfm);
    SR_ASSIGN_OR_RETURN(ddeep, deep_relu_.Backward(ddeep));
    SR_ASSIGN_OR_RETURN(Tensor dflat, deep_.Backward(ddeep));
    SR_RETURN_IF_ERROR(Ready(ready, deep_.Parameters()));
    SR_ASSIGN_OR_RETURN(Tensor dflat_fm, fm_.Backward(dfm));
    for (int64_t i = 0; i < dflat.numel(); ++i) dflat.data<float>()[i] += dflat_fm.data<float>()[i];
    Tensor dd_flat, dpooled;
    SplitColumns(dflat, dim_, &dd_flat, &dpooled);
    for (int64_t i = 0; i < dd.numel(); ++i) dd.data<float>()[i] += dd_flat.data<float>()[i];
    SR_ASSIGN_OR_RETURN(Tensor g, relu2_.Backward(dd));
    SR_ASSIGN_OR_RETURN(g, dense2_.Backward(g));
    SR_ASSIGN_OR_RETURN(g, relu0_.Backward(g));
    SR_RETURN_IF_ERROR(dense0_.Backward(g).status());
    std::vector<dense::Parameter*> dense_arch = dense0_.Parameters();
    for (auto* p : dense2_.Parameters()) dense_arch.push_back(p);
    SR_RETURN_IF_ERROR(Ready(ready, dense_arch));
    return dpooled;
  }

  std::vector<dense::Parameter*> Parameters() override {
    std::vector<dense::Parameter*> out;
    for (dense::Linear* l : {&dense0_, &dense2_, &deep_, &over_}) {
      for (auto* p : l->Parameters()) out.push_back(p);
    }
    return out;
  }

 private:
  int64_t features_, dim_, dense_in_, deep_dim_;
  dense::Linear dense0_, dense2_, deep_, over_;
  dense::Relu relu0_, relu2_, deep_relu_;
  dense::FactorizationMachine fm_;
};

}  // namespace

StatusOr<std::unique_ptr<RecModel>> CreateDeepFm(const ModelConfig& c, int64_t features, int64_t dim,
                                                 const dense::DenseInit& init) {
  return std::unique_ptr<RecModel>(new DeepFmModel(c, features, dim, init));
}

}  // namespace shardrec::models
