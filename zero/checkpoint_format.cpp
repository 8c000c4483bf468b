// checkpoint_format.cpp - see checkpoint_format.hpp.
#include "checkpoint_format.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace zcoll::zero {

using Json = nlohmann::ordered_json;

const char* dtypeName(DType type) { return type == DType::F16 ? "fp16" : type == DType::BF16 ? "bf16" : "fp32"; }

bool parseDtypeName(const std::string& name, DType* type) {
  if (name == "fp32") *type = DType::F32;
  else if (name == "fp16") *type = DType::F16;
  else if (name == "bf16") *type = DType::BF16;
  else return false;
  return true;
}

std::string metaToJson(const CheckpointMeta& m) {
  Json j;
  j["format"] = "zcoll-zero-checkpoint";
  j["version"] = 1;
  j["ranks"] = m.ranks;
  j["stage"] = m.stage;
  j["dtype"] = m.dtype;
  j["steps"] = m.steps;
  j["micro_steps"] = m.microSteps;
  j["loss_scaler"] = {{"scale", m.lossScale}, {"hysteresis", m.hysteresis}, {"iteration", m.scalerIteration},
                      {"last_overflow", m.lastOverflow}};
  Json groups = Json::array();
  for (const GroupSpec& g : m.groups) groups.push_back({{"name", g.name}, {"numel", g.numel}, {"shape", g.shape}});
  j["groups"] = groups;
  Json files = Json::array();
  for (const auto& f : m.files) {
    Json segs = Json::array();
    for (const FileSegment& s : f.segments) segs.push_back(Json::array({s.group, s.lo, s.hi, s.offset}));
    files.push_back({{"file", f.name}, {"segments", segs}});
  }
  j["files"] = files;
  return j.dump(1) + "\n";
}

bool readMeta(const std::string& path, CheckpointMeta* m, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  std::string key = "(the file)";
  try {
    const Json j = Json::parse(in);
    key = "format";
    if (j.at("format").get<std::string>() != "zcoll-zero-checkpoint") throw std::runtime_error("not a zcoll ZeRO checkpoint");
    key = "version";
    if (j.at("version").get<int>() != 1) throw std::runtime_error("version " + j.at("version").dump() + " is not 1");
    key = "ranks";
    m->ranks = j.at("ranks").get<int>();
    key = "stage";
    m->stage = j.at("stage").get<int>();
    key = "dtype";
    m->dtype = j.at("dtype").get<std::string>();
    DType t;
    if (!parseDtypeName(m->dtype, &t)) throw std::runtime_error("\"" + m->dtype + "\" is not fp32, fp16 or bf16");
    key = "steps";
    m->steps = j.at("steps").get<int64_t>();
    key = "micro_steps";
    m->microSteps = j.at("micro_steps").get<int64_t>();
    key = "loss_scaler";
    const Json& ls = j.at("loss_scaler");
    m->lossScale = ls.at("scale").get<double>();
    m->hysteresis = ls.at("hysteresis").get<int>();
    m->scalerIteration = ls.at("iteration").get<int64_t>();
    m->lastOverflow = ls.at("last_overflow").get<int64_t>();
    key = "groups";
    m->groups.clear();
    for (const Json& g : j.at("groups"))
      m->groups.push_back(GroupSpec{g.at("name").get<std::string>(), g.at("numel").get<int64_t>(),
                                    g.at("shape").get<std::vector<int64_t>>()});
    key = "files";
    m->files.clear();
    for (const Json& f : j.at("files")) {
      CheckpointMeta::File file;
      file.name = f.at("file").get<std::string>();
      if (file.name.find('/') != std::string::npos) throw std::runtime_error("file name \"" + file.name + "\" has a '/'");
      for (const Json& s : f.at("segments")) {
        FileSegment seg{s.at(0).get<int>(), s.at(1).get<int64_t>(), s.at(2).get<int64_t>(), s.at(3).get<int64_t>()};
        if (seg.group < 0 || seg.group >= static_cast<int>(m->groups.size()) || seg.lo < 0 || seg.hi <= seg.lo ||
            seg.hi > m->groups[static_cast<size_t>(seg.group)].numel || seg.offset < 0)
          throw std::runtime_error("segment " + s.dump() + " is outside its group");
        file.segments.push_back(seg);
      }
      m->files.push_back(std::move(file));
    }
  } catch (const std::exception& e) {
    *error = path + ": " + key + ": " + e.what();
    return false;
  }
  return true;
}

bool readLatest(const std::string& dir, std::string* tag, std::string* error) {
  std::ifstream in(dir + "/latest");
  std::string t;
  if (!in || !std::getline(in, t) || t.empty() || t.find('/') != std::string::npos) {
    *error = dir + "/latest: no checkpoint tag there (pass the tag)";
    return false;
  }
  *tag = t;
  return true;
}

bool writeAt(int fd, const void* data, size_t bytes, int64_t offset) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = pwrite(fd, p, bytes, offset);
    if (n <= 0) return false;
    p += n, bytes -= static_cast<size_t>(n), offset += n;
  }
  return true;
}

bool readAt(int fd, void* data, size_t bytes, int64_t offset) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = pread(fd, p, bytes, offset);
    if (n <= 0) return false;
    p += n, bytes -= static_cast<size_t>(n), offset += n;
  }
  return true;
}

bool writeFileAtomic(const std::string& path, const std::string& text, std::string* error) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      *error = tmp + ": cannot write: " + std::strerror(errno);
      unlink(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = path + ": cannot rename into place: " + std::strerror(errno);
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

std::string safetensorsHeader(const std::vector<GroupSpec>& groups, DType type, std::vector<int64_t>* offsets) {
  Json h = Json::object();
  h["__metadata__"] = {{"format", "pt"}, {"producer", "zcoll"}};
  int64_t at = 0;
  offsets->clear();
  const int64_t es = dtypeSize(type);
  for (const GroupSpec& g : groups) {
    std::vector<int64_t> shape = g.shape.empty() ? std::vector<int64_t>{g.numel} : g.shape;
    h[g.name] = {{"dtype", type == DType::F16 ? "F16" : type == DType::BF16 ? "BF16" : "F32"},
                 {"shape", shape},
                 {"data_offsets", {at, at + g.numel * es}}};
    offsets->push_back(at);
    at += g.numel * es;
  }
  std::string json = h.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += json;
  for (int64_t& o : *offsets) o += static_cast<int64_t>(out.size());
  return out;
}

}  // namespace zcoll::zero
