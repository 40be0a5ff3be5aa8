// DLRM and DLRM_DCN (torchrec.models.dlrm): the two differ only in the
// interaction between the dense arch and the over arch.
#include <optional>

#include <fmt/format.h>

#include "over_arch.h"
#include "pairwise_interaction.h"
#include "shardrec/core/dense/crossnet.h"

namespace shardrec::models {

namespace {

Status CheckInputs(const Tensor& dense, const Tensor& pooled, int64_t dense_in, int64_t pooled_width) {
  if (!SameDType(dense.dtype(), dtype::kFloat32) || dense.ndim() != 2 || dense.size(1) != dense_in) {
    return InvalidArgumentError(fmt::format("dense features must be fp32 [B, {}], got {}", dense_in, ShapeString(dense.shape())));
  }
  if (!SameDType(pooled.dtype(), dtype::kFloat32) || pooled.ndim() != 2 || pooled.size(1) != pooled_width ||
      pooled.size(0) != dense.size(0)) {
    return InvalidArgumentError(fmt::format("pooled embeddings must be fp32 [{}, {}], got {}", dense.size(0), pooled_width,
                                            ShapeString(pooled.shape())));
  }
  return Status::Ok();
}

class Dlrm : public RecModel {
 public:
  // dcn: a LowRankCrossNet over [dense, pooled] instead of pairwise dots.
  static StatusOr<std::unique_ptr<RecModel>> Create(const ModelConfig& c, int64_t features, int64_t dim,
                                                    const dense::DenseInit& init) {
    auto m = std::unique_ptr<Dlrm>(new Dlrm(c, features, dim));
    SR_ASSIGN_OR_RETURN(m->dense_arch_, dense::Mlp::Create("dense_arch.model.", c.dense_in_features,
                                                           c.dense_arch_layer_sizes, true, "relu", init));
    int64_t over_in = m->pairwise_.out_features();
    if (c.model == "dcn") {
      over_in = (features + 1) * dim;
      SR_ASSIGN_OR_RETURN(m->crossnet_, dense::LowRankCrossNet::Create("inter_arch.crossnet.", over_in, c.dcn_num_layers,
                                                                       c.dcn_low_rank_dim, init));
    }
    SR_ASSIGN_OR_RETURN(m->over_arch_, OverArch::Create(over_in, c.over_arch_layer_sizes, init));
    return std::unique_ptr<RecModel>(std::move(m));
  }

  StatusOr<Tensor> Forward(const Tensor& dense, const Tensor& pooled) override {
    SR_RETURN_IF_ERROR(CheckInputs(dense, pooled, config_.dense_in_features, features_ * dim_));
    SR_ASSIGN_OR_RETURN(Tensor d, dense_arch_->Forward(dense));
    Tensor z;
    if (crossnet_) {
      SR_ASSIGN_OR_RETURN(z, crossnet_->Forward(ConcatColumns(d, pooled)));
    } else {
      z = pairwise_.Forward(d, pooled);
    }
    return over_arch_->Forward(z);
  }

  StatusOr<Tensor> Backward(const Tensor& dlogits, const GradientsReady& ready) override {
    SR_ASSIGN_OR_RETURN(Tensor dz, over_arch_->Backward(dlogits, ready));
    Tensor dd, dpooled;
    if (crossnet_) {
      SR_ASSIGN_OR_RETURN(Tensor dflat, crossnet_->Backward(dz));
      SR_RETURN_IF_ERROR(Ready(ready, crossnet_->Parameters()));
      SplitColumns(dflat, dim_, &dd, &dpooled);
    } else {
      pairwise_.Backward(dz, &dd, &dpooled);
    }
    SR_RETURN_IF_ERROR(dense_arch_->Backward(dd).status());
    SR_RETURN_IF_ERROR(Ready(ready, dense_arch_->Parameters()));
    return dpooled;
  }

  std::vector<dense::Parameter*> Parameters() override {
    std::vector<dense::Parameter*> out = dense_arch_->Parameters();
    if (crossnet_) {
      for (auto* p : crossnet_->Parameters()) out.push_back(p);
    }
    over_arch_->AddParameters(&out);
    return out;
  }

 private:
  Dlrm(const ModelConfig& c, int64_t features, int64_t dim)
      : config_(c), features_(features), dim_(dim), pairwise_(features, dim) {}
  ModelConfig config_;
  int64_t features_, dim_;
  std::unique_ptr<dense::Mlp> dense_arch_;
  PairwiseInteraction pairwise_;
  std::unique_ptr<dense::LowRankCrossNet> crossnet_;
  std::optional<OverArch> over_arch_;
};

}  // namespace

StatusOr<std::unique_ptr<RecModel>> CreateDlrm(const ModelConfig& c, int64_t features, int64_t dim,
                                               const dense::DenseInit& init) {
  return Dlrm::Create(c, features, dim, init);
}

}  // namespace shardrec::models
