"""The Triton CPU tier's dispatch: an operator implementation a library registers for CUDA tensors
(torch.library, the CUDA or AutogradCUDA key) is registered for the CPU key too, since the tier's
"cuda" tensors are CPU tensors and would otherwise run torch's own CPU kernel: the library's Triton
kernel would never run, and its tests would pass having tested nothing (cpu_tier says the rest).

An operator of the repository's own namespace that already has a CPU kernel (the repository's
reference, or a composite implementation) keeps it, and the receipt says so: a test comparing the
CUDA implementation with the CPU one must still compare two things. aten's operators are torch's,
whose CPU kernels are what the mirror replaces.

The CPU registration lives exactly as long as the CUDA one: it is made on a companion library that
the registering library owns, and destroyed with it (an operator library that registers on entering
a context and destroys its library on leaving it leaves torch's CPU kernels in place outside). A
test that computes its reference with the same operator inside that context would compare the
kernel with itself; the sensitivity run is what shows such a suite cannot fail.
"""
import warnings

from .cpu_state import STATE

# the dispatch keys of CUDA tensors, and the keys the tier's tensors dispatch to instead
CPU_KEYS = {"CUDA": "CPU", "AutogradCUDA": "AutogradCPU"}
_COMPANIONS = "_kvtasks_cpu_companions"


def install_cuda_registrations():
    from torch.library import Library

    impl, destroy = Library.impl, Library._destroy

    def impl_for_cuda_tensors(self, op_name, fn, dispatch_key="", *args, **kwargs):
        registered = impl(self, op_name, fn, dispatch_key, *args, **kwargs)
        cpu_key = CPU_KEYS.get(dispatch_key or self.dispatch_key)
        name = _qualified(self, op_name)
        if cpu_key is not None and self.ns != "aten" and _has_cpu_kernel(name):
            STATE.cuda_registrations_kept[name] = "the operator's own CPU kernel is kept"
        elif cpu_key is not None:
            companions = self.__dict__.setdefault(_COMPANIONS, {})
            if cpu_key not in companions:
                companions[cpu_key] = Library(self.ns, "IMPL", cpu_key)
            with warnings.catch_warnings():  # torch warns that it overrides its own CPU kernel: it is meant
                warnings.simplefilter("ignore")
                impl(companions[cpu_key], op_name, fn, cpu_key, *args, **kwargs)
            STATE.cuda_registrations[name] = STATE.cuda_registrations.get(name, 0) + 1
        return registered

    def destroy_with_companions(self):
        for companion in self.__dict__.pop(_COMPANIONS, {}).values():
            destroy(companion)
        destroy(self)

    Library.impl, Library._destroy = impl_for_cuda_tensors, destroy_with_companions


def _qualified(library, op_name) -> str:
    """"ns::name.overload" of an impl's operator, given by name or as an OpOverload."""
    if isinstance(op_name, str):
        return op_name if "::" in op_name else f"{library.ns}::{op_name}"
    return op_name.name() if callable(getattr(op_name, "name", None)) else str(op_name)


def _has_cpu_kernel(name: str) -> bool:
    import torch

    try:
        return torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "CPU")
    except RuntimeError:  # an operator the dispatcher does not know yet
        return False
