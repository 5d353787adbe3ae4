// What the command-line tools (dtplan, dtckpt) share: the usage error that makes them exit with status 2, and a
// reader of their arguments ("--name value", "--name=value", flags, operands; -h and --help print the usage).
//
//   dt::tools::ArgReader args(argc, argv, kUsage);
//   while (args.next()) {
//     if (args.name() == "--json") { args.no_value(); json = true; }
//     else if (args.name() == "--shape") shape = args.value();
//     ...
//   }
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace dt::tools {

// Bad arguments: main prints "<tool>: <message>" and a pointer to --help, and exits 2.
struct UsageError {
  std::string message;
};

class ArgReader {
 public:
  ArgReader(int argc, char** argv, const char* usage) : argc_(argc), argv_(argv), usage_(usage) {}

  // Moves to the next argument; false after the last. -h and --help print the usage and exit 0.
  bool next() {
    if (++i_ >= argc_) return false;
    name_ = argv_[i_];
    inline_value_.reset();
    if (name_.rfind("--", 0) == 0) {
      const size_t eq = name_.find('=');
      if (eq != std::string::npos) {
        inline_value_ = name_.substr(eq + 1);
        name_.resize(eq);
      }
    }
    if (name_ == "-h" || name_ == "--help") {
      std::fputs(usage_, stdout);
      std::exit(0);
    }
    return true;
  }
  // The argument ("--shape" of "--shape=7,5").
  const std::string& name() const { return name_; }
  // Whether it is an option (starts with '-'; a lone "-" is an operand).
  bool is_option() const { return name_.size() > 1 && name_[0] == '-'; }
  // The option's value: after '=', else the next argument (consumed).
  std::string value() {
    if (inline_value_) return *inline_value_;
    if (i_ + 1 >= argc_) throw UsageError{name_ + " needs a value"};
    return argv_[++i_];
  }
  // For a flag: refuses "--flag=value".
  void no_value() const {
    if (inline_value_) throw UsageError{name_ + " takes no value"};
  }

 private:
  int argc_;
  char** argv_;
  const char* usage_;
  int i_ = 0;
  std::string name_;
  std::optional<std::string> inline_value_;
};

}  // namespace dt::tools
