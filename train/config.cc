// The trainer's configuration (train/config.h): one table of fields, parsed from TOML (toml++), overridden from the
// command line, validated, printed.
#include "train/config.h"

#include <toml++/toml.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "core/error.h"
#include "dtensor/checkpoint/file_io.h"

namespace dt::train {
namespace {

enum class Kind { kInt, kFloat, kBool, kString };

struct Field {
  const char* section;
  const char* key;
  Kind kind;
  void* (*ptr)(TrainConfig&);
  double lo, hi;        // numbers: the accepted range
  const char* choices;  // strings: comma-separated accepted values, or nullptr for any
  const char* help;
};

constexpr double kInf = 1e300;
#define DT_FIELD(sec, name, kind, lo, hi, choices, help)                                                 \
  Field {                                                                                                \
#sec, #name, Kind::kind, [](TrainConfig & c) -> void* { return &c.sec.name; }, lo, hi, choices, help \
  }

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      DT_FIELD(model, hf_folder, kString, 0, 0, nullptr, "a Hugging Face Llama-family folder to start from"),
      DT_FIELD(model, vocab, kInt, 1, kInf, nullptr, "vocabulary size (from scratch)"),
      DT_FIELD(model, dim, kInt, 1, kInf, nullptr, "model width"),
      DT_FIELD(model, layers, kInt, 0, kInf, nullptr, "transformer blocks"),
      DT_FIELD(model, heads, kInt, 1, kInf, nullptr, "query heads"),
      DT_FIELD(model, kv_heads, kInt, 0, kInf, nullptr, "key/value heads (0: heads)"),
      DT_FIELD(model, hidden, kInt, 0, kInf, nullptr, "MLP width (0: 4 * dim)"),
      DT_FIELD(model, rope_theta, kFloat, 1e-9, kInf, nullptr, "RoPE base"),
      DT_FIELD(model, norm_eps, kFloat, 1e-12, 1, nullptr, "RMSNorm epsilon"),
      DT_FIELD(model, tie_embeddings, kBool, 0, 0, nullptr, "output projection = token embedding"),
      DT_FIELD(model, init_std, kFloat, 0, 10, nullptr, "std of the weights' initial values (from scratch)"),
      DT_FIELD(model, init_cutoff, kFloat, 0, 100, nullptr, "the normal truncated at +-cutoff std (0: not)"),
      DT_FIELD(model, init_depth, kString, 0, 0, "none,depth,layers",
               "output projections' std / sqrt(2 (l + 1)) (depth) or / sqrt(2 layers)"),
      DT_FIELD(parallelism, dp, kInt, 1, kInf, nullptr, "data-parallel ranks"),
      DT_FIELD(parallelism, tp, kInt, 1, kInf, nullptr, "tensor-parallel ranks"),
      DT_FIELD(parallelism, hsdp, kInt, 1, kInf, nullptr, "HSDP replicas (1: plain FSDP)"),
      DT_FIELD(parallelism, fsdp, kBool, 0, 0, nullptr, "shard parameters over dp (FSDP2)"),
      DT_FIELD(training, steps, kInt, 0, kInf, nullptr, "optimizer steps"),
      DT_FIELD(training, seq, kInt, 1, kInf, nullptr, "tokens per row"),
      DT_FIELD(training, global_batch, kInt, 1, kInf, nullptr, "rows per step over all dp ranks"),
      DT_FIELD(training, grad_accum, kInt, 1, kInf, nullptr, "micro-batches per step"),
      DT_FIELD(training, seed, kInt, 0, kInf, nullptr, "init and data order"),
      DT_FIELD(training, threads, kInt, 0, 1024, nullptr, "intra-op threads per rank (0: cores / ranks)"),
      DT_FIELD(training, max_norm, kFloat, 0, kInf, nullptr, "gradient clipping (0: off)"),
      DT_FIELD(training, activation_checkpointing, kInt, 0, kInf, nullptr,
               "recompute every k-th block in backward (0: off)"),
      DT_FIELD(optimizer, lr, kFloat, 0, kInf, nullptr, "peak learning rate"),
      DT_FIELD(optimizer, beta1, kFloat, 0, 0.999999, nullptr, "AdamW beta1"),
      DT_FIELD(optimizer, beta2, kFloat, 0, 0.999999, nullptr, "AdamW beta2"),
      DT_FIELD(optimizer, eps, kFloat, 0, 1, nullptr, "AdamW eps"),
      DT_FIELD(optimizer, weight_decay, kFloat, 0, kInf, nullptr, "of the decayed group"),
      DT_FIELD(optimizer, decay_norms, kBool, 0, 0, nullptr, "decay norm weights too"),
      DT_FIELD(optimizer, decay_biases, kBool, 0, 0, nullptr, "decay biases too"),
      DT_FIELD(optimizer, decay_embeddings, kBool, 0, 0, nullptr, "decay embeddings too"),
      DT_FIELD(lr_schedule, kind, kString, 0, 0, "constant,cosine,linear,wsd", "the schedule after warmup"),
      DT_FIELD(lr_schedule, warmup, kInt, 0, kInf, nullptr, "linear warmup steps"),
      DT_FIELD(lr_schedule, decay_steps, kInt, 0, kInf, nullptr, "wsd: the final decay's steps"),
      DT_FIELD(lr_schedule, min_lr, kFloat, 0, kInf, nullptr, "the lr at the end"),
      DT_FIELD(data, path, kString, 0, 0, nullptr, "the token dataset (.bin or .json)"),
      DT_FIELD(data, validation_fraction, kFloat, 0, 0.5, nullptr, "held out at the end of the corpus"),
      DT_FIELD(data, val_every, kInt, 0, kInf, nullptr, "validation every N steps (0: never)"),
      DT_FIELD(data, val_batches, kInt, 1, kInf, nullptr, "global batches per validation"),
      DT_FIELD(checkpoint, folder, kString, 0, 0, nullptr, "checkpoints in folder/step-NNNNNN"),
      DT_FIELD(checkpoint, every, kInt, 0, kInf, nullptr, "a checkpoint every N steps (0: at the end)"),
      DT_FIELD(checkpoint, keep, kInt, 1, kInf, nullptr, "complete checkpoints kept"),
      DT_FIELD(checkpoint, async, kBool, 0, 0, nullptr, "write while training goes on"),
      DT_FIELD(checkpoint, resume, kBool, 0, 0, nullptr, "resume from the newest checkpoint"),
      DT_FIELD(checkpoint, export_hf, kString, 0, 0, nullptr, "the trained model as a Hugging Face folder"),
      DT_FIELD(mixed_precision, param_dtype, kString, 0, 0, "f32,bf16,f16", "FSDP's compute dtype"),
      DT_FIELD(mixed_precision, reduce_dtype, kString, 0, 0, "f32,bf16,f16", "gradient reduction dtype"),
      DT_FIELD(mixed_precision, init_scale, kFloat, 1e-30, kInf, nullptr, "f16: initial loss scale"),
      DT_FIELD(mixed_precision, growth_interval, kInt, 1, kInf, nullptr, "f16: clean steps before growth"),
      DT_FIELD(logging, log_file, kString, 0, 0, nullptr, "JSON lines: steps and validations"),
      DT_FIELD(logging, every, kInt, 1, kInf, nullptr, "a line every N steps"),
      DT_FIELD(logging, peak_flops, kFloat, 0, kInf, nullptr, "FLOP/s per rank for MFU (0: measured)"),
  };
  return table;
}
#undef DT_FIELD

const Field* find(const std::string& section, const std::string& key) {
  for (const Field& f : fields())
    if (section == f.section && key == f.key) return &f;
  return nullptr;
}

std::string full(const Field& f) { return std::string(f.section) + "." + f.key; }

void set_from_toml(TrainConfig& c, const Field& f, const toml::node& v, const std::string& where) {
  void* p = f.ptr(c);
  auto wrong = [&](const char* want) {
    std::ostringstream got;
    got << v.type();
    DT_THROW(InvalidArgument, where, ": '", full(f), "' must be ", want, ", got a value of type ", got.str());
  };
  switch (f.kind) {
    case Kind::kInt:
      if (!v.is_integer()) wrong("an integer");
      *static_cast<int64_t*>(p) = v.value<int64_t>().value();
      break;
    case Kind::kFloat:
      if (!v.is_number()) wrong("a number");
      *static_cast<double*>(p) = v.value<double>().value();
      break;
    case Kind::kBool:
      if (!v.is_boolean()) wrong("true or false");
      *static_cast<bool*>(p) = v.value<bool>().value();
      break;
    case Kind::kString:
      if (!v.is_string()) wrong("a string");
      *static_cast<std::string*>(p) = v.value<std::string>().value();
      break;
  }
}

void set_from_text(TrainConfig& c, const Field& f, const std::string& text) {
  void* p = f.ptr(c);
  const std::string where = "--" + full(f);
  char* end = nullptr;
  switch (f.kind) {
    case Kind::kInt: {
      const long long v = std::strtoll(text.c_str(), &end, 10);
      DT_CHECK_ARG(!text.empty() && *end == '\0', where, " must be an integer, got '", text, "'");
      *static_cast<int64_t*>(p) = v;
      break;
    }
    case Kind::kFloat: {
      const double v = std::strtod(text.c_str(), &end);
      DT_CHECK_ARG(!text.empty() && *end == '\0', where, " must be a number, got '", text, "'");
      *static_cast<double*>(p) = v;
      break;
    }
    case Kind::kBool:
      DT_CHECK_ARG(text == "true" || text == "false", where, " must be true or false, got '", text, "'");
      *static_cast<bool*>(p) = text == "true";
      break;
    case Kind::kString:
      *static_cast<std::string*>(p) = text;
      break;
  }
}

std::string value_text(TrainConfig& c, const Field& f) {
  void* p = f.ptr(c);
  std::ostringstream os;
  switch (f.kind) {
    case Kind::kInt:
      os << *static_cast<int64_t*>(p);
      break;
    case Kind::kFloat: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", *static_cast<double*>(p));
      std::string s = buf;
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // a TOML float, not an integer
      os << s;
      break;
    }
    case Kind::kBool:
      os << (*static_cast<bool*>(p) ? "true" : "false");
      break;
    case Kind::kString: {
      os << '"';
      for (char ch : *static_cast<std::string*>(p)) {
        if (ch == '"' || ch == '\\') os << '\\';
        os << ch;
      }
      os << '"';
      break;
    }
  }
  return os.str();
}

void validate(TrainConfig& c) {
  for (const Field& f : fields()) {
    void* p = f.ptr(c);
    if (f.kind == Kind::kInt || f.kind == Kind::kFloat) {
      const double v = f.kind == Kind::kInt ? double(*static_cast<int64_t*>(p)) : *static_cast<double*>(p);
      DT_CHECK_ARG(std::isfinite(v) && v >= f.lo && v <= f.hi, "config: '", full(f), "' is ", v, ", outside [", f.lo,
                   ", ", f.hi >= kInf ? std::string("inf") : std::to_string(f.hi), "]");
    }
    if (f.kind == Kind::kString && f.choices != nullptr) {
      const std::string& v = *static_cast<std::string*>(p);
      std::stringstream ss(f.choices);
      std::string choice;
      bool ok = false;
      while (std::getline(ss, choice, ',')) ok = ok || choice == v;
      DT_CHECK_ARG(ok, "config: '", full(f), "' is \"", v, "\", not one of ", f.choices);
    }
  }
  const auto& t = c.training;
  DT_CHECK_ARG(t.global_batch % t.grad_accum == 0, "config: 'training.global_batch' ", t.global_batch,
               " is not a multiple of 'training.grad_accum' ", t.grad_accum);
  DT_CHECK_ARG(c.parallelism.dp % c.parallelism.hsdp == 0, "config: 'parallelism.dp' ", c.parallelism.dp,
               " is not a multiple of 'parallelism.hsdp' ", c.parallelism.hsdp);
  DT_CHECK_ARG(c.parallelism.hsdp == 1 || c.parallelism.fsdp, "config: 'parallelism.hsdp' needs 'parallelism.fsdp'");
  DT_CHECK_ARG(c.mixed_precision.param_dtype == "f32" || c.parallelism.fsdp,
               "config: 'mixed_precision.param_dtype' other than f32 needs 'parallelism.fsdp' (FSDP casts)");
  DT_CHECK_ARG(!c.data.path.empty(), "config: 'data.path' (the token dataset) is required");
}

}  // namespace

TrainConfig parse_config(const std::string& toml_text, const std::vector<std::string>& overrides,
                         const std::string& source) {
  TrainConfig c;
  toml::table doc;
  try {
    doc = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    DT_THROW(InvalidArgument, source, ":", e.source().begin.line, ":", e.source().begin.column, ": ", e.description());
  }
  for (const auto& [section, node] : doc) {
    const std::string sec(section.str());
    const toml::table* table = node.as_table();
    bool known = false;
    for (const Field& f : fields()) known = known || sec == f.section;
    DT_CHECK_ARG(known && table != nullptr, source, ": unknown section '", sec, "' (sections: model, parallelism, ",
                 "training, optimizer, lr_schedule, data, checkpoint, mixed_precision, logging)");
    for (const auto& [key, value] : *table) {
      const Field* f = find(sec, std::string(key.str()));
      const auto line = value.source().begin.line;
      DT_CHECK_ARG(f != nullptr, source, ":", line, ": unknown key '", sec, ".", key.str(), "'");
      set_from_toml(c, *f, value, source + ":" + std::to_string(line));
    }
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    std::string name = overrides[i], value;
    DT_CHECK_ARG(name.rfind("--", 0) == 0, "config override '", name, "' must be --section.key VALUE");
    name = name.substr(2);
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      DT_CHECK_ARG(i + 1 < overrides.size(), "config override --", name, " has no value");
      value = overrides[++i];
    }
    const size_t dot = name.find('.');
    const Field* f = dot == std::string::npos ? nullptr : find(name.substr(0, dot), name.substr(dot + 1));
    DT_CHECK_ARG(f != nullptr, "unknown config key --", name, " (dttrain --help-config lists them)");
    set_from_text(c, *f, value);
  }
  validate(c);
  return c;
}

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return parse_config("", overrides, "<defaults>");
  DT_CHECK_ARG(checkpoint::file_exists(path), "config file '", path, "' does not exist");
  return parse_config(checkpoint::read_whole_file(path), overrides, path);
}

std::string to_toml(const TrainConfig& config) {
  TrainConfig c = config;
  std::ostringstream os;
  std::string section;
  for (const Field& f : fields()) {
    if (section != f.section) {
      os << (section.empty() ? "" : "\n") << "[" << f.section << "]\n";
      section = f.section;
    }
    os << f.key << " = " << value_text(c, f) << "\n";
  }
  return os.str();
}

std::string config_help() {
  TrainConfig c;
  std::ostringstream os;
  for (const Field& f : fields()) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-36s %-22s %s", full(f).c_str(), value_text(c, f).c_str(), f.help);
    os << line;
    if (f.choices) os << " (" << f.choices << ")";
    os << "\n";
  }
  return os.str();
}

}  // namespace dt::train
