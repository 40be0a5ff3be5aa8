#include "shardrec/core/dense/dense_optimizer.h"

#include <cmath>
#include <sstream>

#include <fmt/format.h>

namespace shardrec::dense {

namespace {

const std::map<std::string, std::map<std::string, double>>& Defaults() {
  static const std::map<std::string, std::map<std::string, double>> defaults = {
      {"sgd", {{"lr", 0.01}, {"momentum", 0}, {"dampening", 0}, {"weight_decay", 0}, {"nesterov", 0}}},
      {"adagrad", {{"lr", 0.01}, {"lr_decay", 0}, {"weight_decay", 0}, {"initial_accumulator_value", 0}, {"eps", 1e-10}}},
      {"adam", {{"lr", 0.001}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0}}},
      {"adamw", {{"lr", 0.001}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.01}}},
  };
  return defaults;
}

std::string Keys(const std::map<std::string, double>& m) {
  std::string out;
  for (const auto& [k, v] : m) out += (out.empty() ? "" : ", ") + k;
  return out;
}

}  // namespace

StatusOr<DenseOptimizerSpec> DenseOptimizerSpec::Parse(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) parts.push_back(part);
  if (parts.empty() || parts[0].empty()) return InvalidArgumentError("dense optimizer: empty; expected e.g. adam,lr=1e-3");
  auto it = Defaults().find(parts[0]);
  if (it == Defaults().end()) {
    return InvalidArgumentError("dense optimizer '" + parts[0] + "' is unknown: expected sgd, adagrad, adam or adamw");
  }
  DenseOptimizerSpec spec;
  spec.name = parts[0];
  spec.params = it->second;
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    std::string key = parts[i].substr(0, eq);
    if (key == "learning_rate") key = "lr";
    if (eq == std::string::npos || !spec.params.contains(key)) {
      return InvalidArgumentError(fmt::format("dense optimizer {}: '{}' is not KEY=VALUE with KEY one of {}", spec.name,
                                              parts[i], Keys(it->second)));
    }
    const std::string value = parts[i].substr(eq + 1);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v)) {
      return InvalidArgumentError(fmt::format("dense optimizer {}: {}={} is not a number", spec.name, key, value));
    }
    spec.params[key] = v;
  }
  const auto& p = spec.params;
  if (p.at("lr") < 0) return InvalidArgumentError(fmt::format("dense optimizer {}: lr must be >= 0", spec.name));
  if (p.contains("eps") && p.at("eps") < 0) return InvalidArgumentError(fmt::format("dense optimizer {}: eps must be >= 0", spec.name));
  if (p.contains("beta1") && (p.at("beta1") < 0 || p.at("beta1") >= 1 || p.at("beta2") < 0 || p.at("beta2") >= 1)) {
    return InvalidArgumentError(fmt::format("dense optimizer {}: beta1 and beta2 must be in [0, 1)", spec.name));
  }
  if (spec.name == "sgd" && p.at("nesterov") != 0 && (p.at("momentum") <= 0 || p.at("dampening") != 0)) {
    return InvalidArgumentError("dense optimizer sgd: nesterov needs momentum > 0 and dampening 0 (as torch)");
  }
  return spec;
}

std::string DenseOptimizerSpec::ToString() const {
  std::string out = name;
  for (const auto& [k, v] : params) out += fmt::format(",{}={}", k, v);
  return out;
}

std::vector<std::string> DenseOptimizer::StateKinds() const {
  if (spec_.name == "sgd") return spec_.Get("momentum") != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  if (spec_.name == "adagrad") return {"sum"};
  return {"exp_avg", "exp_avg_sq"};
}

std::map<std::string, Tensor>& DenseOptimizer::State(size_t i) {
  if (state_.size() <= i) state_.resize(i + 1);
  return state_[i];
}

StatusOr<std::map<std::string, Tensor>*> DenseOptimizer::StateFor(size_t i, const std::vector<int64_t>& shape,
                                                                  const std::string& name) {
  auto& state = State(i);
  for (const auto& kind : StateKinds()) {
    auto it = state.find(kind);
    if (it == state.end()) {
      Tensor t = Tensor::Zeros(dtype::kFloat32, shape);
      if (kind == "sum") {
        for (float& v : t.span<float>()) v = static_cast<float>(spec_.Get("initial_accumulator_value"));
      }
      state.emplace(kind, std::move(t));
    } else if (it->second.shape() != shape) {
      return InvalidArgumentError(fmt::format("dense optimizer: the {} state of {} is {}, the parameter {}", kind, name,
                                              ShapeString(it->second.shape()), ShapeString(shape)));
    }
  }
  return &state;
}

Status DenseOptimizer::Step(const std::vector<Parameter*>& params) {
  ++steps_;
  const double lr = spec_.Get("lr");
  const auto step = static_cast<double>(steps_);
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter& p = *params[i];
    SR_ASSIGN_OR_RETURN(auto* found, StateFor(i, p.value.shape(), p.name));
    auto& state = *found;
    float* w = p.value.data<float>();
    const float* grad = p.grad.data<float>();
    const int64_t n = p.value.numel();
    if (spec_.name == "sgd") {
      const auto wd = static_cast<float>(spec_.Get("weight_decay"));
      const auto momentum = static_cast<float>(spec_.Get("momentum"));
      const auto damp = static_cast<float>(1.0 - spec_.Get("dampening"));
      const bool nesterov = spec_.Get("nesterov") != 0;
      float* buf = momentum != 0 ? state["momentum_buffer"].data<float>() : nullptr;
      for (int64_t j = 0; j < n; ++j) {
        float d = wd != 0 ? grad[j] + wd * w[j] : grad[j];
        if (buf != nullptr) {
          buf[j] = steps_ == 1 ? d : buf[j] * momentum + d * damp;  // the first step copies, undamped
          d = nesterov ? d + momentum * buf[j] : buf[j];
        }
        w[j] += static_cast<float>(-lr) * d;
      }
    } else if (spec_.name == "adagrad") {
      const auto wd = static_cast<float>(spec_.Get("weight_decay"));
      const auto eps = static_cast<float>(spec_.Get("eps"));
      const auto clr = static_cast<float>(lr / (1.0 + (step - 1.0) * spec_.Get("lr_decay")));
      float* sum = state["sum"].data<float>();
      for (int64_t j = 0; j < n; ++j) {
        const float g = wd != 0 ? grad[j] + wd * w[j] : grad[j];
        sum[j] += g * g;
        w[j] += -clr * g / (std::sqrt(sum[j]) + eps);
      }
    } else {
      const bool decoupled = spec_.name == "adamw";
      const double b1 = spec_.Get("beta1"), b2 = spec_.Get("beta2");
      const auto wd = static_cast<float>(spec_.Get("weight_decay"));
      const auto eps = static_cast<float>(spec_.Get("eps"));
      const auto step_size = static_cast<float>(lr / (1.0 - std::pow(b1, step)));
      const auto bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, step)));
      const auto fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
      const auto gb1 = static_cast<float>(1.0 - b1), gb2 = static_cast<float>(1.0 - b2);
      const auto decay = static_cast<float>(1.0 - lr * spec_.Get("weight_decay"));
      float* m = state["exp_avg"].data<float>();
      float* v = state["exp_avg_sq"].data<float>();
      for (int64_t j = 0; j < n; ++j) {
        float g = grad[j];
        if (decoupled) {
          w[j] *= decay;
        } else if (wd != 0) {
          g += wd * w[j];
        }
        m[j] = m[j] * fb1 + g * gb1;
        v[j] = v[j] * fb2 + gb2 * g * g;
        const float denom = std::sqrt(v[j]) / bc2_sqrt + eps;
        w[j] += -step_size * m[j] / denom;
      }
    }
  }
  return Status::Ok();
}

float ClipGradNorm(const std::vector<Parameter*>& params, float max_norm) {
  double squares = 0.0;
  for (const Parameter* p : params) {
    for (float g : p->grad.span<float>()) squares += static_cast<double>(g) * g;
  }
  const auto total = static_cast<float>(std::sqrt(squares));
  const float coef = std::min(1.0f, max_norm / (total + 1e-6f));
  for (Parameter* p : params) {
    for (float& g : p->grad.span<float>()) g *= coef;
  }
  return total;
}

}  // namespace shardrec::dense
