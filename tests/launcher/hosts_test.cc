// The pure parts of tuttirun --hosts (tools/tuttirun/hosts.h).
#include "hosts.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using tuttirun::HostEntry;

std::vector<std::string> names(const std::vector<HostEntry>& hosts) {
  std::vector<std::string> out;
  for (const HostEntry& h : hosts) out.push_back(h.name + ":" + std::to_string(h.nproc));
  return out;
}

TEST(TuttirunHosts, ParseHosts) {
  std::vector<HostEntry> hosts;
  std::string error;
  ASSERT_TRUE(tuttirun::parse_hosts("h0:2,h1:2", 0, &hosts, &error)) << error;
  EXPECT_EQ(names(hosts), (std::vector<std::string>{"h0:2", "h1:2"}));
  ASSERT_TRUE(tuttirun::parse_hosts("a,b,c", 3, &hosts, &error)) << error;
  EXPECT_EQ(names(hosts), (std::vector<std::string>{"a:3", "b:3", "c:3"}));
  ASSERT_TRUE(tuttirun::parse_hosts("node-1.example.org:4", 0, &hosts, &error)) << error;
  EXPECT_EQ(names(hosts), (std::vector<std::string>{"node-1.example.org:4"}));
  ASSERT_TRUE(tuttirun::parse_hosts("a:1,a:1", 0, &hosts, &error)) << error;  // a host twice: two nodes there
  EXPECT_EQ(hosts.size(), 2u);
}

TEST(TuttirunHosts, ParseHostsRefuses) {
  std::vector<HostEntry> hosts;
  for (const char* spec : {"", ",", "a:2,", ",a:2", "a:2,,b:2", "a:0", "a:-1", "a:x", "a:", ":2", "a:2,b:3", "a"}) {
    std::string error;
    EXPECT_FALSE(tuttirun::parse_hosts(spec, 0, &hosts, &error)) << spec;
    EXPECT_EQ(error.rfind("--hosts: ", 0), 0u) << spec << ": " << error;
  }
  std::string error;
  EXPECT_FALSE(tuttirun::parse_hosts("a,b:3", 2, &hosts, &error));
  EXPECT_NE(error.find("same number of ranks"), std::string::npos) << error;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> words;
  std::string error;
  EXPECT_TRUE(tuttirun::split_words(text, &words, &error)) << text << ": " << error;
  return words;
}

TEST(TuttirunHosts, SplitWords) {
  EXPECT_EQ(split("ssh {host}"), (std::vector<std::string>{"ssh", "{host}"}));
  EXPECT_EQ(split("  ip   netns exec\t{host} "), (std::vector<std::string>{"ip", "netns", "exec", "{host}"}));
  EXPECT_EQ(split("sh -c 'a b; \"c\"' x"), (std::vector<std::string>{"sh", "-c", "a b; \"c\"", "x"}));
  EXPECT_EQ(split("a\"b c\"d"), (std::vector<std::string>{"ab cd"}));
  EXPECT_EQ(split(R"("x \"y\" \$z \q")"), (std::vector<std::string>{R"(x "y" $z \q)"}));
  EXPECT_EQ(split(R"(a\ b c)"), (std::vector<std::string>{"a b", "c"}));
  EXPECT_EQ(split("''"), (std::vector<std::string>{""}));
  EXPECT_TRUE(split("").empty());
  std::vector<std::string> words;
  std::string error;
  EXPECT_FALSE(tuttirun::split_words("ssh 'host", &words, &error));
  EXPECT_NE(error.find("unterminated"), std::string::npos);
  EXPECT_FALSE(tuttirun::split_words("ssh \"host", &words, &error));
}

TEST(TuttirunHosts, ShellQuote) {
  EXPECT_EQ(tuttirun::shell_quote("plain-word_1.2/x:y,z=@%+"), "plain-word_1.2/x:y,z=@%+");
  EXPECT_EQ(tuttirun::shell_quote(""), "''");
  EXPECT_EQ(tuttirun::shell_quote("a b"), "'a b'");
  EXPECT_EQ(tuttirun::shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(tuttirun::shell_quote("$HOME;rm"), "'$HOME;rm'");
  // What split_words reads back is what was quoted.
  for (std::string w : {"a b", "it's", "\"q\"", "$x `y` \\z", "", "tab\there", "new\nline"}) {
    EXPECT_EQ(split(tuttirun::shell_quote(w)), std::vector<std::string>{w}) << w;
  }
}

TEST(TuttirunHosts, HostCommandAppendsWithoutCmd) {
  tuttirun::HostCommand hc =
      tuttirun::host_command({"ip", "netns", "exec", "{host}"}, "h1", {"tuttirun", "-n", "2", "a b"}, {{"X", "1"}});
  EXPECT_EQ(hc.argv, (std::vector<std::string>{"ip", "netns", "exec", "h1", "tuttirun", "-n", "2", "a b"}));
  EXPECT_FALSE(hc.env_in_command);
  hc = tuttirun::host_command({"run-on", "--node={host}", "--log=/tmp/{host}.log"}, "n7", {"p"}, {});
  EXPECT_EQ(hc.argv, (std::vector<std::string>{"run-on", "--node=n7", "--log=/tmp/n7.log", "p"}));
}

TEST(TuttirunHosts, HostCommandQuotesIntoCmd) {
  tuttirun::HostCommand hc = tuttirun::host_command({"ssh", "-o", "BatchMode=yes", "{host}", "{cmd}"}, "h0",
                                                    {"/opt/tuttirun", "-n", "2", "--", "prog", "x y", "it's"},
                                                    {{"TUTTI_JOB_SECRET", "abc"}, {"TUTTI_LOG", "info debug"}});
  ASSERT_EQ(hc.argv.size(), 5u);
  EXPECT_TRUE(hc.env_in_command);
  EXPECT_EQ(hc.argv[3], "h0");
  EXPECT_EQ(hc.argv[4], "env TUTTI_JOB_SECRET=abc 'TUTTI_LOG=info debug' /opt/tuttirun -n 2 -- prog 'x y' 'it'\\''s'");
  EXPECT_EQ(split(hc.argv[4]), (std::vector<std::string>{"env", "TUTTI_JOB_SECRET=abc", "TUTTI_LOG=info debug",
                                                         "/opt/tuttirun", "-n", "2", "--", "prog", "x y", "it's"}));
  hc = tuttirun::host_command({"sh", "-c", "{cmd}"}, "h0", {"echo", "hi"}, {});
  EXPECT_EQ(hc.argv, (std::vector<std::string>{"sh", "-c", "echo hi"}));
}

TEST(TuttirunHosts, RandomSecret) {
  std::string error;
  std::string a = tuttirun::random_secret_hex(&error);
  std::string b = tuttirun::random_secret_hex(&error);
  EXPECT_EQ(a.size(), 64u) << error;
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
