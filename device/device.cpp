// device.cpp - which device runtime the process uses (see device.hpp).
#include "core/device.hpp"

#include <atomic>
#include <mutex>
#include <string>

#include "core/config.hpp"
#include "core/log.hpp"

namespace zcoll {
namespace {

std::once_flag chosenOnce;
// Set once the choice is made: every op asks, and std::call_once costs a thread-local access and a
// call even when done.
std::atomic<bool> chosenDone{false};
std::atomic<DeviceRuntime*> chosen{nullptr};
std::string absence = "not chosen yet";

void choose() {
  const std::string setting = readDeviceSetting();
  if (setting == "emulated") {
    chosen.store(emulatedDeviceRuntime());
    absence.clear();
    return;
  }
  if (setting == "none") {
    absence = "ZCOLL_DEVICE=none";
    return;
  }
#ifdef ZCOLL_HAVE_CUDA
  std::string why;
  if (DeviceRuntime* rt = cudaDeviceRuntime(&why)) {
    chosen.store(rt);
    absence.clear();
  } else {
    absence = why;
  }
#else
  absence = "this build has no CUDA support (meson feature 'cuda' off: nvcc not found or disabled)";
#endif
}

void ensureChosen() {
  if (chosenDone.load(std::memory_order_acquire)) return;
  std::call_once(chosenOnce, choose);
  chosenDone.store(true, std::memory_order_release);
}

}  // namespace

DeviceRuntime* deviceRuntime() {
  ensureChosen();
  return chosen.load(std::memory_order_acquire);
}

std::string_view deviceRuntimeAbsence() {
  ensureChosen();
  return chosen.load() ? std::string_view() : std::string_view(absence);
}

void setDeviceRuntime(DeviceRuntime* rt) {
  std::call_once(chosenOnce, [] {});
  chosen.store(rt);
  absence = rt ? "" : "set to none by the program";
}

}  // namespace zcoll
