// zcoll-zero-consolidate: the full weights of a sharded ZeRO checkpoint as one safetensors file.
//   zcoll-zero-consolidate CHECKPOINT_DIR OUTPUT.safetensors [--tag TAG] [--dtype fp32|fp16|bf16]
// Reads the fp32 master weights segment by segment (never more than one rank's shard in memory)
// and writes each where it belongs in the output.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint_format.hpp"

using namespace zcoll::zero;

namespace {

int usage(const char* msg) {
  if (msg) std::fprintf(stderr, "zcoll-zero-consolidate: %s\n", msg);
  std::fprintf(stderr, "usage: zcoll-zero-consolidate CHECKPOINT_DIR OUTPUT.safetensors [--tag TAG] [--dtype fp32|fp16|bf16]\n"
                       "  Writes the full weights of a zcoll ZeRO checkpoint (the one CHECKPOINT_DIR/latest names, or TAG).\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string tag, dtypeArg = "fp32";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(nullptr), 0;
    if ((a == "--tag" || a == "--dtype") && i + 1 < argc) (a == "--tag" ? tag : dtypeArg) = argv[++i];
    else if (!a.empty() && a[0] == '-') return usage(("unknown option " + a).c_str());
    else positional.push_back(a);
  }
  if (positional.size() != 2) return usage("give CHECKPOINT_DIR and OUTPUT");
  DType out;
  if (!parseDtypeName(dtypeArg, &out)) return usage(("--dtype " + dtypeArg + ": not fp32, fp16 or bf16").c_str());
  const std::string& dir = positional[0];
  const std::string& output = positional[1];
  std::string error;
  if (tag.empty() && !readLatest(dir, &tag, &error)) return std::fprintf(stderr, "zcoll-zero-consolidate: %s\n", error.c_str()), 1;
  CheckpointMeta meta;
  if (!readMeta(dir + "/" + tag + "/meta.json", &meta, &error))
    return std::fprintf(stderr, "zcoll-zero-consolidate: %s\n", error.c_str()), 1;

  std::vector<int64_t> offsets;
  const std::string header = safetensorsHeader(meta.groups, out, &offsets);
  const std::string tmp = output + ".tmp";
  const int ofd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  auto failWith = [&](const std::string& what) {
    std::fprintf(stderr, "zcoll-zero-consolidate: %s\n", what.c_str());
    if (ofd >= 0) close(ofd), unlink(tmp.c_str());
    return 1;
  };
  if (ofd < 0 || !writeAt(ofd, header.data(), header.size(), 0))
    return failWith(tmp + ": cannot write: " + std::strerror(errno));

  std::vector<int64_t> written(meta.groups.size(), 0);
  std::vector<float> master;
  std::vector<std::byte> converted;
  const int64_t es = dtypeSize(out);
  for (const auto& file : meta.files) {
    const std::string path = dir + "/" + tag + "/" + file.name;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return failWith(path + ": cannot open: " + std::strerror(errno));
    for (const FileSegment& s : file.segments) {
      const size_t n = static_cast<size_t>(s.hi - s.lo);
      master.resize(n);
      converted.resize(n * static_cast<size_t>(es));
      if (!readAt(fd, master.data(), n * 4, s.offset)) {
        close(fd);
        return failWith(path + " is shorter than its segments say");
      }
      fromFloat32(out, master.data(), converted.data(), static_cast<int64_t>(n));
      if (!writeAt(ofd, converted.data(), converted.size(), offsets[static_cast<size_t>(s.group)] + s.lo * es)) {
        close(fd);
        return failWith(tmp + ": cannot write: " + std::strerror(errno));
      }
      written[static_cast<size_t>(s.group)] += s.hi - s.lo;
    }
    close(fd);
  }
  int64_t total = 0;
  for (size_t g = 0; g < meta.groups.size(); ++g) {
    if (written[g] != meta.groups[g].numel)
      return failWith("the checkpoint holds " + std::to_string(written[g]) + " of the " + std::to_string(meta.groups[g].numel) +
                      " elements of group '" + meta.groups[g].name + "'");
    total += written[g];
  }
  if (fsync(ofd) != 0 || close(ofd) != 0 || std::rename(tmp.c_str(), output.c_str()) != 0)
    return failWith(output + ": cannot write: " + std::strerror(errno));
  std::printf("%s: %zu tensors, %lld parameters (%s), from %zu rank files of %s/%s (step %lld)\n", output.c_str(),
              meta.groups.size(), static_cast<long long>(total), dtypeName(out), meta.files.size(), dir.c_str(), tag.c_str(),
              static_cast<long long>(meta.steps));
  return 0;
}
