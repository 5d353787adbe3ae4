#include "dtensor/ops/local_map.h"

#include "core/error.h"

namespace dt {

DTensorFn local_map(LocalFn fn, std::vector<std::vector<Placement>> in_placements,
                    std::vector<std::vector<Placement>> out_placements, LocalMapOptions options) {
  DT_CHECK_ARG(bool(fn), "dt::local_map: fn is empty");
  DT_CHECK_ARG(options.out_shapes.empty() || options.out_shapes.size() == out_placements.size(),
               "dt::local_map: ", options.out_shapes.size(), " out_shapes given for ", out_placements.size(),
               " outputs");
  return [fn = std::move(fn), ins = std::move(in_placements), outs = std::move(out_placements),
          options = std::move(options)](const std::vector<DTensor>& inputs) {
    DT_CHECK_ARG(inputs.size() == ins.size(), "dt::local_map: called with ", inputs.size(), " inputs, but ", ins.size(),
                 " in_placements were given");
    DT_CHECK_ARG(!inputs.empty() || !outs.empty(), "dt::local_map: no inputs and no outputs");
    DT_CHECK_ARG(!inputs.empty(), "dt::local_map: a function without DTensor inputs has no mesh");
    const DeviceMesh mesh = inputs[0].defined() ? inputs[0].mesh() : DeviceMesh();
    DT_CHECK_ARG(mesh.defined(), "dt::local_map: input 0 is undefined");
    std::vector<Tensor> locals;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const DTensor& x = inputs[i];
      DT_CHECK_ARG(x.defined(), "dt::local_map: input ", i, " is undefined");
      DT_CHECK_ARG(x.mesh() == mesh || x.mesh().same_layout(mesh), "dt::local_map: input ", i, " is on ",
                   x.mesh().to_string(), " but input 0 is on ", mesh.to_string());
      DTensor ready = x;
      if (!ins[i].empty()) {
        const ShardingSpec want = make_spec(ins[i], {}, x.dim(), mesh);
        if (!(want == x.spec())) {
          DT_CHECK_ARG(options.redistribute_inputs, "dt::local_map: input ", i, " is ", x.spec().to_string(),
                       " but in_placements asks for ", want.to_string(),
                       " (redistribute_inputs is false: redistribute it first)");
          ready = x.redistribute(want);
        }
      }
      locals.push_back(ready.to_local());
    }
    std::vector<DTensor> out;
    auto shape_of = [&](size_t i) -> std::optional<Shape> {
      return options.out_shapes.empty() ? std::nullopt : options.out_shapes[i];
    };
    if (!mesh.is_member()) {
      for (size_t i = 0; i < outs.size(); ++i) {
        const Shape shape = shape_of(i).value_or(Shape{0});
        out.push_back(DTensor::from_local_unchecked(Tensor::empty({0}, DType::f32, mesh.device()), mesh,
                                                    make_spec(outs[i], {}, int64_t(shape.size()), mesh), shape));
      }
      return out;
    }
    std::vector<Tensor> results = fn(locals);
    DT_CHECK_ARG(results.size() == outs.size(), "dt::local_map: fn returned ", results.size(), " tensors but ",
                 outs.size(), " out_placements were given");
    for (size_t i = 0; i < results.size(); ++i) {
      DT_CHECK_ARG(results[i].defined(), "dt::local_map: fn returned an undefined tensor as output ", i);
      out.push_back(DTensor::from_local(results[i], mesh, outs[i], shape_of(i)));
    }
    return out;
  };
}

}  // namespace dt
