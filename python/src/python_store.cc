#include "python_store.h"

#include <atomic>
#include <chrono>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

namespace shardrec::python {
namespace {

std::atomic<bool> g_shut_down{false};

Status Refused() {
  return UnavailableError("rendezvous store: the Python interpreter is exiting");
}

// True once no Python call may be made: after the package's exit hook, or
// while the interpreter finalizes (a group the hook could not close).
bool PythonGone() {
#if PY_VERSION_HEX >= 0x030D0000
  return g_shut_down.load() || Py_IsFinalizing();
#else
  return g_shut_down.load() || _Py_IsFinalizing();
#endif
}

// torch's stores raise on a wait that timed out with "timeout" in the
// message (DistStoreError / RuntimeError); anything else is another failure.
bool IsTimeout(const pybind11::error_already_set& e) {
  const std::string what = e.what();
  return what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos;
}

}  // namespace

PythonStore::PythonStore(pybind11::object store, std::string prefix, int64_t default_timeout_ms)
    : store_(std::move(store)), prefix_(std::move(prefix)), default_timeout_ms_(default_timeout_ms) {}

PythonStore::~PythonStore() {
  if (PythonGone() || !Py_IsInitialized()) {
    store_.release();  // the interpreter is gone or going: leak the reference
    return;
  }
  pybind11::gil_scoped_acquire gil;
  store_ = pybind11::object();
}

void PythonStore::ShutDown() { g_shut_down.store(true); }

Status PythonStore::Set(const std::string& key, std::string_view value) {
  if (PythonGone()) return Refused();
  pybind11::gil_scoped_acquire gil;
  try {
    store_.attr("set")(prefix_ + "/" + key, pybind11::bytes(value.data(), value.size()));
    return Status::Ok();
  } catch (pybind11::error_already_set& e) {
    return UnavailableError("rendezvous store: setting '" + key + "' failed: " + e.what());
  }
}

StatusOr<std::string> PythonStore::Get(const std::string& key, int64_t timeout_ms) {
  if (PythonGone()) return Refused();
  if (timeout_ms < 0) timeout_ms = default_timeout_ms_;
  const std::string full = prefix_ + "/" + key;
  pybind11::gil_scoped_acquire gil;
  try {
    const std::vector<std::string> keys{full};
    // Looking once: check() where the store has it (torch >= 2.0), else a
    // wait of 1 ms.
    if (timeout_ms == 0 && pybind11::hasattr(store_, "check")) {
      if (!store_.attr("check")(keys).cast<bool>()) {
        return Status(SR_DEADLINE_EXCEEDED, "rendezvous store: '" + key + "' is not set");
      }
    } else {
      if (timeout_ms == 0) timeout_ms = 1;
      try {
        store_.attr("wait")(keys, std::chrono::milliseconds(timeout_ms));
      } catch (pybind11::error_already_set& e) {
        if (!IsTimeout(e)) return UnavailableError("rendezvous store: waiting for '" + key + "' failed: " + e.what());
        return Status(SR_DEADLINE_EXCEEDED, "rendezvous store: '" + key + "' was not set within " +
                                                std::to_string(timeout_ms) + " ms (" + e.what() + ")");
      }
    }
    return store_.attr("get")(full).cast<std::string>();
  } catch (pybind11::error_already_set& e) {
    return UnavailableError("rendezvous store: getting '" + key + "' failed: " + e.what());
  }
}

std::string PythonStore::Describe() const { return "torch.distributed store (prefix " + prefix_ + ")"; }

}  // namespace shardrec::python
