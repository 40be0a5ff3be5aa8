// QCommCodecs (qcomm_codecs.h).
#include "shardrec/core/qcomm/qcomm_codecs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace shardrec {

StatusOr<QCommCodecs> QCommCodecs::Create(const PluginRegistry& registry, const QCommConfig& config,
                                          const std::map<std::string, OptionList>& options) {
  QCommCodecs out;
  out.config_ = config;
  std::map<std::string, std::shared_ptr<const Codec>> made;  // one codec object per name
  for (const auto& [op, names] : config.ops) {
    for (int direction = 0; direction < 2; ++direction) {
      const std::string& name = direction == 0 ? names.forward : names.backward;
      if (IsNoOpCodec(name)) continue;
      if (!made.count(name)) {
        auto ref = registry.Find(SR_KIND_CODEC, name);
        if (!ref.ok()) {
          std::vector<std::string> known = {"fp32"};
          for (const auto& c : registry.Components(SR_KIND_CODEC)) known.push_back(c.name());
          return Status(ref.status().code(),
                        fmt::format("{} {} codec '{}': no such codec (the codecs here: {}; a codec plugin is "
                                    "libshardrec_codec_NAME.so on the plugin path)",
                                    CommOpName(op), direction == 0 ? "forward" : "backward", name,
                                    fmt::join(known, ", ")));
        }
        const auto it = options.find(name);
        SR_ASSIGN_OR_RETURN(Codec codec, Codec::Create(ref.value(), it != options.end() ? it->second : OptionList{}));
        made[name] = std::make_shared<const Codec>(std::move(codec));
      }
      out.codecs_[{op, direction}] = made[name];
    }
  }
  return out;
}

const Codec* QCommCodecs::Get(CommOp op, int direction) const {
  const auto it = codecs_.find({op, direction});
  return it == codecs_.end() ? nullptr : it->second.get();
}

}  // namespace shardrec
