// The codecs a sharded module's output dist uses, created once from the
// registry (codec plugins, SR_KIND_CODEC) by the names in a QCommConfig.
// A null codec is TorchRec's NoOp: the float32 values go as they are.
#pragma once

#include <map>
#include <memory>

#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/qcomm/qcomm_config.h"

namespace shardrec {

class QCommCodecs {
 public:
  QCommCodecs() = default;
  // Every named codec must be a loaded codec component; the error names the
  // op, the direction and the codecs there are. options: --plugin-opt codec.NAME.*.
  static StatusOr<QCommCodecs> Create(const PluginRegistry& registry, const QCommConfig& config,
                                      const std::map<std::string, OptionList>& options = {});

  const Codec* forward(CommOp op) const { return Get(op, 0); }
  const Codec* backward(CommOp op) const { return Get(op, 1); }
  const QCommConfig& config() const { return config_; }

 private:
  const Codec* Get(CommOp op, int direction) const;
  QCommConfig config_;
  // Shared: modules are movable, and one codec serves several ops.
  std::map<std::pair<CommOp, int>, std::shared_ptr<const Codec>> codecs_;
};

}  // namespace shardrec
