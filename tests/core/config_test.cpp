// config_test.cpp - defaults, then API, then environment; bad values named in the message.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "transport/registry.hpp"

namespace zcoll {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const ConfigVariable& v : configVariables()) unsetenv(std::string(v.name).c_str());
  }
  void TearDown() override { SetUp(); }
};

TEST_F(ConfigTest, Defaults) {
  Config c;
  ASSERT_TRUE(buildConfig(nullptr, &c).isOk());
  EXPECT_EQ(c.timeoutMs, 300000);
  EXPECT_EQ(c.chunkBytes, 256 * 1024);
  EXPECT_EQ(c.fifoSlots, 4);
  EXPECT_TRUE(c.algo.empty());
}

TEST_F(ConfigTest, ApiThenEnvironment) {
  zcollConfig_t api = ZCOLL_CONFIG_INITIALIZER;
  api.timeoutMs = 1234;
  api.chunkBytes = 4096;
  api.algo = "ring";
  Config c;
  ASSERT_TRUE(buildConfig(&api, &c).isOk());
  EXPECT_EQ(c.timeoutMs, 1234);
  EXPECT_EQ(c.chunkBytes, 4096);
  EXPECT_EQ(c.algo, "ring");
  setenv("ZCOLL_TIMEOUT_S", "2.5", 1);
  setenv("ZCOLL_CHUNK_SIZE", "64K", 1);
  setenv("ZCOLL_FIFO_SLOTS", "8", 1);
  ASSERT_TRUE(buildConfig(&api, &c).isOk());
  EXPECT_EQ(c.timeoutMs, 2500);
  EXPECT_EQ(c.chunkBytes, 64 * 1024);
  EXPECT_EQ(c.fifoSlots, 8);
  // The defaults as zcoll-info prints them are accepted back.
  setenv("ZCOLL_SPIN_NS", "auto", 1);
  setenv("ZCOLL_DEVICE", "emulated", 1);
  ASSERT_TRUE(buildConfig(&api, &c).isOk());
  EXPECT_EQ(c.spinNs, -1);
  EXPECT_EQ(readDeviceSetting(), "emulated");
  setenv("ZCOLL_DEVICE", "gpu", 1);
  Status s = buildConfig(&api, &c);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("ZCOLL_DEVICE"), std::string::npos) << s.message();
  unsetenv("ZCOLL_DEVICE");
}

// tcp's chunk has its own default, and follows a chunk size that was asked for unless it is set too.
TEST_F(ConfigTest, SocketChunkFollowsAChunkSizeThatIsSet) {
  Config c;
  ASSERT_TRUE(buildConfig(nullptr, &c).isOk());
  EXPECT_EQ(c.chunkBytes, 256 * 1024);
  EXPECT_EQ(c.socketChunkBytes, 512 * 1024);
  zcollConfig_t api = ZCOLL_CONFIG_INITIALIZER;
  api.chunkBytes = 4096;
  ASSERT_TRUE(buildConfig(&api, &c).isOk());
  EXPECT_EQ(c.socketChunkBytes, 4096);
  setenv("ZCOLL_CHUNK_SIZE", "16K", 1);
  ASSERT_TRUE(buildConfig(nullptr, &c).isOk());
  EXPECT_EQ(c.socketChunkBytes, 16 * 1024);
  setenv("ZCOLL_SOCKET_CHUNK_SIZE", "1M", 1);
  ASSERT_TRUE(buildConfig(&api, &c).isOk());
  EXPECT_EQ(c.chunkBytes, 16 * 1024);
  EXPECT_EQ(c.socketChunkBytes, 1024 * 1024);
  // Part of what every rank must share.
  Config d = c;
  d.socketChunkBytes = 512 * 1024;
  EXPECT_NE(sharedSettingsHash(c), sharedSettingsHash(d));
  EXPECT_NE(sharedSettingsText(c).find("ZCOLL_SOCKET_CHUNK_SIZE=1048576"), std::string::npos) << sharedSettingsText(c);
  setenv("ZCOLL_SOCKET_CHUNK_SIZE", "4", 1);
  Status s = buildConfig(nullptr, &c);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("ZCOLL_SOCKET_CHUNK_SIZE"), std::string::npos) << s.message();
}

TEST_F(ConfigTest, BadValuesNameTheirSource) {
  Config c;
  setenv("ZCOLL_FIFO_SLOTS", "1", 1);
  Status s = buildConfig(nullptr, &c);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("ZCOLL_FIFO_SLOTS"), std::string::npos) << s.message();
  unsetenv("ZCOLL_FIFO_SLOTS");
  setenv("ZCOLL_TIMEOUT_S", "soon", 1);
  s = buildConfig(nullptr, &c);
  EXPECT_NE(s.message().find("ZCOLL_TIMEOUT_S"), std::string::npos) << s.message();
  unsetenv("ZCOLL_TIMEOUT_S");

  zcollConfig_t api = ZCOLL_CONFIG_INITIALIZER;
  api.magic = 0;
  s = buildConfig(&api, &c);
  EXPECT_NE(s.message().find("ZCOLL_CONFIG_INITIALIZER"), std::string::npos) << s.message();
  api = ZCOLL_CONFIG_INITIALIZER;
  api.fifoSlots = 1;
  s = buildConfig(&api, &c);
  EXPECT_NE(s.message().find("fifoSlots"), std::string::npos) << s.message();
}

// Values that used to pass for something else (issue 26): hex timeouts, unknown transports, levels
// and subsystems are errors naming the variable; unknown ZCOLL_* names are found with their nearest.
TEST_F(ConfigTest, MalformedValuesAndUnknownNames) {
  Config c;
  auto expectRejected = [&](const char* var, const char* value, const char* what) {
    setenv(var, value, 1);
    Status s = buildConfig(nullptr, &c);
    EXPECT_EQ(s.code(), StatusCode::InvalidArgument) << var << "=" << value;
    EXPECT_NE(s.message().find(var), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
    unsetenv(var);
  };
  for (const char* t : {"0x10", "1e3", "inf", "nan", "-5", "0", ".", "1.2.3"})
    expectRejected("ZCOLL_TIMEOUT_S", t, "expected seconds > 0");
  setenv("ZCOLL_TIMEOUT_S", ".5", 1);
  ASSERT_TRUE(buildConfig(nullptr, &c).isOk());
  EXPECT_EQ(c.timeoutMs, 500);
  unsetenv("ZCOLL_TIMEOUT_S");
  Status names = checkTransportNames("shm,foo", "environment variable ZCOLL_TRANSPORTS");
  EXPECT_EQ(names.code(), StatusCode::InvalidArgument);
  EXPECT_NE(names.message().find("unknown transport 'foo' (known: shm, ib, tcp, ucx, cuda_ipc)"), std::string::npos)
      << names.message();
  EXPECT_TRUE(checkTransportNames("shm,cuda_ipc", "config->transports").isOk());
  expectRejected("ZCOLL_DEBUG", "LOUD", "expected NONE, WARN, INFO or TRACE");
  expectRejected("ZCOLL_DEBUG_SUBSYS", "coll,nonsense", "unknown subsystem 'nonsense'");
  for (const char* ok : {"info", "NONE", "off", "Trace"}) {
    setenv("ZCOLL_DEBUG", ok, 1);
    EXPECT_TRUE(buildConfig(nullptr, &c).isOk()) << ok;
  }
  unsetenv("ZCOLL_DEBUG");
  setenv("ZCOLL_DEBUG_SUBSYS", "coll,boot,all", 1);
  EXPECT_TRUE(buildConfig(nullptr, &c).isOk());
  unsetenv("ZCOLL_DEBUG_SUBSYS");
  zcollConfig_t api = ZCOLL_CONFIG_INITIALIZER;
  api.transports = "tcp,bogus";
  ASSERT_TRUE(buildConfig(&api, &c).isOk());  // the names are the transport registry's to check
  Status s = checkTransportNames(c.transports, c.transportsOrigin);
  EXPECT_NE(s.message().find("config->transports='tcp,bogus': unknown transport 'bogus'"), std::string::npos)
      << s.message();

  setenv("ZCOLL_ALGOO", "ring", 1);
  setenv("ZCOLL_TEST_ANYTHING", "1", 1);  // the test suites' own variables are known
  const std::vector<std::string> unknown = unknownConfigVariables();
  EXPECT_EQ(unknown, std::vector<std::string>{"ZCOLL_ALGOO"});
  EXPECT_EQ(closestConfigVariable("ZCOLL_ALGOO"), "ZCOLL_ALGO");
  EXPECT_EQ(closestConfigVariable("ZCOLL_TIMEOUT"), "ZCOLL_TIMEOUT_S");
  EXPECT_EQ(closestConfigVariable("ZCOLL_SOCKET_PER_PEER"), "ZCOLL_SOCKETS_PER_PEER");
  unsetenv("ZCOLL_ALGOO");
  unsetenv("ZCOLL_TEST_ANYTHING");
}

TEST_F(ConfigTest, IbDeviceListAndGidIndex) {
  std::vector<std::pair<std::string, int>> hcas;
  ASSERT_TRUE(parseHcaList("mlx5_0:1,mlx5_1,,rxe0:2", &hcas).isOk());
  ASSERT_EQ(hcas.size(), 3u);
  EXPECT_EQ(hcas[0], std::make_pair(std::string("mlx5_0"), 1));
  EXPECT_EQ(hcas[1], std::make_pair(std::string("mlx5_1"), 0));
  EXPECT_EQ(hcas[2], std::make_pair(std::string("rxe0"), 2));
  for (const char* bad : {"mlx5_0:", "mlx5_0:0", "mlx5_0:x", ":1", "a:300"}) {
    Status s = parseHcaList(bad, &hcas);
    EXPECT_EQ(s.code(), StatusCode::InvalidArgument) << bad;
    EXPECT_NE(s.message().find("ZCOLL_IB_HCA"), std::string::npos) << s.message();
  }
  Config c;
  setenv("ZCOLL_IB_GID_INDEX", "3", 1);
  ASSERT_TRUE(buildConfig(nullptr, &c).isOk());
  EXPECT_EQ(c.ibGidIndex, 3);
  setenv("ZCOLL_IB_GID_INDEX", "auto", 1);
  ASSERT_TRUE(buildConfig(nullptr, &c).isOk());
  EXPECT_EQ(c.ibGidIndex, -1);
  setenv("ZCOLL_IB_GID_INDEX", "256", 1);
  Status s = buildConfig(nullptr, &c);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("ZCOLL_IB_GID_INDEX"), std::string::npos) << s.message();
  unsetenv("ZCOLL_IB_GID_INDEX");
}

TEST_F(ConfigTest, ByteSizes) {
  int64_t v = 0;
  EXPECT_TRUE(parseByteSize("256K", &v));
  EXPECT_EQ(v, 256 * 1024);
  EXPECT_TRUE(parseByteSize("2g", &v));
  EXPECT_EQ(v, int64_t{2} << 30);
  EXPECT_FALSE(parseByteSize("", &v));
  EXPECT_FALSE(parseByteSize("-1", &v));
  EXPECT_FALSE(parseByteSize("12Q", &v));
}

TEST_F(ConfigTest, LaunchEnvironments) {
  LaunchEnv e;
  EXPECT_FALSE(readLaunchEnv(&e).isOk());
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("ZCOLL_COMM_ID", "127.0.0.1:29500", 1);
  ASSERT_TRUE(readLaunchEnv(&e).isOk());
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.size, 4);
  EXPECT_EQ(e.rendezvousPort, 29500);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "4", 1);
  Status s = readLaunchEnv(&e);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("SLURM_PROCID"), std::string::npos) << s.message();
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("PMI_RANK", "1", 1);  // torchrun's variables win
  setenv("MASTER_ADDR", "localhost", 1);
  setenv("MASTER_PORT", "1234", 1);
  unsetenv("ZCOLL_COMM_ID");
  ASSERT_TRUE(readLaunchEnv(&e).isOk());
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.rendezvousHost, "localhost");
  for (const char* v : {"RANK", "WORLD_SIZE", "PMI_RANK", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
}


// docs/configuration.md lists exactly the variables of the one config table, and every ZCOLL_*
// variable core/config.cpp reads is in that table.
std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Every name that follows `prefix` in text, up to the first `end` character.
std::set<std::string> namesAfter(const std::string& text, const std::string& prefix, char end) {
  std::set<std::string> out;
  for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
    const size_t begin = at + prefix.size() - std::string("ZCOLL_").size();
    const size_t stop = text.find(end, begin);
    if (stop != std::string::npos) out.insert(text.substr(begin, stop - begin));
  }
  return out;
}

TEST(ConfigDocs, TheDocumentedVariablesAreTheTable) {
  std::set<std::string> table;
  for (const ConfigVariable& v : configVariables()) table.insert(std::string(v.name));
  const std::string doc = readFile(ZCOLL_SOURCE_DIR "/docs/configuration.md");
  ASSERT_FALSE(doc.empty()) << "cannot read docs/configuration.md";
  const std::set<std::string> documented = namesAfter(doc, "\n| `ZCOLL_", '`');
  EXPECT_EQ(documented, table);
  const std::string code = readFile(ZCOLL_SOURCE_DIR "/core/config.cpp");
  ASSERT_FALSE(code.empty());
  std::set<std::string> read;
  for (const char* call : {"env(\"ZCOLL_", "envPositive(\"ZCOLL_", "envString(\"ZCOLL_"})
    for (const std::string& v : namesAfter(code, call, '"')) read.insert(v);
  EXPECT_GE(read.size(), 10u);
  for (const std::string& v : read) EXPECT_TRUE(table.count(v)) << v << " is read but not in configVariables()";
  // Each row's default column is the table's default (backticks and parentheses aside).
  auto bare = [](std::string_view v) {
    std::string out;
    for (char c : v)
      if (c != '`' && c != '(' && c != ')') out += c;
    return out;
  };
  for (const ConfigVariable& v : configVariables()) {
    const std::string row = "\n| `" + std::string(v.name) + "` | ";
    const size_t at = doc.find(row);
    if (at == std::string::npos) continue;  // reported above
    const size_t begin = at + row.size();
    EXPECT_EQ(bare(doc.substr(begin, doc.find(" |", begin) - begin)), bare(v.defaultValue)) << v.name;
  }
}

TEST(ConfigDocs, DescribeConfigNamesTheSource) {
  std::vector<ConfigValue> rows;
  setenv("ZCOLL_FIFO_SLOTS", "8", 1);
  zcollConfig_t api = ZCOLL_CONFIG_INITIALIZER;
  api.timeoutMs = 1500;
  ASSERT_TRUE(describeConfig(&api, &rows).isOk());
  unsetenv("ZCOLL_FIFO_SLOTS");
  ASSERT_EQ(rows.size(), configVariables().size());
  std::map<std::string, std::pair<std::string, std::string>> byName;
  for (const ConfigValue& r : rows) byName[std::string(r.name)] = {r.value, std::string(r.source)};
  EXPECT_EQ(byName["ZCOLL_FIFO_SLOTS"], std::make_pair(std::string("8"), std::string("environment")));
  EXPECT_EQ(byName["ZCOLL_TIMEOUT_S"], std::make_pair(std::string("1.5"), std::string("API")));
  EXPECT_EQ(byName["ZCOLL_CHUNK_SIZE"], std::make_pair(std::string("262144"), std::string("default")));
}

}  // namespace
}  // namespace zcoll
