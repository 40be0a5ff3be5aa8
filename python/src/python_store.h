// A rendezvous store over a Python object with torch.distributed.Store's
// methods (set, get, wait, check): how a shardrec process group joins a
// torchrun job through the store torch already shares. Its calls take the
// GIL; the comm plugin's heartbeat thread calls it too, so the package
// closes its groups at interpreter exit (ShutDown() then refuses every call
// instead of waiting for an interpreter that is going away).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "shardrec/core/comm/kv_store.h"

namespace shardrec::python {

class PythonStore : public KvStore {
 public:
  // Keys go to `store` as PREFIX/KEY; Get(key, -1) waits default_timeout_ms.
  PythonStore(pybind11::object store, std::string prefix, int64_t default_timeout_ms);
  ~PythonStore() override;

  Status Set(const std::string& key, std::string_view value) override;
  StatusOr<std::string> Get(const std::string& key, int64_t timeout_ms) override;
  std::string Describe() const override;

  // From the package's atexit hook: every PythonStore refuses from now on.
  static void ShutDown();

 private:
  pybind11::object store_;
  std::string prefix_;
  int64_t default_timeout_ms_;
};

}  // namespace shardrec::python
