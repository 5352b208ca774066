#include "common/config.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "common/log.h"
#include "common/settings.h"
#include "tutti/error.h"

namespace tutti::detail {

std::size_t parse_bytes(const std::string& s, const char* what) {
  std::size_t pos = 0;
  unsigned long long v = 0;
  if (s.empty() || s[0] < '0' || s[0] > '9')
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": cannot parse '" + s + "' as a byte count");
  try {
    v = std::stoull(s, &pos);
  } catch (...) {
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": cannot parse '" + s + "' as a byte count");
  }
  std::string suffix = s.substr(pos);
  int shift = 0;
  if (suffix == "K" || suffix == "k")
    shift = 10;
  else if (suffix == "M" || suffix == "m")
    shift = 20;
  else if (suffix == "G" || suffix == "g")
    shift = 30;
  else if (!suffix.empty())
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": unknown suffix in '" + s + "' (use K, M or G)");
  if (v > ((std::uint64_t(1) << 50) >> shift))
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": '" + s + "' is larger than 2^50 bytes");
  return static_cast<std::size_t>(v << shift);
}

std::map<std::string, std::string> parse_algo_overrides(const std::string& spec) {
  std::map<std::string, std::string> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto colon = item.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size())
      throw Error(ErrorKind::InvalidArgument,
                  "TUTTI_ALGO: expected 'collective:algorithm' but got '" + item + "' in '" + spec + "'");
    out[item.substr(0, colon)] = item.substr(colon + 1);
  }
  return out;
}

Config Config::from_env() {
  // Every library setting of the table that is set: checked against its
  // range (a malformed TUTTI_LOG or TUTTI_PMIX fails init too), then stored.
  Config c;
  for (const Setting& s : settings()) {
    if (std::string(s.readers).find("library") == std::string::npos) continue;
    const std::string v = setting_env(s.name);
    if (v.empty()) continue;
    check_setting(s, v);
    if (s.store) s.store(c, v);
  }
  return c;
}

std::string Config::describe() const {
  std::string out;
  for (const Setting& s : settings()) {
    if (!s.shown) continue;
    const std::string v = s.shown(*this);
    out.append(out.empty() ? "" : " ").append(s.name).append("=").append(v.empty() ? "(unset)" : v);
  }
  return out + " TUTTI_LOG=" + std::to_string(static_cast<int>(log_level()));
}

std::string Config::shared_settings() const {
  std::string s;
  for (const Setting& e : settings()) {
    if (e.agree == Agreement::None || !e.shown) continue;
    s.append(e.agree == Agreement::Job ? "J " : "H ").append(e.name).append("=").append(e.shown(*this)).append("\n");
  }
  return s;
}

std::string settings_disagreement(const std::string& mine, const std::string& theirs, bool same_host, int me,
                                  int them) {
  if (mine == theirs) return "";
  const std::string other = "rank " + std::to_string(them);
  if (theirs.empty()) return other + " published no settings: it runs another version of tutti";
  // The lines that count ("J TUTTI_X=value"; "H ..." only on the same host).
  auto lines = [same_host](const std::string& s) {
    std::vector<std::string> out;
    std::size_t at = 0;
    for (std::size_t nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1)
      if (same_host || s.compare(at, 2, "H ") != 0) out.push_back(s.substr(at, nl - at));
    return out;
  };
  const std::vector<std::string> a = lines(mine), b = lines(theirs);
  const std::string another = other + " publishes other settings: it runs another version of tutti";
  if (a.size() != b.size()) return another;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const std::size_t eq = a[i].find('=');
    if (eq == std::string::npos || eq < 2 || b[i].compare(0, eq + 1, a[i], 0, eq + 1) != 0) return another;
    return "ranks disagree on " + a[i].substr(2, eq - 2) + ": '" + b[i].substr(eq + 1) + "' on " + other + ", '" +
           a[i].substr(eq + 1) + "' on rank " + std::to_string(me) + " (every rank of " +
           (a[i][0] == 'H' ? "a host" : "a job") + " must use the same value)";
  }
  return "";
}

}  // namespace tutti::detail
