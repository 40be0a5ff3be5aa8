// The dense half of a recommendation model, on top of the pooled
// embeddings of the sparse half (a (sharded) EmbeddingBagCollection):
//   dlrm    TorchRec's DLRM: dense arch MLP, pairwise dot interaction
//           (upper triangle without the diagonal, after the dense vector),
//           over arch MLP then Linear -> one logit.
//   dcn     DLRM_DCN: the interaction is a LowRankCrossNet over the dense
//           vector and the embeddings, flattened.
//   deepfm  SimpleDeepFMNN: dense arch Linear-ReLU-Linear-ReLU, then
//           [dense, DeepFM(Linear-ReLU), FactorizationMachine] -> Linear ->
//           one logit (upstream applies a sigmoid here and then BCE-with-
//           logits again; we return the logit: docs/models.md).
// Parameter names are TorchRec's state_dict keys.
#pragma once

#include <functional>
#include <memory>

#include "shardrec/core/dense/dense_layer.h"
#include "shardrec/core/dense/init.h"
#include "shardrec/core/models/model_config.h"

namespace shardrec {

// Called during Backward with parameters whose gradients are complete, in
// the order backward finishes them (data parallelism starts their
// all-reduce there).
using GradientsReady = std::function<Status(const std::vector<dense::Parameter*>&)>;

class RecModel {
 public:
  virtual ~RecModel() = default;
  // Logits [B] from dense features [B, dense_in_features] and the pooled
  // embeddings [B, features * dim], features in the collection's order.
  virtual StatusOr<Tensor> Forward(const Tensor& dense, const Tensor& pooled) = 0;
  // dL/dlogits [B] in: gradients added to every parameter; returns
  // dL/dpooled [B, features * dim].
  virtual StatusOr<Tensor> Backward(const Tensor& dlogits, const GradientsReady& ready = nullptr) = 0;
  // In TorchRec's registration order.
  virtual std::vector<dense::Parameter*> Parameters() = 0;
};

StatusOr<std::unique_ptr<RecModel>> CreateRecModel(const ModelConfig& config, int64_t features, int64_t dim,
                                                   const dense::DenseInit& init);

// torch.nn.BCEWithLogitsLoss (mean over the batch): the loss, and
// dL/dlogits into *dlogits.
StatusOr<double> BceWithLogits(const Tensor& logits, const Tensor& labels, Tensor* dlogits);

}  // namespace shardrec
