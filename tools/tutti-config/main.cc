// tutti-config: the TUTTI_* settings, from the library's one table of them
// (src/common/settings.h).
//
//   tutti-config              every setting the library reads, with the value
//                             this environment gives it (checked: a value out
//                             of range is an error, exit status 2)
//   tutti-config --markdown   the table of docs/configuration.md
//   tutti-config --names      every setting's name, one per line
//   tutti-config --algorithms the table of docs/algorithms.md, from the
//                             library's registry of algorithms (src/plan/registry.h)
#include <cstdio>
#include <cstring>
#include <string>

#include "common/config.h"
#include "common/settings.h"
#include "plan/registry.h"
#include "tutti/error.h"

int main(int argc, char** argv) {
  using namespace tutti::detail;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--markdown") {
    std::fputs(settings_markdown().c_str(), stdout);
    return 0;
  }
  if (mode == "--algorithms") {
    std::fputs(algorithms_markdown().c_str(), stdout);
    return 0;
  }
  if (mode == "--names") {
    for (const Setting& s : settings()) std::printf("%s\n", s.name);
    return 0;
  }
  if (!mode.empty()) {
    std::fprintf(stderr, "usage: tutti-config [--markdown | --names | --algorithms]\n");
    return 2;
  }
  try {
    const Config c = Config::from_env();
    for (const Setting& s : settings()) {
      const std::string set = setting_env(s.name);
      std::string value = s.shown ? s.shown(c) : set;
      if (std::strcmp(s.name, "TUTTI_JOB_SECRET") == 0 && !value.empty()) value = "(hidden)";
      std::printf("%-30s %-10s %s%s\n", s.name, set.empty() ? "(default)" : "(set)", value.c_str(),
                  std::strstr(s.readers, "library") ? "" : (std::string("   [read by ") + s.readers + "]").c_str());
    }
  } catch (const tutti::Error& e) {
    std::fprintf(stderr, "tutti-config: %s\n", e.what());
    return 2;
  }
  return 0;
}
