// unique_id_test.cpp - unique id encoding round trip and rejection of anything else.
#include <gtest/gtest.h>

#include <cstring>

#include "bootstrap/unique_id.hpp"

namespace zcoll {
namespace {

UniqueIdFields sample(const char* host, int port) {
  UniqueIdFields f;
  EXPECT_TRUE(resolveAddress(host, port, &f.root).isOk());
  EXPECT_TRUE(randomSecret(&f.secret).isOk());
  return f;
}

TEST(UniqueId, RoundTripIpv4AndIpv6) {
  for (const char* host : {"127.0.0.1", "::1"}) {
    UniqueIdFields f = sample(host, 29500);
    char buf[kUniqueIdBytes];
    encodeUniqueId(f, buf);
    UniqueIdFields g;
    ASSERT_TRUE(decodeUniqueId(buf, &g).isOk()) << host;
    EXPECT_EQ(g.root.toString(), f.root.toString());
    EXPECT_TRUE(secretsEqual(g.secret, f.secret));
  }
}

TEST(UniqueId, RejectsCorruption) {
  UniqueIdFields f = sample("127.0.0.1", 1234);
  char good[kUniqueIdBytes];
  encodeUniqueId(f, good);
  UniqueIdFields g;
  char zero[kUniqueIdBytes] = {};
  EXPECT_EQ(decodeUniqueId(zero, &g).code(), StatusCode::InvalidArgument);
  for (size_t i : {0, 5, 12, 30, 44, 100}) {
    char bad[kUniqueIdBytes];
    std::memcpy(bad, good, sizeof bad);
    bad[i] ^= 0x40;
    Status s = decodeUniqueId(bad, &g);
    EXPECT_EQ(s.code(), StatusCode::InvalidArgument) << "byte " << i;
    EXPECT_NE(s.message().find("commId"), std::string::npos);
  }
}

// Found by tests/fuzz/unique_id_fuzz: an IPv4 id with bytes in the unused part of the address field
// (and a valid checksum) was accepted; only the canonical encoding is.
TEST(UniqueId, RejectsNonCanonicalIpv4Padding) {
  UniqueIdFields f = sample("127.0.0.1", 1234);
  char id[kUniqueIdBytes];
  encodeUniqueId(f, id);
  id[20] = 0x5a;
  const uint32_t sum = static_cast<uint32_t>(fnv1a(id, 42));
  std::memcpy(id + 42, &sum, 4);
  UniqueIdFields g;
  Status s = decodeUniqueId(id, &g);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("padding"), std::string::npos) << s.message();
}

TEST(UniqueId, SecretsDiffer) {
  Secret a, b;
  ASSERT_TRUE(randomSecret(&a).isOk());
  ASSERT_TRUE(randomSecret(&b).isOk());
  EXPECT_FALSE(secretsEqual(a, b));
  Secret c;
  ASSERT_TRUE(parseSecretHex(secretHex(a), &c));
  EXPECT_TRUE(secretsEqual(a, c));
  EXPECT_FALSE(parseSecretHex("xyz", &c));
}

}  // namespace
}  // namespace zcoll
