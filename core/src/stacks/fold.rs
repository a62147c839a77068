//! The frame folding table: which frames of a stack a reader is shown. memory_viz's
//! `frameFilter` list (interpreter and unwinder internals) is the start; to it come the caching
//! allocator's own C++ frames, the dispatcher and Python-binding layers, the autograd engine's
//! plumbing, and `nn.Module` / optimizer / decorator call plumbing in Python. What is left is
//! code a user wrote or would recognise: their own files, model libraries (transformers, …),
//! `torch.nn.functional`, optimizers, autograd backward nodes.

/// What a frame is, for folding and for attribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// CPython, the unwinder, libc, thread start-up.
    Interpreter,
    /// The CUDA caching allocator and ATen's empty-tensor factories that call it.
    Allocator,
    /// The operator dispatcher, generated registration and autograd `VariableType` wrappers,
    /// and the Python bindings that enter them.
    Dispatcher,
    /// The autograd engine's worker loop and node calls.
    AutogradEngine,
    /// Python call plumbing: `nn.Module.__call__`, optimizer step decorators, context-manager
    /// and `functools.wraps` wrappers in libraries.
    Plumbing,
    /// Other native frames (ATen kernels, autograd backward nodes).
    Native,
    /// Python inside `torch/` (functional ops, optimizers, checkpointing), or inside JAX and
    /// its libraries (`jax/`, `flax/`, `optax/`, `equinox/`, `haiku/`: [`FRAMEWORKS`]).
    Torch,
    /// Python outside `torch/`: the user's code and model libraries.
    Model,
}

impl FrameKind {
    /// Whether views fold the frame away by default.
    pub fn folded(self) -> bool {
        matches!(
            self,
            FrameKind::Interpreter
                | FrameKind::Allocator
                | FrameKind::Dispatcher
                | FrameKind::AutogradEngine
                | FrameKind::Plumbing
        )
    }
}

/// Function names of interpreter and unwinder internals (memory_viz's list and kin).
const INTERPRETER_NAMES: &[&str] = &[
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "__libc_start_main",
    "__libc_init_first",
    "__clone",
    "start_thread",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];

/// Function-name prefixes of interpreter, libc and thread frames.
const INTERPRETER_PREFIXES: &[&str] = &["Py", "_Py", "_start", "pthread_", "std::", "clone"];

/// File names of interpreter and dispatcher internals (memory_viz's list).
const INTERPRETER_FILES: &[&str] = &[
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// The caching allocator and the factories that only ask it for memory.
const ALLOCATOR_NAMES: &[&str] = &[
    "CachingAllocator",
    "c10::Allocator",
    "at::detail::empty_",
    "at::native::empty_",
    "at::empty_strided",
    "at::empty(",
    "at::empty_like",
    "at::native::empty_like",
    "create_out(",
    "set_output_raw_strided",
    "at::TensorIteratorBase::allocate",
    "at::TensorIteratorBase::fast_set_up",
    "at::TensorIteratorBase::build",
    // Structured kernels' meta functions only size and allocate the outputs.
    "at::meta::",
];

/// The dispatcher, generated wrappers and Python bindings.
const DISPATCHER_NAMES: &[&str] = &[
    "c10::impl::",
    "c10::Dispatcher",
    "c10::OperatorHandle",
    "c10::BoxedKernel",
    "at::_ops::",
    "torch::autograd::VariableType::",
    "torch::ADInplaceOrView::",
    "torch::TraceType::",
    "wrapper_CUDA",
    "wrapper_Composite",
    "torch::autograd::THPVariable",
    "THPVariable_",
    "torch::autograd::dispatch_",
    "torch::autograd::utils::wrap",
];

const DISPATCHER_FILES: &[&str] = &[
    "core/boxing",
    "/Register",
    "/Redispatch",
    "Register",
    "VariableType_",
    "ADInplaceOrViewType",
    "TraceType_",
    "python_variable_methods.cpp",
    "python_torch_functions",
    "python_nn_functions",
];

const AUTOGRAD_ENGINE_NAMES: &[&str] = &[
    "torch::autograd::Engine::",
    "torch::autograd::Node::operator()",
    "torch::autograd::python::PythonEngine",
    "torch::autograd::call_function",
    "torch::autograd::validate_outputs",
    "_apply_functional",
];

/// Python call plumbing: (file ending, function names; empty = any).
const PLUMBING: &[(&str, &[&str])] = &[
    (
        "torch/nn/modules/module.py",
        &["_call_impl", "_wrapped_call_impl", "__call__", "inner"],
    ),
    ("torch/optim/optimizer.py", &["_use_grad", "wrapper", "patched_step"]),
    ("torch/utils/_contextlib.py", &[]),
    ("torch/autograd/graph.py", &["_engine_run_backward"]),
    ("torch/autograd/__init__.py", &["backward"]),
    ("torch/_compile.py", &["inner"]),
    ("torch/_dynamo/eval_frame.py", &["_fn"]),
    ("torch/_jit_internal.py", &["fn"]),
    ("torch/multiprocessing/spawn.py", &[]),
    (
        "torch/nn/parallel/distributed.py",
        &["_run_ddp_forward", "_pre_forward", "_post_forward"],
    ),
    ("transformers/utils/generic.py", &["wrapper", "wrapped_fn"]),
    ("transformers/utils/deprecation.py", &["wrapped_func"]),
    ("transformers/modeling_layers.py", &["__call__"]),
    ("accelerate/hooks.py", &["new_forward"]),
    // JAX's dispatch: a jitted call's cache lookup, compilation and execution, the traceback
    // filter, the profiler's decorator, primitive binding.
    ("jax/_src/pjit.py", &[]),
    ("jax/_src/interpreters/pxla.py", &[]),
    ("jax/_src/dispatch.py", &[]),
    ("jax/_src/traceback_util.py", &[]),
    ("jax/_src/profiler.py", &["wrapper"]),
    ("jax/_src/core.py", &[]),
    ("jax/_src/linear_util.py", &[]),
    ("jax/_src/api_util.py", &[]),
    (
        "flax/linen/module.py",
        &[
            "_call_wrapped_method",
            "wrapped_module_method",
            "wrapped_fn",
            "scope_fn",
        ],
    ),
    ("flax/core/scope.py", &["wrapper"]),
    ("functools.py", &[]),
    ("contextlib.py", &[]),
    ("runpy.py", &[]),
    ("threading.py", &[]),
    ("multiprocessing/process.py", &[]),
    ("multiprocessing/spawn.py", &[]),
];

/// Python packages that are the framework, not the model: PyTorch, and JAX with the libraries
/// that play torch.nn's and torch.optim's parts there (flax, equinox, haiku, optax).
const FRAMEWORKS: &[&str] = &["torch/", "jax/", "jaxlib/", "flax/", "optax/", "equinox/", "haiku/"];

fn any_in(s: &str, table: &[&str]) -> bool {
    table.iter().any(|p| s.contains(p))
}

/// Whether a frame is Python code (a `.py` file, or a frozen/builtin module as CPython names it).
pub fn is_python(file: &str) -> bool {
    file.ends_with(".py") || file.starts_with("<frozen ")
}

/// The kind of a frame, from its function and file names.
pub fn classify(name: &str, file: &str) -> FrameKind {
    if is_python(file) {
        let path = file.replace('\\', "/");
        let plumbing = PLUMBING
            .iter()
            .any(|(ending, names)| path.ends_with(ending) && (names.is_empty() || names.contains(&name)));
        if plumbing || file.starts_with("<frozen ") {
            return FrameKind::Plumbing;
        }
        let lib = path.rfind("-packages/").map_or(path.as_str(), |i| &path[i + 10..]);
        // Code FX generated for a graph (torch.compile's eager backends, symbolic tracing): the
        // model's source is the original trace beside it, not this file.
        let base = path.rsplit('/').next().unwrap_or(&path);
        let fx_generated = base.starts_with("fx_generated_");
        return if FRAMEWORKS.iter().any(|f| lib.starts_with(f)) || fx_generated {
            FrameKind::Torch
        } else {
            FrameKind::Model
        };
    }
    if any_in(name, INTERPRETER_NAMES)
        || INTERPRETER_PREFIXES.iter().any(|p| name.starts_with(p))
        || any_in(file, INTERPRETER_FILES)
    {
        return FrameKind::Interpreter;
    }
    if any_in(name, ALLOCATOR_NAMES) || file.contains("CachingAllocator") {
        return FrameKind::Allocator;
    }
    if any_in(name, DISPATCHER_NAMES) || any_in(file, DISPATCHER_FILES) {
        return FrameKind::Dispatcher;
    }
    if any_in(name, AUTOGRAD_ENGINE_NAMES) {
        return FrameKind::AutogradEngine;
    }
    FrameKind::Native
}

/// A native function name without its argument list and return type:
/// `torch::autograd::generated::AddmmBackward0::apply(std::vector<…>&&)` →
/// `torch::autograd::generated::AddmmBackward0::apply`, `at::Tensor at::_sum_to<c10::SymInt>(…)`
/// → `at::_sum_to<c10::SymInt>`.
pub fn short_native_name(name: &str) -> &str {
    // Cut at the '(' that opens the argument list (the first outside template brackets), and
    // before the last space outside them (what precedes it is the return type).
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            ' ' if depth <= 0 => start = i + 1,
            '(' if depth <= 0 && i > 0 && !name[..i].ends_with("operator") => return &name[start..i],
            _ => {}
        }
    }
    &name[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_from_real_stacks_fold_as_a_reader_expects() {
        for (name, file, kind) in [
            (
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)",
                "CUDACachingAllocator.cpp",
                FrameKind::Allocator,
            ),
            (
                "at::detail::empty_strided_cuda(c10::ArrayRef<long>)",
                "??",
                FrameKind::Allocator,
            ),
            ("at::_ops::clone::call(at::Tensor const&)", "??", FrameKind::Dispatcher),
            (
                "at::(anonymous namespace)::wrapper_CUDA_mm",
                "RegisterCUDA_0.cpp",
                FrameKind::Dispatcher,
            ),
            (
                "torch::autograd::THPVariable_clone(_object*)",
                "python_variable_methods.cpp",
                FrameKind::Dispatcher,
            ),
            ("PyDescr_IsData", "??", FrameKind::Interpreter),
            ("_PyRun_SimpleFileObject", "??", FrameKind::Interpreter),
            ("__libc_init_first", "??", FrameKind::Interpreter),
            (
                "torch::autograd::Engine::thread_main(std::shared_ptr<>)",
                "??",
                FrameKind::AutogradEngine,
            ),
            (
                "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor>&&)",
                "??",
                FrameKind::Native,
            ),
            (
                "_call_impl",
                "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
                FrameKind::Plumbing,
            ),
            (
                "forward",
                "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                FrameKind::Torch,
            ),
            (
                "wrapper",
                "/opt/venv/lib/python3.12/site-packages/torch/optim/optimizer.py",
                FrameKind::Plumbing,
            ),
            (
                "forward",
                "/opt/venv/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py",
                FrameKind::Model,
            ),
            ("train_step", "/home/me/proj/train.py", FrameKind::Model),
            // A JAX buffer's traceback: dispatch folded, the framework's code shown.
            (
                "__call__",
                "/v/lib/python3.11/site-packages/jax/_src/interpreters/pxla.py",
                FrameKind::Plumbing,
            ),
            (
                "cache_miss",
                "/v/lib/python3.11/site-packages/jax/_src/pjit.py",
                FrameKind::Plumbing,
            ),
            (
                "zeros_like",
                "/v/lib/python3.11/site-packages/jax/_src/numpy/array_creation.py",
                FrameKind::Torch,
            ),
            (
                "param",
                "/v/lib/python3.11/site-packages/flax/core/scope.py",
                FrameKind::Torch,
            ),
            (
                "init_fn",
                "/v/lib/python3.11/site-packages/optax/_src/transform.py",
                FrameKind::Torch,
            ),
        ] {
            assert_eq!(classify(name, file), kind, "{name} in {file}");
        }
    }

    #[test]
    fn native_names_lose_their_arguments() {
        assert_eq!(
            short_native_name("torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),
            "torch::autograd::generated::AddmmBackward0::apply"
        );
        assert_eq!(
            short_native_name("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&), &f>>>::call(c10::OperatorKernel*)"),
            "c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&), &f>>>::call"
        );
        assert_eq!(
            short_native_name("torch::autograd::Node::operator()(std::vector<>&&)"),
            "torch::autograd::Node::operator()"
        );
        assert_eq!(
            short_native_name("at::Tensor at::_sum_to<c10::SymInt>(at::Tensor, c10::ArrayRef<c10::SymInt>)"),
            "at::_sum_to<c10::SymInt>"
        );
    }
}
