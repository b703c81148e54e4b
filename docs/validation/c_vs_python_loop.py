"""The Python timing loop against a C one, on the same cases in one process (issue 49 item 5).

    .venv/bin/python docs/validation/c_vs_python_loop.py [--rounds 30] [--block-ms 4] \
        [--case relu_d1_w8 --case relu_d10_w8 --case matmul_64x64] [--delay-ns 30]
        [--sanitize]

Compiles docs/validation/c_loop.c against the engine's fetched ORT headers and the wheel's
libonnxruntime.so, then per case and per round times one block per (loop, arm), in an
order that rotates by round. Three loops: `python` is harness/timing.py's time_block over
harness/sessions.py's bound call (run options None); `python+ro` is the same pybind call
given one RunOptions made once; `c` is RunWithBinding timed in C (clock_gettime) over a
session created through the C API with the same options. Per loop it prints the median
per-call time of each arm, the engine/ort ratio of block medians, and the spread of that
ratio over rounds (standard deviation of the log ratio and a MAD-based robust twin, the
95 % half-width of its mean, and the change a one-sided 5 % test with 80 % power would
catch from those rounds). With --delay-ns, a third arm adds that delay to the engine's
Run, and each loop prints how large that same change reads. Outputs are checked equal
between the loops. Quote ratios and
spreads: absolute times move with load.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

from epbench.cases.grids import case_by_name
from epbench.engine.build import CFLAGS, ORT_API_VERSION, SANITIZE_FLAGS, ort_include_dir
from epbench.harness.arms import parse_arm, resolve_library
from epbench.harness.overhead import noop_call_ns
from epbench.harness.sessions import bind, create_session, register_arm
from epbench.harness.timing import block_iterations, time_block

HERE = Path(__file__).resolve().parent
# numpy dtype -> ONNXTensorElementDataType (onnxruntime_c_api.h)
ELEM_TYPES = {np.dtype(np.float32): 1, np.dtype(np.int64): 7, np.dtype(np.float64): 11}
ERR_LEN = 512
LOOPS = ("python", "python+ro", "c")


def build_c_loop(out: Path, sanitize: bool = False) -> ctypes.CDLL:
    """Compile c_loop.c into out/libc_loop.so with the engine's warnings and headers."""
    lib = out / "libc_loop.so"
    flags = [f for f in CFLAGS if f != "-fvisibility=hidden"] + (SANITIZE_FLAGS if sanitize
                                                                  else [])
    cmd = ["gcc", *flags, f"-I{ort_include_dir()}", f"-DECL_ORT_API_VERSION={ORT_API_VERSION}",
           str(HERE / "c_loop.c"), "-shared", "-o", str(lib), "-ldl"]
    subprocess.run(cmd, check=True)
    c = ctypes.CDLL(str(lib))
    p, i64p, sz = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t
    c.ecl_init.argtypes = [ctypes.c_char_p, ctypes.c_char_p, sz]
    c.ecl_register.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, sz]
    c.ecl_create.argtypes = [p, sz, ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                             ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p),
                             sz, ctypes.c_int, ctypes.POINTER(p), ctypes.c_char_p, sz]
    c.ecl_bind.argtypes = [p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, i64p, sz, p, sz,
                           ctypes.c_char_p, sz]
    c.ecl_time_block.argtypes = [p, ctypes.c_int64, i64p, ctypes.c_char_p, sz]
    c.ecl_clock_pairs.argtypes = [ctypes.c_int64, i64p]
    c.ecl_destroy.argtypes = [p]
    return c


def ort_library() -> Path:
    """The wheel's own libonnxruntime.so (the pybind module carries a copy of its own)."""
    return next(Path(ort.__file__).parent.glob("capi/libonnxruntime.so*"))


def check(rc: int, err: ctypes.Array) -> None:
    if rc != 0:
        raise SystemExit(f"c_loop: {err.value.decode()}")


class CLoop:
    """One C-API session with its tensors bound once; ``block(n)`` times n calls."""

    def __init__(self, c: ctypes.CDLL, model: bytes, opt_all: bool, ep_name: str | None,
                 options: dict[str, str], inputs: dict[str, np.ndarray],
                 outputs: list[tuple[str, np.ndarray]]) -> None:
        self.c, self.err = c, ctypes.create_string_buffer(ERR_LEN)
        self.model = ctypes.create_string_buffer(model, len(model))
        keys = (ctypes.c_char_p * max(1, len(options)))(*[k.encode() for k in options])
        vals = (ctypes.c_char_p * max(1, len(options)))(*[v.encode() for v in options.values()])
        handle = ctypes.c_void_p()
        check(c.ecl_create(self.model, len(model), int(opt_all), 1,
                           ep_name.encode() if ep_name else None, keys, vals, len(options), 0,
                           ctypes.byref(handle), self.err, ERR_LEN), self.err)
        self.handle = handle
        self.keep = []  # arrays the bound tensors point into
        for is_out, items in ((0, list(inputs.items())), (1, outputs)):
            for name, array in items:
                array = np.ascontiguousarray(array)
                shape = (ctypes.c_int64 * max(1, array.ndim))(*array.shape)
                self.keep.append((array, shape))
                check(c.ecl_bind(handle, is_out, name.encode(), ELEM_TYPES[array.dtype], shape,
                                 array.ndim, array.ctypes.data, array.nbytes, self.err, ERR_LEN),
                      self.err)
        self.outputs = [a for a, _ in self.keep[len(inputs):]]

    def block(self, n: int) -> list[int]:
        samples = (ctypes.c_int64 * n)()
        check(self.c.ecl_time_block(self.handle, n, samples, self.err, ERR_LEN), self.err)
        return list(samples)


def spread(ratios: list[float]) -> dict[str, float]:
    """Median ratio; sd of the log ratio and its MAD-based robust twin (%); 95 %
    half-width of its mean (%); the change a one-sided 5 % test with 80 % power
    detects from these rounds (%)."""
    logs = [math.log(r) for r in ratios]
    sd = statistics.stdev(logs)
    se = sd / math.sqrt(len(logs))
    center = statistics.median(logs)
    # 1.4826 x MAD: the sd of a normal sample, unmoved by the load bursts of a busy host.
    mad = 1.4826 * statistics.median(abs(v - center) for v in logs)
    return {"ratio": statistics.median(ratios), "sd_pct": 100 * sd, "mad_sd_pct": 100 * mad,
            "half_width_pct": 100 * 1.96 * se, "mde_pct": 100 * (1.645 + 0.842) * se}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block-ms", type=float, default=4.0)
    parser.add_argument("--delay-ns", type=int, default=0,
                        help="also time the engine with inject_delay_ns_per_run=N (arm "
                             "`slow`) and print how each loop sees that change")
    parser.add_argument("--sanitize", action="store_true",
                        help="build the C loop with ASan+UBSan (run as engine/README.md says)")
    args = parser.parse_args()
    cases = args.case or ["relu_d1_w8", "relu_d10_w8", "matmul_64x64"]

    tmp = Path(tempfile.mkdtemp(prefix="c_loop_"))
    c = build_c_loop(tmp, args.sanitize)
    err = ctypes.create_string_buffer(ERR_LEN)
    check(c.ecl_init(str(ort_library()).encode(), err, ERR_LEN), err)
    engine = parse_arm("engine")
    library = resolve_library(engine)
    assert library is not None
    # The C side's ORT copy loads its own copy of the engine, so no state is shared.
    engine_copy = tmp / Path(library).name
    shutil.copyfile(library, engine_copy)
    arms = [(parse_arm("ort"), None)]
    plugins = [engine] + ([parse_arm(f"engine:inject_delay_ns_per_run={args.delay_ns},"
                                     "name=slow")] if args.delay_ns else [])
    for arm in plugins:
        assert arm.registration_name is not None
        arms.append((arm, register_arm(arm, library)))
        check(c.ecl_register(arm.registration_name.encode(), str(engine_copy).encode(),
                             err, ERR_LEN), err)

    floor_py = noop_call_ns(20000)
    pairs = (ctypes.c_int64 * 20000)()
    c.ecl_clock_pairs(20000, pairs)
    floor_c = statistics.median(pairs)
    print(f"floor per timed call (median): python loop no-op {floor_py:.0f} ns, "
          f"C loop empty {floor_c:.0f} ns")

    for name in cases:
        spec = case_by_name(name)
        built = spec.build()
        py, cl, sessions = {}, {}, {}
        for arm, reg in arms:
            session = create_session(arm, built.model_bytes, spec.opt_level, 1, reg, False)
            expected = session.run(None, built.inputs)
            py[arm.key] = bind(session, built.inputs, expected)
            sessions[arm.key] = session
            outs = [(m.name, np.zeros_like(v)) for m, v in zip(session.get_outputs(), expected,
                                                             strict=True)]
            cl[arm.key] = CLoop(c, built.model_bytes, spec.opt_level == "all",
                                reg.ep_name if reg else None, arm.ep_options if reg else {},
                                built.inputs, outs)
            cl[arm.key].block(1)
            py[arm.key].run()
            for got, want in zip(cl[arm.key].outputs, py[arm.key].outputs(), strict=True):
                if not np.array_equal(got, want):
                    raise SystemExit(f"{name} {arm.key}: the C loop's output differs")
        # Three loops per arm: the harness's timed call (run options None), the same
        # pybind call given one RunOptions made once, and the C loop.
        blocks: dict[tuple[str, str], Callable[[int], list[int]]] = {}
        run_options = ort.RunOptions()
        for key, bound in py.items():
            with_options = functools.partial(sessions[key]._sess.run_with_iobinding,
                                             bound.binding._iobinding, run_options)
            blocks[("python", key)] = functools.partial(time_block, bound.run)
            blocks[("python+ro", key)] = functools.partial(time_block, with_options)
            blocks[("c", key)] = cl[key].block
        # Warm-up, then one block length per (loop, arm) by the harness's rule, so every
        # block lasts about --block-ms.
        iters = {}
        for lk, block in blocks.items():
            block(200)
            iters[lk] = block_iterations(statistics.median(block(200)), args.block_ms, 100000)
        med: dict[tuple[str, str], list[float]] = {lk: [] for lk in blocks}
        for r in range(args.rounds):
            for loop in LOOPS[r % len(LOOPS):] + LOOPS[:r % len(LOOPS)]:  # rotate the order
                for key in py:
                    med[(loop, key)].append(statistics.median(blocks[(loop, key)](
                        iters[(loop, key)])))
        print(f"\n{name} ({args.rounds} rounds, calls per block "
              f"{ {f'{lp}/{k}': v for (lp, k), v in iters.items()} })")
        for loop in LOOPS:
            ratios = [e / o for e, o in zip(med[(loop, engine.key)], med[(loop, "ort")],
                                            strict=True)]
            s = spread(ratios)
            per_call = {k: statistics.median(med[(loop, k)]) for k in py}
            print(f"  {loop:9s} per call ort {per_call['ort']:5.0f} ns, "
                  f"{engine.key} {per_call[engine.key]:5.0f} ns; ratio {s['ratio']:.3f}, "
                  f"sd {s['sd_pct']:.2f} % (robust {s['mad_sd_pct']:.2f} %), "
                  f"95 % half-width {s['half_width_pct']:.2f} %, "
                  f"detectable {s['mde_pct']:.2f} %")
            if args.delay_ns:
                shift = spread([d / e for d, e in zip(med[(loop, "slow")],
                                                      med[(loop, engine.key)], strict=True)])
                print(f"  {'':9s} +{args.delay_ns} ns in the engine's Run reads as "
                      f"{100 * (shift['ratio'] - 1):+.2f} % "
                      f"(robust sd {shift['mad_sd_pct']:.2f} %, sd {shift['sd_pct']:.2f} %)")
        for loop_obj in cl.values():
            c.ecl_destroy(loop_obj.handle)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
