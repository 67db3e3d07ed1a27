# SPDX-License-Identifier: Apache-2.0
"""``python -m opendnn.collect_env``: what opendnn, Python, the OS, the GPUs, CUDA, cuDNN and torch
look like on this machine. Standard library only; every probe is guarded so the report is printed
even when ``import opendnn`` or torch is broken."""

import ctypes
import glob
import importlib
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig

_FLAGS = []


def _flag(msg):
    _FLAGS.append(msg)


def _run(cmd, timeout=10):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return r.stdout.strip() if r.returncode == 0 else None
    except Exception:
        return None


def _error(e):
    return f"{type(e).__name__}: {e}".splitlines()[0]


def opendnn_info():
    out = {}
    try:
        mod = importlib.import_module("opendnn")
        if getattr(mod, "_import_error", None):
            out["import opendnn"] = "FAILED: " + mod._import_error.strip().splitlines()[-1]
            out["traceback"] = "\n    " + "\n    ".join(mod._import_error.strip().splitlines())
            _flag("`import opendnn` fails; see above")
            return out
        out["version"] = getattr(mod, "__version__", "?")
        out["location"] = os.path.dirname(getattr(mod, "__file__", "") or "")
        try:
            info = mod.build_info()
            out.update({f"build.{k}": v for k, v in info.items()})
        except Exception as e:
            out["build"] = f"unavailable ({_error(e)})"
        try:
            out["engines"] = ", ".join(f"{n} ({i})" for i, n in mod.registered_engines()) or "none registered"
            t = mod.default_target()
            out["default target"] = f"{t.kind.name} device={t.device} sm={t.sm_version}"
        except Exception as e:
            out["engines"] = f"unavailable ({_error(e)})"
        out["imports torch"] = "yes (bug!)" if "torch" in sys.modules and not _torch_imported_before else "no"
    except Exception as e:
        out["import opendnn"] = f"FAILED: {_error(e)}"
        _flag("`import opendnn` fails; see above")
    return out


def python_info():
    return {
        "python": sys.version.split()[0] + f" ({sys.executable})",
        "implementation": platform.python_implementation(),
        "site-packages": sysconfig.get_paths().get("purelib", "?"),
    }


def os_info():
    out = {"os": platform.platform()}
    try:
        with open("/etc/os-release") as f:
            m = re.search(r'^PRETTY_NAME="?([^"\n]*)', f.read(), re.M)
            if m:
                out["distribution"] = m.group(1)
    except OSError:
        pass
    libc = platform.libc_ver()
    if libc[0]:
        out["libc"] = " ".join(libc)
    return out


def cpu_info():
    out = {"machine": platform.machine(), "logical cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            if m:
                out["cpu"] = m.group(1)
    except OSError:
        pass
    return out


def gpu_info():
    out = {}
    smi = shutil.which("nvidia-smi")
    if not smi:
        out["nvidia-smi"] = "not found (no NVIDIA driver on PATH)"
        return out
    q = _run([smi, "--query-gpu=index,name,driver_version,compute_cap,memory.total", "--format=csv,noheader"])
    if q is None:
        out["nvidia-smi"] = "failed to run"
        return out
    for line in q.splitlines():
        parts = [p.strip() for p in line.split(",")]
        out[f"gpu {parts[0]}"] = ", ".join(parts[1:])
    head = _run([smi]) or ""
    m = re.search(r"CUDA Version:\s*([\d.]+)", head)
    if m:
        out["driver CUDA version"] = m.group(1)
    return out


def _lib_version(path, symbol):
    try:
        lib = ctypes.CDLL(path)
        f = getattr(lib, symbol)
        f.restype = ctypes.c_size_t
        return int(f())
    except Exception:
        return None


def cuda_info():
    out = {}
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc:
        v = _run([nvcc, "--version"]) or ""
        m = re.search(r"release ([\d.]+)", v)
        out["nvcc"] = m.group(1) if m else "present"
    else:
        out["nvcc"] = "not found"
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            lib = ctypes.CDLL(name)
            v = ctypes.c_int()
            if lib.cudaRuntimeGetVersion(ctypes.byref(v)) == 0:
                out["CUDA runtime"] = f"{v.value // 1000}.{(v.value % 1000) // 10} ({name})"
                break
        except Exception:
            continue
    else:
        out["CUDA runtime"] = "libcudart not found by the loader"
    return out


def _cudnn_version_of(path):
    v = _lib_version(path, "cudnnGetVersion")
    if v is None:
        m = re.search(r"libcudnn\.so\.(\d+(?:\.\d+)*)", path)
        return m.group(1) + " (from file name)" if m else "?"
    return f"{v // 10000}.{(v // 100) % 100}.{v % 100}"


def cudnn_candidates():
    """Every libcudnn in opendnn's search order: OPENDNN_CUDNN_PATH, pip nvidia/cudnn/lib, loader."""
    found = []
    env = os.environ.get("OPENDNN_CUDNN_PATH")
    if env:
        paths = [env] if os.path.isfile(env) else sorted(glob.glob(os.path.join(env, "libcudnn.so*")))
        found += [("OPENDNN_CUDNN_PATH", p) for p in paths] or [("OPENDNN_CUDNN_PATH", f"{env} (no libcudnn there)")]
    for sp in dict.fromkeys(sys.path + [sysconfig.get_paths().get("purelib", "")]):
        if not sp:
            continue
        for p in sorted(glob.glob(os.path.join(sp, "nvidia", "cudnn", "lib", "libcudnn.so*"))):
            found.append(("pip nvidia-cudnn", p))
    ld = _run(["ldconfig", "-p"]) or _run(["/sbin/ldconfig", "-p"]) or ""
    for line in ld.splitlines():
        m = re.search(r"(libcudnn\.so[\d.]*)\s.*=>\s*(\S+)", line)
        if m:
            found.append(("system loader", m.group(2)))
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d:
            found += [("LD_LIBRARY_PATH", p) for p in sorted(glob.glob(os.path.join(d, "libcudnn.so*")))]
    seen, out = set(), []
    for src, p in found:
        if p not in seen:
            seen.add(p)
            out.append((src, p))
    return out


def loaded_libraries(pattern):
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if pattern in line and "/" in line})
    except OSError:
        return []


def cudnn_info():
    out = {}
    loaded = loaded_libraries("libcudnn")  # before probing versions below (which loads libraries)
    cands = cudnn_candidates()
    versions = {}
    if not cands:
        out["libcudnn"] = "none found"
    for i, (src, p) in enumerate(cands):
        v = _cudnn_version_of(p) if os.path.exists(p) and re.search(r"libcudnn\.so", p) else "-"
        versions[p] = v
        out[f"candidate {i}"] = f"{p} [{src}] version {v}"
    out["loaded by opendnn"] = ", ".join(loaded) or "none (the cudnn engine loads it on first use)"
    majors = {v.split(".")[0] for v in versions.values() if v and v[0].isdigit()}
    if len(majors) > 1:
        _flag(f"several cuDNN major versions are installed: {sorted(majors)}")
    return out, versions


_torch_imported_before = "torch" in sys.modules


def torch_info(cudnn_versions):
    out = {}
    try:
        torch = importlib.import_module("torch")
    except Exception as e:
        out["torch"] = f"not importable ({_error(e)})"
        return out
    out["torch"] = getattr(torch, "__version__", "?")
    try:
        out["torch CUDA"] = str(torch.version.cuda)
        out["torch CUDA available"] = str(torch.cuda.is_available())
        v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        out["torch cuDNN"] = "none" if v is None else f"{v // 10000}.{(v // 100) % 100}.{v % 100}"
        if v is not None:
            tv = f"{v // 10000}.{(v // 100) % 100}"
            others = {p: x for p, x in cudnn_versions.items() if x[:1].isdigit() and not x.startswith(tv)}
            if others:
                _flag(f"torch uses cuDNN {out['torch cuDNN']} but other versions are installed: "
                      + ", ".join(f"{x} ({p})" for p, x in others.items()))
        if torch.cuda.is_available():
            torch.backends.cudnn.version()
        loaded = [p for p in loaded_libraries("libcudnn") if "libcudnn.so" in p or "libcudnn_graph" in p]
        if loaded:
            out["cuDNN mapped after importing torch"] = ", ".join(loaded)
    except Exception as e:
        out["torch details"] = f"failed ({_error(e)})"
    return out


def report():
    sections = []

    def section(title, fn):
        try:
            sections.append((title, fn()))
        except Exception as e:  # a probe must never stop the report
            sections.append((title, {"error": _error(e)}))

    section("opendnn", opendnn_info)
    section("Python", python_info)
    section("OS", os_info)
    section("CPU", cpu_info)
    section("GPU", gpu_info)
    section("CUDA", cuda_info)
    try:
        cud, versions = cudnn_info()
    except Exception as e:
        cud, versions = {"error": _error(e)}, {}
    sections.append(("cuDNN (search order: OPENDNN_CUDNN_PATH, pip nvidia/cudnn/lib, system loader)", cud))
    section("torch", lambda: torch_info(versions))
    lines = []
    for title, items in sections:
        lines.append(f"== {title}")
        for k, v in items.items():
            lines.append(f"  {k}: {v}")
    lines.append("== flags")
    lines += [f"  ! {f}" for f in _FLAGS] or ["  none"]
    return "\n".join(lines)


def main():
    print(report())


if __name__ == "__main__":
    main()
