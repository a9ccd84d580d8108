"""The Triton CPU tier's dispatch: an operator implementation a library registers for CUDA tensors
(torch.library, the CUDA or AutogradCUDA key) is registered for the CPU key too, since the tier's
"cuda" tensors are CPU tensors and would otherwise run torch's own CPU kernel: the library's Triton
kernel would never run, and its tests would pass having tested nothing (cpu_tier says the rest).

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
        if cpu_key is not None:
            companions = self.__dict__.setdefault(_COMPANIONS, {})
            if cpu_key not in companions:
                companions[cpu_key] = Library(self.ns, "IMPL", cpu_key)
            with warnings.catch_warnings():  # torch warns that it overrides its own CPU kernel: it is meant
                warnings.simplefilter("ignore")
                impl(companions[cpu_key], op_name, fn, cpu_key, *args, **kwargs)
            name = f"{self.ns}::{op_name if isinstance(op_name, str) else getattr(op_name, '__name__', op_name)}"
            STATE.cuda_registrations[name] = STATE.cuda_registrations.get(name, 0) + 1
        return registered

    def destroy_with_companions(self):
        for companion in self.__dict__.pop(_COMPANIONS, {}).values():
            destroy(companion)
        destroy(self)

    Library.impl, Library._destroy = impl_for_cuda_tensors, destroy_with_companions
