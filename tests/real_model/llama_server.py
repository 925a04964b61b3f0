"""llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server ARGS`), run by the
llama venv's Python, optionally with llama.cpp's extra buffer types off.

`--no-extra-bufts` (taken before the server's own arguments): the CPU backend's extra buffer
types (AMX, repacked weights) segfault decoding in llama-cpp-python 0.3.36 on a CPU that has
AMX and AVX-512 (this machine's: Gemma 3's Q4_K at once, SmolLM2's Q4_1 on its first
completion or mid-run); the plain CPU buffers decode them.
The server exposes no option for it, so the model's default parameters are patched before it
loads. Run as a file, not imported: it imports llama_cpp, which only the llama venv holds."""

import runpy
import sys

if __name__ == "__main__":
    if "--no-extra-bufts" in sys.argv:
        sys.argv.remove("--no-extra-bufts")
        import llama_cpp
        import llama_cpp.llama

        defaults = llama_cpp.llama_model_default_params

        def without_extra_bufts():
            params = defaults()
            params.use_extra_bufts = False
            return params

        llama_cpp.llama_model_default_params = without_extra_bufts
        llama_cpp.llama.llama_cpp.llama_model_default_params = without_extra_bufts
    sys.argv[0] = "llama_cpp.server"
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
