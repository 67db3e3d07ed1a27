# SPDX-License-Identifier: Apache-2.0
"""opendnn.pygraph: cuDNN Frontend's classic Python graph API over the opendnn C++ graph.

Every op of the catalogue (``_C.op_specs()``) becomes a method generically: positional arguments fill
the op's input ports in order; keywords are port names, their cuDNN Frontend aliases (``input``,
``image``, ``q``...), attribute names, ``name`` and ``compute_data_type``. Thin adapters below
translate the ops whose cuDNN Frontend keywords differ from the catalogue (sdpa, norms, slice...).
Pointwise ops get one method per mode (add, relu, cmp_lt...).
"""

from __future__ import annotations

import json
import numbers

from . import _C
from ._C import build_plan_policy, data_type, heur_mode, tensor_reordering
from ._dtypes import to_data_type
from .enums import diagonal_alignment, norm_forward_phase
from .enums import scalar_type as _scalar_type

_Tensor = _C.tensor
_SPECS = {s["method"]: s for s in _C.op_specs()}
_PW_MODES = _C.pointwise_modes()
_NOT_GIVEN = object()


def _row_major(dims):
    strides, s = [], 1
    for d in reversed(list(dims)):
        strides.append(s)
        s *= max(int(d), 1)
    return list(reversed(strides))


def _is_number(v):
    return isinstance(v, numbers.Number) and not isinstance(v, bool)


def _enum_name(v):
    return v if isinstance(v, str) else getattr(v, "name", v)


def _ports_of(spec):
    """kwarg -> port name, for every port name and its cuDNN Frontend alias."""
    alias = {}
    for port, _req, py in spec["inputs"]:
        alias[port] = port
        if py:
            alias[py] = port
    return alias


# cuDNN Frontend keyword -> output port, for the optional outputs an SDPA forward binds to the caller's tensor.
_FWD_BINDS = {"rng_dump": "RNG_dump", "score_max": "Max", "score_sum_exp": "Sum_exp"}


class pygraph(_C._Graph):
    """A graph of tensors and operations (cuDNN Frontend's ``cudnn.pygraph``)."""

    def __init__(self, name: str = "test_graph", io_data_type=data_type.NOT_SET, intermediate_data_type=data_type.NOT_SET,
                 compute_data_type=data_type.NOT_SET, handle=None, sm_count: int = -1, sm_version: int = -1,
                 kernel_cache=None, device_property=None, is_dynamic_shape_enabled: bool = False,
                 is_override_shape_enabled: bool = False):
        super().__init__()
        if name:
            self.set_name(name)
        self.set_io_data_type(io_data_type)
        self.set_intermediate_data_type(intermediate_data_type)
        self.set_compute_data_type(compute_data_type)
        if sm_count is not None and sm_count >= 0:
            self.set_sm_count(int(sm_count))
        if sm_version is not None and sm_version >= 0:
            self.set_sm_version(int(sm_version))
        if handle is not None:
            self._set_handle(handle)
        self.kernel_cache = kernel_cache
        self.device_property = device_property
        if kernel_cache is not None:
            if not isinstance(kernel_cache, _C.kernel_cache):
                raise TypeError("kernel_cache must come from opendnn.create_kernel_cache()")
            self._set_kernel_cache(kernel_cache)
        if device_property is not None:
            target = getattr(device_property, "_target", None)
            if target is None:
                raise TypeError("device_property must come from opendnn.create_device_properties()")
            self._set_target(target())
        self.is_dynamic_shape_enabled = is_dynamic_shape_enabled
        self.is_override_shape_enabled = is_override_shape_enabled

    # ---- tensors ------------------------------------------------------------------------------

    def tensor(self, dim=None, stride=None, data_type=data_type.NOT_SET, is_virtual: bool = False,
               is_pass_by_value: bool = False, ragged_offset=None, reordering_type=tensor_reordering.NONE,
               name: str = "", uid=None):
        """A graph tensor. Strides default to packed row-major; data_type accepts opendnn, numpy and
        torch dtypes. dim and stride must hold ints; uid None or -1 means "assign one"."""
        dim = _int_list(dim or [], "dim")
        stride = _int_list(stride, "stride") if stride is not None else _row_major(dim)
        if uid is not None:
            uid = _int_list([uid], "uid")[0]
            uid = None if uid == -1 else uid
        return self._tensor(dim, stride, to_data_type(data_type), bool(is_virtual), bool(is_pass_by_value),
                            ragged_offset, reordering_type, name or "", uid)

    def tensor_scalar(self, value, scalar_type=None, name: str = "", data_type=None):
        """A pass-by-value constant held by the graph (epsilon, a scale...).

        scalar_type is cuDNN Frontend's ``scalar_type`` (COMPILE_TIME_CONST or RUNTIME_PARAM: the graph
        holds the value either way). The data type follows the value as in cuDNN Frontend (a float is
        FLOAT; an int is INT32, or INT64 beyond int32's range; a bool is BOOLEAN) unless data_type is
        given (a data type passed in scalar_type's place is taken as data_type). The value must be
        representable in it: NaN and infinities are allowed for floating types."""
        if scalar_type is not None and not isinstance(scalar_type, _scalar_type):
            if data_type is not None:
                raise TypeError("tensor_scalar: scalar_type must be an opendnn.scalar_type")
            data_type, scalar_type = scalar_type, None
        if isinstance(value, bool):
            dt, ival, fval = _C.data_type.BOOLEAN, int(value), float(value)
        elif isinstance(value, numbers.Integral):
            ival = int(value)
            dt = _C.data_type.INT32 if -2**31 <= ival < 2**31 else _C.data_type.INT64
            fval = float(ival)
        elif isinstance(value, numbers.Real):
            dt, fval, ival = _C.data_type.FLOAT, float(value), 0
        else:
            raise TypeError(f"tensor_scalar needs a number, got {type(value).__name__}")
        if data_type is not None:
            dt = to_data_type(data_type)
        fval, ival = _scalar_in_range(value, fval, ival, dt)
        t = self._tensor_scalar(fval, ival, dt)
        if name:
            t.set_name(name)
        return t

    def tensor_like(self, input=None, name: str = "", **kw):
        """A graph tensor with the dims, strides and data type of a graph tensor, numpy array, torch
        tensor or any DLPack / array-interface object (``tensor=`` is accepted for ``input``).

        A one-element array in host memory (numpy, a CPU torch tensor, a kDLCPU DLPack object) gives a
        pass-by-value tensor, as in cuDNN Frontend: execute() reads its value from the host array bound
        to it, or from the value it had here when the pack binds none. Larger host arrays give ordinary
        tensors (the CPU engine reads host memory)."""
        if "tensor" in kw:
            if input is not None:
                raise TypeError("tensor_like() got both input and tensor")
            input = kw.pop("tensor")
        if kw:
            raise TypeError(f"tensor_like() got an unexpected keyword argument '{next(iter(kw))}'")
        if isinstance(input, _Tensor):
            return self._tensor_like(input, name or "")
        dims, strides, dt, host = _describe_array(input)
        volume = 1
        for d in dims:
            volume *= d
        by_value = host and volume == 1
        t = self.tensor(dim=dims, stride=strides, data_type=dt, name=name, is_pass_by_value=by_value)
        if by_value:
            v = _host_value(input)
            if isinstance(v, (bool, int)) or hasattr(v, "__index__"):
                self._set_host_default(t, float(int(v)), int(v))
            else:
                self._set_host_default(t, float(v), 0)
        return t

    def _as_tensor(self, v, what):
        """A graph tensor for an op argument; a Python number becomes a scalar constant (its dims widen
        to the rank of the op's other inputs at validation)."""
        if v is None or isinstance(v, _Tensor):
            return v
        if _is_number(v):
            return self.tensor_scalar(v)
        raise TypeError(f"{what} must be a graph tensor (use graph.tensor_like(array)), got {type(v).__name__}")

    # ---- the generic op layer ---------------------------------------------------------------

    def _op(self, method, *args, name="", compute_data_type=None, **kwargs):
        spec = _SPECS[method]
        alias = _ports_of(spec)
        attr_names = {a[0] for a in spec["attrs"]}
        ports = [p[0] for p in spec["inputs"]]
        if len(args) > len(ports) and spec["positional"] >= 0:
            raise TypeError(f"{method}() takes at most {len(ports)} tensor arguments ({len(args)} given)")
        given = set(ports[: len(args)])
        positional = [self._as_tensor(a, f"{method}() argument {i}") for i, a in enumerate(args)]
        inputs, attrs = {}, {}
        for k, v in kwargs.items():
            if k in alias:
                port = alias[k]
                if port in given or port in inputs:
                    raise TypeError(f"{method}() got multiple values for input {port}")
                inputs[port] = self._as_tensor(v, f"{method}() argument {k}")
            elif k in attr_names:
                attrs[k] = v
            else:
                raise TypeError(f"{method}() got an unexpected keyword argument '{k}'")
        if compute_data_type is not None:
            compute_data_type = to_data_type(compute_data_type)
            if compute_data_type == data_type.NOT_SET:
                compute_data_type = None
        outs = self._add_node(spec["kind"], positional, inputs, attrs, name or "", compute_data_type)
        return outs[0] if spec["num_outputs"] == 1 else list(outs)

    def _pointwise(self, mode, inputs, attrs, name, compute_data_type):
        positional = [self._as_tensor(inputs[0], "input")]
        rest = {}
        for i, t in enumerate(inputs[1:], start=1):
            rest[f"IN_{i}"] = self._as_tensor(t, f"input {i}")
        attrs = {k: v for k, v in attrs.items() if v is not None}
        attrs["mode"] = mode
        if compute_data_type is not None:
            compute_data_type = to_data_type(compute_data_type)
            if compute_data_type == data_type.NOT_SET:
                compute_data_type = None
        return self._add_node(_SPECS["pointwise"]["kind"], positional, rest, attrs, name or "", compute_data_type)[0]

    # ---- adapters: cuDNN Frontend keyword names -------------------------------------------------

    def bias(self, input, bias, compute_data_type=None, name=""):
        return self._pointwise("ADD", [input, bias], {}, name, compute_data_type)

    def scale(self, input, scale, compute_data_type=None, name=""):
        return self._pointwise("MUL", [input, scale], {}, name, compute_data_type)

    def leaky_relu(self, input, negative_slope, compute_data_type=None, name=""):
        return self._pointwise("RELU_FWD", [input], {"relu_lower_clip_slope": negative_slope}, name,
                               compute_data_type)

    # cuDNN Frontend has two overloads: (x, w, padding, stride, dilation, ...) and one taking
    # pre_padding/post_padding; positionally the first, the paddings by keyword.
    def conv_fprop(self, image, weight, padding=None, stride=None, dilation=None, convolution_mode=None,
                   compute_data_type=None, name="", *, pre_padding=None, post_padding=None):
        return self._conv("conv_fprop", image, weight, padding, pre_padding, post_padding, stride, dilation,
                          convolution_mode, compute_data_type, name)

    def conv_dgrad(self, loss, filter, padding=None, stride=None, dilation=None, convolution_mode=None,
                   compute_data_type=None, name="", *, pre_padding=None, post_padding=None):
        return self._conv("conv_dgrad", loss, filter, padding, pre_padding, post_padding, stride, dilation,
                          convolution_mode, compute_data_type, name)

    def conv_wgrad(self, image, loss, padding=None, stride=None, dilation=None, convolution_mode=None,
                   compute_data_type=None, name="", *, pre_padding=None, post_padding=None):
        return self._conv("conv_wgrad", image, loss, padding, pre_padding, post_padding, stride, dilation,
                          convolution_mode, compute_data_type, name)

    def _conv(self, method, a, b, padding, pre, post, stride, dilation, mode, compute_data_type, name):
        if padding is not None and len(padding) > 0:
            if pre is not None or post is not None:
                raise ValueError(f"{method}: give padding or pre_padding/post_padding, not both")
            pre = post = padding
        attrs = {"pre_padding": pre, "post_padding": post, "stride": stride, "dilation": dilation,
                 "convolution_mode": mode}
        attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items() if v is not None}
        return self._op(method, a, b, name=name, compute_data_type=compute_data_type, **attrs)

    def matmul(self, A, B, compute_data_type=None, padding=None, name="", M_override=None, N_override=None,
               K_override=None):
        kw = {"M_override": M_override, "N_override": N_override, "K_override": K_override}
        kw = {k: v for k, v in kw.items() if v is not None}
        if padding is not None:
            kw["padding"] = float(padding)
        return self._op("matmul", A, B, name=name, compute_data_type=compute_data_type, **kw)

    def reduction(self, input, mode, compute_data_type=None, name="", is_deterministic=None, dims=None):
        kw = {"mode": mode}
        if is_deterministic is not None:
            kw["is_deterministic"] = bool(is_deterministic)
        if dims is not None:
            kw["dims"] = list(dims)
        return self._op("reduction", input, name=name, compute_data_type=compute_data_type, **kw)

    def reshape(self, input, name="", reshape_mode=None, *, compute_data_type=None, dims=None):
        kw = {}
        if reshape_mode is not None:
            kw["reshape_mode"] = reshape_mode
        if dims is not None:
            kw["dims"] = list(dims)
        return self._op("reshape", input, name=name, compute_data_type=compute_data_type, **kw)

    def transpose(self, input, permutation, compute_data_type=None, name=""):
        return self._op("transpose", input, name=name, compute_data_type=compute_data_type,
                        permutation=list(permutation))

    def slice(self, input, slices=(), compute_data_type=None, name=""):
        """slices: one python ``slice`` (or (start, end) pair) per leading axis; the others are kept."""
        dims = list(input.get_dim())
        start, end, step = [], [], []
        for axis, s in enumerate(slices):
            if not isinstance(s, slice):
                s = slice(*s)
            d = dims[axis] if axis < len(dims) else None
            if d is None:
                b = 0 if s.start is None else s.start
                e = s.stop
                if e is None:
                    raise ValueError("slice: input dims must be set to slice to the end of an axis")
                st = 1 if s.step is None else s.step
            else:
                b, e, st = s.indices(d)
            start.append(int(b))
            end.append(int(e))
            step.append(int(st))
        for axis in range(len(slices), len(dims)):
            start.append(0)
            end.append(dims[axis])
            step.append(1)
        return self._op("slice", input, name=name, compute_data_type=compute_data_type, start=start, end=end,
                        stride=step)

    def concatenate(self, inputs, axis, in_place_index=None, name="", *, compute_data_type=None):
        kw = {"axis": int(axis)}
        if in_place_index is not None:
            kw["in_place_index"] = int(in_place_index)
        ts = [self._as_tensor(t, "concatenate input") for t in inputs]
        return self._op("concatenate", *ts, name=name, compute_data_type=compute_data_type, **kw)

    def gen_index(self, input, axis, compute_data_type=None, name=""):
        return self._pointwise("GEN_INDEX", [input], {"axis": int(axis)}, name, compute_data_type)

    def leaky_relu_backward(self, loss, input, negative_slope, compute_data_type=None, name=""):
        """RELU_BWD with the lower clip slope: dx = dy where x > 0, negative_slope * dy elsewhere."""
        return self._pointwise("RELU_BWD", [loss, input], {"relu_lower_clip_slope": negative_slope}, name,
                               compute_data_type)

    def genstats(self, input, compute_data_type=None, name=""):
        """Per-channel sum and sum of squares; returns [sum, sq_sum]."""
        return self._op("genstats", input, name=name, compute_data_type=compute_data_type)

    def block_scale_quantize(self, input, block_size, axis=None, transpose=False, compute_data_type=None,
                             name=""):
        """Returns [Y, scale]."""
        kw = {"block_size": int(block_size), "transpose": bool(transpose)}
        if axis is not None:
            kw["axis"] = int(axis)
        return self._op("block_scale_quantize", input, name=name, compute_data_type=compute_data_type, **kw)

    def block_scale_dequantize(self, input, descale, block_size, is_negative_scale=False, compute_data_type=None,
                               name="", *, axis=None):
        """block_size: one int per trailing dim of input, all 1 but the blocked one ([1, 32] blocks the
        last dim, [32, 1] the one before); a plain int blocks ``axis`` (default the last)."""
        kw = {"is_negative_scale": bool(is_negative_scale)}
        if isinstance(block_size, numbers.Integral):
            kw["block_size"] = int(block_size)
        else:
            sizes = [int(b) for b in block_size]
            blocked = [i for i, b in enumerate(sizes) if b != 1]
            if not sizes or len(blocked) > 1 or any(b < 1 for b in sizes):
                raise ValueError(f"block_scale_dequantize: block_size {sizes} must hold one size per trailing dim "
                                 "of input, all 1 but at most one (blocks along one axis)")
            i = blocked[0] if blocked else len(sizes) - 1
            kw["block_size"] = sizes[i]
            if axis is None:
                axis = i - len(sizes)
        if axis is not None:
            kw["axis"] = int(axis)
        return self._op("block_scale_dequantize", input, descale, name=name, compute_data_type=compute_data_type,
                        **kw)

    def moe_grouped_matmul(self, token, weight, first_token_offset, token_index=None, token_ks=None, mode=None,
                           compute_data_type=data_type.FLOAT, top_k=0, name=""):
        """Grouped matmul of routed token rows with per-expert weights (top_k 0 means unset)."""
        kw = {}
        if mode is not None:
            kw["mode"] = mode
        if top_k:
            kw["top_k"] = int(top_k)
        opt = {k: v for k, v in (("token_index", token_index), ("token_ks", token_ks)) if v is not None}
        return self._op("moe_grouped_matmul", token, weight, first_token_offset, name=name,
                        compute_data_type=compute_data_type, **opt, **kw)

    def moe_grouped_matmul_bwd(self, doutput, token, first_token_offset, compute_data_type=data_type.FLOAT, name="",
                               *, weight=None, token_index=None, token_ks=None, mode=None, top_k=0):
        """The weight gradient of moe_grouped_matmul: returns dweight [E, K, N]. Given ``weight`` too,
        returns [dtoken, dweight]."""
        kw = {k: v for k, v in (("weight", weight), ("token_index", token_index), ("token_ks", token_ks),
                                ("mode", mode)) if v is not None}
        if top_k:
            kw["top_k"] = int(top_k)
        outs = self._op("moe_grouped_matmul_bwd", doutput, token, first_token_offset=first_token_offset, name=name,
                        compute_data_type=compute_data_type, **kw)
        return outs if weight is not None else outs[1]

    # ---- norms ------------------------------------------------------------------------------

    def _norm(self, method, phase, kwargs, stats_in_inference):
        if phase is not None:
            kwargs["forward_phase"] = phase
        if "epsilon" in kwargs and _is_number(kwargs["epsilon"]):
            kwargs["epsilon"] = self.tensor_scalar(float(kwargs["epsilon"]), _C.data_type.FLOAT)
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        outs = self._op(method, **kwargs)
        if _enum_name(phase) == "INFERENCE":
            outs = outs[:1] + [None] * stats_in_inference
        return outs

    def layernorm(self, norm_forward_phase, input, scale, bias, epsilon, compute_data_type=None, name=""):
        return self._norm("layernorm", norm_forward_phase, dict(input=input, scale=scale, bias=bias, epsilon=epsilon,
                                                                compute_data_type=compute_data_type, name=name), 2)

    def instancenorm(self, norm_forward_phase, input, scale, bias, epsilon, compute_data_type=None, name=""):
        return self._norm("instancenorm", norm_forward_phase, dict(input=input, scale=scale, bias=bias,
                                                                   epsilon=epsilon, compute_data_type=compute_data_type,
                                                                   name=name), 2)

    def adalayernorm(self, norm_forward_phase, input, scale, bias=None, epsilon=None, compute_data_type=None,
                     name=""):
        return self._norm("adalayernorm", norm_forward_phase, dict(input=input, scale=scale, bias=bias,
                                                                   epsilon=epsilon, compute_data_type=compute_data_type,
                                                                   name=name), 2)

    def rmsnorm(self, norm_forward_phase, input, scale, bias=None, epsilon=None, compute_data_type=None, name=""):
        return self._norm("rmsnorm", norm_forward_phase, dict(input=input, scale=scale, bias=bias, epsilon=epsilon,
                                                              compute_data_type=compute_data_type, name=name), 1)

    def batchnorm_inference(self, input, mean, inv_variance, scale, bias, compute_data_type=None, name=""):
        return self._op("batchnorm_inference", input, mean, inv_variance, scale, bias, name=name,
                        compute_data_type=compute_data_type)

    def _norm_backward(self, method, grad, input, scale, mean, inv_variance, compute_data_type, name, epsilon):
        kw = {k: v for k, v in (("mean", mean), ("inv_variance", inv_variance)) if v is not None}
        if epsilon is not None:
            kw["epsilon"] = self.tensor_scalar(float(epsilon), _C.data_type.FLOAT) if _is_number(epsilon) else epsilon
        return self._op(method, grad, input, scale, name=name, compute_data_type=compute_data_type, **kw)

    def layernorm_backward(self, grad, input, scale, mean, inv_variance, compute_data_type=None, name="", *,
                           epsilon=None):
        """Returns [dx, dscale, dbias]."""
        return self._norm_backward("layernorm_backward", grad, input, scale, mean, inv_variance, compute_data_type,
                                   name, epsilon)

    def adalayernorm_backward(self, grad, input, scale, mean, inv_variance, compute_data_type=None, name="", *,
                              epsilon=None):
        """Returns [dx, dscale, dbias]."""
        return self._norm_backward("adalayernorm_backward", grad, input, scale, mean, inv_variance,
                                   compute_data_type, name, epsilon)

    def instancenorm_backward(self, grad, input, scale, mean=None, inv_variance=None, compute_data_type=None, name="",
                              *, epsilon=None):
        """Returns [dx, dscale, dbias]."""
        return self._norm_backward("instancenorm_backward", grad, input, scale, mean, inv_variance,
                                   compute_data_type, name, epsilon)

    def rmsnorm_backward(self, grad, input, scale, inv_variance, has_dbias=False, compute_data_type=None, name=""):
        outs = self._op("rmsnorm_backward", grad, input, scale, inv_variance, has_dbias=bool(has_dbias),
                        compute_data_type=compute_data_type, name=name)
        return outs if has_dbias else outs[:2] + [None]

    def batchnorm(self, input, scale, bias, in_running_mean=None, in_running_var=None, epsilon=None,
                  momentum=None, peer_stats=None, compute_data_type=None, name=""):
        if peer_stats:
            raise NotImplementedError("batchnorm: peer_stats (multi-GPU statistics) are not supported")
        kw = dict(in_running_mean=in_running_mean, in_running_var=in_running_var, epsilon=epsilon, momentum=momentum)
        for k in ("epsilon", "momentum"):
            if _is_number(kw[k]):
                kw[k] = self.tensor_scalar(float(kw[k]), _C.data_type.FLOAT)
        kw = {k: v for k, v in kw.items() if v is not None}
        return self._op("batchnorm", input, scale, bias, name=name, compute_data_type=compute_data_type, **kw)

    def batchnorm_backward(self, grad, input, scale, mean, inv_variance, peer_stats=None, compute_data_type=None,
                           name=""):
        if peer_stats:
            raise NotImplementedError("batchnorm_backward: peer_stats are not supported")
        return self._op("batchnorm_backward", grad, input, scale, mean, inv_variance, name=name,
                        compute_data_type=compute_data_type)

    # ---- attention --------------------------------------------------------------------------

    def _sdpa_common(self, method, kw, inputs, attrs, outputs_to_bind):
        """Translates cuDNN Frontend's SDPA options (masks, scale, dropout, padding) into attributes."""

        def take(key, default=None):
            return kw.pop(key, default)

        attn_scale = take("attn_scale")
        if attn_scale is not None:
            if _is_number(attn_scale):
                attrs["attn_scale_value"] = float(attn_scale)
            else:
                inputs["attn_scale"] = attn_scale
        if take("attn_scale_value") is not None:
            raise ValueError(f"{method}: pass attn_scale (a float or a tensor)")
        align = take("diagonal_alignment")
        left = take("diagonal_band_left_bound", take("left_bound"))
        right = take("diagonal_band_right_bound", take("right_bound"))
        causal, causal_br = take("use_causal_mask", False), take("use_causal_mask_bottom_right", False)
        if causal and causal_br:
            raise RuntimeError("use_causal_mask and use_causal_mask_bottom_right cannot both be true")
        if (causal or causal_br) and right is not None:
            raise RuntimeError(f"{'use_causal_mask' if causal else 'use_causal_mask_bottom_right'} and "
                               "diagonal_band_right_bound cannot be set at the same time")
        if causal:
            right, align = 0, diagonal_alignment.TOP_LEFT
        if causal_br:
            right, align = 0, diagonal_alignment.BOTTOM_RIGHT
        window = take("sliding_window_length", take("sliding_window"))
        if window is not None:
            if left is not None:
                raise RuntimeError("sliding window and left_bound cannot be set at the same time")
            left = int(window)
        if align is not None:
            attrs["diagonal_alignment"] = align
        if left is not None:
            attrs["left_bound"] = int(left)
        if right is not None:
            attrs["right_bound"] = int(right)
        for k in ("use_padding_mask", "use_alibi_mask"):
            v = take(k)
            if v is not None:
                attrs[k] = bool(v)
        if take("implementation") is not None:
            pass
        for k in ("bias", "seq_len_q", "seq_len_kv", "cu_seq_len_q", "cu_seq_len_kv", "sink_token", "block_mask"):
            v = take(k)
            if v is not None:
                inputs[k] = v
        dropout = take("dropout")
        if dropout is not None:
            dropout = tuple(dropout)
            if len(dropout) == 3 and _is_number(dropout[0]):
                p, seed, offset = dropout
                attrs["dropout_probability"] = float(p)
                inputs["seed"] = seed if not _is_number(seed) else self.tensor_scalar(int(seed), _C.data_type.INT64)
                inputs["offset"] = offset if not _is_number(offset) else self.tensor_scalar(int(offset),
                                                                                            _C.data_type.INT64)
            elif len(dropout) in (2, 3):
                inputs["dropout_mask"] = dropout[0]
                inputs["dropout_scale"] = dropout[1]
                if len(dropout) == 3:
                    inputs["dropout_scale_inv"] = dropout[2]
            else:
                raise ValueError(f"{method}: dropout is (probability, seed, offset) or (mask, scale[, scale_inv])")
        for fe, port in outputs_to_bind.items():
            v = take(fe)
            if v is not None:
                self._pending_binds.append((port, v))

    def _attach_score_mods(self, method, mods):
        """Builds each score modifier callback ``fn(graph, scores) -> tensor`` into a pointwise sub-graph of
        the node just added (cuDNN Frontend's score_mod / score_mod_bprop)."""
        owner = self._node_count() - 1
        for name, fn in mods:
            if fn is None:
                continue
            if not callable(fn):
                raise TypeError(f"{method}: {name} must be callable as fn(graph, tensor) -> tensor")
            first = self._node_count()
            scores = self.tensor(dim=[], is_virtual=True, name=f"{method}::{name}::input")
            out = fn(self, scores)
            if not isinstance(out, _Tensor):
                raise TypeError(f"{method}: {name} must return a graph tensor, got {type(out).__name__}")
            self._attach_subgraph(owner, name, scores, out, first)

    def _call_sdpa(self, method, positional, kw, outputs_to_bind, extra_attrs=()):
        inputs, attrs = {}, {}
        mods = [(k, kw.pop(k, None)) for k in ("score_mod", "score_mod_bprop")]
        self._pending_binds = []
        impl = kw.get("implementation")
        self._sdpa_common(method, kw, inputs, attrs, outputs_to_bind)
        if impl is not None:
            attrs["implementation"] = impl
        for k in extra_attrs:
            v = kw.pop(k, None)
            if v is not None:
                attrs[k] = v
        name = kw.pop("name", "") or ""
        compute = kw.pop("compute_data_type", None)
        for k, v in list(kw.items()):  # remaining: ports by name (descales, page tables...)
            if v is None:
                kw.pop(k)
        outs = self._op(method, *positional, name=name, compute_data_type=compute, **inputs, **attrs, **kw)
        spec = _SPECS[method]
        out_names = [o[0] for o in spec["outputs"]]
        for port, user in self._pending_binds:
            created = outs[out_names.index(port)]
            self._bind_output(created, user)
            outs[out_names.index(port)] = user
        self._pending_binds = []
        self._attach_score_mods(method, mods)
        return outs

    @staticmethod
    def _stats_flag(kw):
        """cuDNN Frontend's rule: exactly one of generate_stats and is_inference (its negation)."""
        gen = kw.pop("generate_stats", None)
        inf = kw.pop("is_inference", None)
        if (gen is None) == (inf is None):
            raise RuntimeError("Exactly one of {generate_stats, is_inference} must be set (prefer generate_stats).")
        if gen is not None and not isinstance(gen, bool):
            raise RuntimeError("generate_stats must be a bool.")
        if inf is not None and not isinstance(inf, bool):
            raise RuntimeError("is_inference must be a bool.")
        return gen if gen is not None else not inf

    def sdpa(self, q, k, v, **kw):
        """Scaled dot-product attention; returns [O, Stats] (Stats is None unless generate_stats)."""
        gen = self._stats_flag(kw)
        if "paged_attention_max_seq_len_kv" in kw:
            kw["max_seq_len_kv"] = kw.pop("paged_attention_max_seq_len_kv")
        kw["generate_stats"] = gen
        outs = self._call_sdpa("sdpa", [q, k, v], kw, _FWD_BINDS, extra_attrs=("unfuse_fma",))
        return [outs[0], outs[1] if gen else None]

    def sdpa_backward(self, q, k, v, o, dO, stats, **kw):
        """SDPA backward; returns [dQ, dK, dV]."""
        outs = self._call_sdpa("sdpa_backward", [q, k, v, o, dO, stats], kw,
                               {"dBias": "dBias", "dSink_token": "dSink_token", "rng_dump": "RNG_dump"})
        return outs[:3]

    def sdpa_fp8(self, q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, **kw):
        """FP8 SDPA; returns [O, Stats, Amax_S, Amax_O]."""
        gen = self._stats_flag(kw)
        kw["generate_stats"] = gen
        if "paged_attention_max_seq_len_kv" in kw:
            kw["max_seq_len_kv"] = kw.pop("paged_attention_max_seq_len_kv")
        if "fn" in kw:
            kw["score_mod"] = kw.pop("fn")
        outs = self._call_sdpa("sdpa_fp8", [q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o],
                               kw, _FWD_BINDS, extra_attrs=("unfuse_fma",))
        return [outs[0], outs[1] if gen else None, outs[2], outs[3]]

    def sdpa_fp8_backward(self, q, k, v, o, dO, stats, descale_q, descale_k, descale_v, descale_o, descale_dO,
                          descale_s, descale_dP, scale_s, scale_dQ, scale_dK, scale_dV, scale_dP, **kw):
        """FP8 SDPA backward; returns [dQ, dK, dV, Amax_dQ, Amax_dK, Amax_dV, Amax_dP]."""
        outs = self._call_sdpa("sdpa_fp8_backward",
                               [q, k, v, o, dO, stats, descale_q, descale_k, descale_v, descale_o, descale_dO,
                                descale_s, descale_dP, scale_s, scale_dQ, scale_dK, scale_dV, scale_dP], kw,
                               {"dSink_token": "dSink_token"})
        return outs[:7]

    def sdpa_mxfp8(self, q, k, v, descale_q, descale_k, descale_v, **kw):
        """MXFP8 SDPA (E8M0 block-scaled FP8 Q/K/V); returns [O, Stats, Amax_O]."""
        gen = kw.pop("generate_stats", None)
        if gen is None:
            raise RuntimeError("generate_stats must be provided.")
        if not isinstance(gen, bool):
            raise RuntimeError("generate_stats must be a bool.")
        kw["generate_stats"] = gen
        outs = self._call_sdpa("sdpa_mxfp8", [q, k, v, descale_q, descale_k, descale_v], kw, {},
                               extra_attrs=("unfuse_fma",))
        return [outs[0], outs[1] if gen else None, outs[2]]

    def sdpa_mxfp8_backward(self, q, q_T, k, k_T, v, o_f16, dO_f16, dO, dO_T, stats, descale_q, descale_q_T,
                            descale_k, descale_k_T, descale_v, descale_dO, descale_dO_T, **kw):
        """MXFP8 SDPA backward; returns [dQ, dK, dV, Amax_dQ, Amax_dK, Amax_dV]."""
        outs = self._call_sdpa("sdpa_mxfp8_backward",
                               [q, q_T, k, k_T, v, o_f16, dO_f16, dO, dO_T, stats, descale_q, descale_q_T, descale_k,
                                descale_k_T, descale_v, descale_dO, descale_dO_T], kw, {"dSink_token": "dSink_token"})
        return outs[:6]

    # Deprecated cuDNN Frontend names.
    def scaled_dot_product_flash_attention(self, q, k, v, **kw):
        return self.sdpa(q, k, v, **kw)

    def scaled_dot_product_flash_attention_backward(self, q, k, v, o, dO, stats, **kw):
        return self.sdpa_backward(q, k, v, o, dO, stats, **kw)

    # ---- lifecycle ----------------------------------------------------------------------------

    def validate(self):
        self._validate()

    def build_operation_graph(self, handle=None):
        if handle is not None:
            self._set_handle(handle)
        self._build_operation_graph()

    def create_execution_plans(self, heur_modes=None):
        if heur_modes is None:
            heur_modes = [heur_mode.A, heur_mode.FALLBACK]
        self._create_execution_plans(heur_modes)

    def check_support(self, handle=None):
        if handle is not None:
            self._set_handle(handle)
        self._check_support()

    def build_plans(self, *args, policy=None, handle=None):
        """build_plans(policy=HEURISTICS_CHOICE); an optional leading handle is accepted."""
        for a in args:
            if isinstance(a, build_plan_policy):
                policy = a
            elif a is not None:
                handle = a
        if handle is not None:
            self._set_handle(handle)
        self._build_plans(policy if policy is not None else build_plan_policy.HEURISTICS_CHOICE)

    def build(self, heur_modes=None, policy=build_plan_policy.HEURISTICS_CHOICE):
        """build(heur_modes): validate ... build_plans in one call. build() with no modes, as in cuDNN
        Frontend, only validates and builds the operation graph (no plans)."""
        if heur_modes is None:
            self.validate()
            self.build_operation_graph()
            return
        self._build(heur_modes, policy)

    def serialize(self, serialize_structure: bool = False):
        """The graph and, once built, its selected plan, as a list of byte values (cuDNN Frontend's
        type; ``bytes(graph.serialize())`` is JSON text). ``deserialize`` gives back a graph that
        executes without planning again. ``serialize_structure=True`` returns the structure-only
        Graph JSON text instead."""
        if serialize_structure:
            return self._serialize(True)
        text = self._serialize_plan() if self._has_built_plan() else self._serialize(False)
        return list(text.encode())

    def to_json(self) -> str:
        """The graph as Graph JSON v2 text (names and pass-by-value values included, no plan)."""
        return self._serialize(False)

    def deserialize(self, *args, **kwargs):
        """deserialize(pyobj) or deserialize(handle_, pyobj): ``pyobj`` is what serialize() returned (a
        list of ints or bytes; the graph with its built plan), or JSON text (a graph, or a graph and plan)."""
        if kwargs:
            unknown = set(kwargs) - {"handle_", "pyobj"}
            if unknown:
                raise TypeError(f"deserialize() got an unexpected keyword argument '{sorted(unknown)[0]}'")
            args = (kwargs.get("handle_"), kwargs["pyobj"]) if "pyobj" in kwargs else args + (kwargs.get("handle_"),)
        if not args or len(args) > 2:
            raise TypeError("deserialize(pyobj) or deserialize(handle_, pyobj)")
        data = args[-1]
        if len(args) > 1 and args[0] is not None:
            self._set_handle(args[0])
        if isinstance(data, (bytes, bytearray)):
            data = data.decode()
        elif isinstance(data, list):
            data = bytes(data).decode()
        elif not isinstance(data, str):
            raise TypeError(f"deserialize: pyobj must be a list of ints, bytes or str, not {type(data).__name__}")
        self._deserialize_plan(data)

    def query_tensor_attributes_of_uid(self, uid):
        """A copy of the graph's tensor with this uid; an unknown uid raises ValueError."""
        t = self.find_tensor(int(uid))
        if t is None:
            raise ValueError(f"query_tensor_attributes_of_uid: the graph has no tensor with uid {int(uid)}")
        return t._copy()

    def get_inputs(self):
        return [t for t in self.tensors() if not t.get_is_virtual() and not self._is_produced(t)]

    def get_outputs(self):
        return [t for t in self.tensors() if not t.get_is_virtual() and self._is_produced(t)]

    def _is_produced(self, t):
        for n in self.nodes_info():
            for o in n["outputs"].values():
                if o is not None and o.get_uid() == t.get_uid() and o.get_name() == t.get_name():
                    return True
        return False

    def __repr__(self):
        try:
            return self.to_json()
        except Exception:
            nodes = ", ".join(f'{n["method"]} "{n["name"]}"' for n in self.nodes_info())
            return f"<opendnn.pygraph {self.get_name()!r}: {nodes}>"

    def print(self):
        print(repr(self))


def _int_list(values, what):
    """values as a list of ints; floats (2.7) and bools are a TypeError, not truncated."""
    out = []
    for v in values:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise TypeError(f"{what} must hold ints, got {type(v).__name__} {v!r}")
        out.append(v.__index__())
    return out


# Largest finite magnitude of each floating type (values beyond it are an error; NaN/inf are not).
_FLOAT_MAX = {"FLOAT": 3.4028234663852886e38, "HALF": 65504.0, "BFLOAT16": 3.3895313892515355e38,
              "FP8_E4M3": 448.0, "FP8_E5M2": 57344.0, "FP8_E8M0": 1.7014118346046923e38, "FP4_E2M1": 6.0}
_INT_RANGE = {"INT8": (-2**7, 2**7 - 1), "UINT8": (0, 2**8 - 1), "INT32": (-2**31, 2**31 - 1),
              "INT64": (-2**63, 2**63 - 1), "BOOLEAN": (0, 1)}


def _scalar_in_range(value, fval, ival, dt):
    """(float, int) parts of a scalar checked against data type dt's range."""
    name = dt.name
    if name in _INT_RANGE:
        if isinstance(value, numbers.Integral):
            iv = int(value)
        else:
            f = float(value)
            if f != f or f in (float("inf"), float("-inf")) or f != int(f):
                raise ValueError(f"tensor_scalar: {value!r} is not a whole number, as {name} needs")
            iv = int(f)
        lo, hi = _INT_RANGE[name]
        if not lo <= iv <= hi:
            raise ValueError(f"tensor_scalar: {value!r} is out of range for {name} [{lo}, {hi}]")
        return float(iv), iv
    if name == "NOT_SET":
        raise ValueError("tensor_scalar: data_type NOT_SET")
    f = float(value)
    limit = _FLOAT_MAX.get(name)
    if limit is not None and f == f and abs(f) != float("inf") and abs(f) > limit:
        raise ValueError(f"tensor_scalar: {value!r} is out of range for {name} (largest finite value {limit:g})")
    return f, ival


def _host_value(a):
    """The one element of a host array, as a Python number."""
    item = getattr(a, "item", None)
    if item is not None:
        return item()
    import numpy as np

    return np.asarray(a).reshape(-1)[0].item() if hasattr(a, "__array_interface__") else \
        np.from_dlpack(a).reshape(-1)[0].item()


def _tensor_repr(t):
    """cuDNN Frontend prints a tensor as the JSON of its attributes."""
    dt = t.get_data_type()
    value = t._get_value() if t.get_is_pass_by_value() else None
    ragged = t.get_ragged_offset()
    doc = {
        "alignment": t.get_alignment(),
        "data_type": None if dt == data_type.NOT_SET else dt.name,
        "dim": list(t.get_dim()),
        "is_pass_by_value": t.get_is_pass_by_value(),
        "is_virtual": t.get_is_virtual(),
        "name": t.get_name(),
        "pass_by_value": value,
        "ragged_offset_uid": None if ragged is None or not ragged.has_uid() else ragged.get_uid(),
        "reordering_type": t.get_reordering_type().name,
        "stride": list(t.get_stride()),
        "uid": t.get_uid(),
        "uid_assigned": t.has_uid(),
        "vector_count": t.get_vector_count(),
        "vector_dimension": t.get_vector_dimension(),
    }
    return json.dumps(doc, sort_keys=True)


_Tensor.__repr__ = _tensor_repr


def _describe_array(a):
    """(dims, strides in elements, data type, in host memory) of an array-like, without importing its
    library."""
    if hasattr(a, "data_ptr") and hasattr(a, "stride") and hasattr(a, "dtype"):  # torch.Tensor
        return list(a.shape), list(a.stride()), to_data_type(a.dtype), not getattr(a, "is_cuda", False)
    if hasattr(a, "strides") and hasattr(a, "itemsize") and hasattr(a, "dtype"):  # numpy
        item = a.itemsize
        return list(a.shape), [s // item for s in a.strides], to_data_type(a.dtype), True
    for attr in ("__cuda_array_interface__", "__array_interface__"):
        iface = getattr(a, attr, None)
        if iface is not None:
            dt = _interface_dtype(iface)
            dims = list(iface["shape"])
            st = iface.get("strides")
            strides = [s // dt.itemsize for s in st] if st else _row_major(dims)
            return dims, strides, to_data_type(dt), attr == "__array_interface__"
    if hasattr(a, "__dlpack__"):
        from ._dtypes import DLPACK

        info = _C._dlpack_info(a)
        key = (info["code"], info["bits"])
        if key not in DLPACK:
            raise TypeError(f"DLPack dtype {key} has no opendnn data_type")
        return info["shape"], info["strides"], DLPACK[key], info["device_type"] == 1
    raise TypeError(f"cannot describe a {type(a).__name__} as a tensor")


def _interface_dtype(iface):
    import numpy as np

    descr = iface.get("descr")
    return np.dtype(descr if descr and len(descr) > 1 else iface["typestr"])


def _array_facts(a):
    """What execute() checks of an object that describes its memory through __cuda_array_interface__,
    __array_interface__ or __dlpack__: (address, dims, byte strides, data_type, writable, where: 1 host,
    2 device, 3 both, kind), or None when it describes none."""
    for attr, host in (("__cuda_array_interface__", False), ("__array_interface__", True)):
        iface = getattr(a, attr, None)
        if iface is None:
            continue
        dt = _interface_dtype(iface)
        dims = list(iface["shape"])
        st = iface.get("strides")
        strides = list(st) if st else [s * dt.itemsize for s in _row_major(dims)]
        data = iface.get("data")
        if not isinstance(data, tuple):
            return None
        try:
            t = _C.data_type.NOT_SET if dt.name == "float4_e2m1fn" else to_data_type(dt)
        except TypeError:
            t = _C.data_type.NOT_SET
        return data[0] or 0, dims, strides, t, not data[1], 1 if host else 2, f"{type(a).__name__} ({attr})"
    if hasattr(a, "__dlpack__"):
        from ._dtypes import DLPACK

        info = _C._dlpack_info(a)
        bits = info["bits"] * info["lanes"]
        t = DLPACK.get((info["code"], info["bits"]), _C.data_type.NOT_SET) if info["lanes"] == 1 else _C.data_type.NOT_SET
        strides = [s * bits // 8 for s in info["strides"]]
        # CPU: host; CUDA, ROCm: device; CUDA-pinned host and CUDA-managed: both.
        where = {1: 1, 3: 3, 13: 3}.get(info["device_type"], 2)
        return info["data"], info["shape"], strides, t, not info["read_only"], where, f"{type(a).__name__} (DLPack)"
    return None


# ---- generated methods ---------------------------------------------------------------------------

def _make_generic(method):
    def op(self, *args, name="", compute_data_type=None, **kwargs):
        return self._op(method, *args, name=name, compute_data_type=compute_data_type, **kwargs)

    spec = _SPECS[method]
    ports = ", ".join((p[2] or p[0]) + ("" if p[1] else "=None") for p in spec["inputs"])
    attrs = ", ".join(a[0] for a in spec["attrs"])
    op.__name__ = method
    op.__qualname__ = f"pygraph.{method}"
    op.__doc__ = (f"{spec['tag']}: inputs ({ports}); attributes ({attrs}); "
                  f"returns {', '.join(o[0] for o in spec['outputs'][:spec['num_outputs']])}.")
    return op


# Keyword names of each pointwise slot, by family (cuDNN Frontend names first).
_BINARY = (("a", "input", "input0", "x"), ("b", "comparison", "input1", "y"))
_UNARY = (("input", "a", "x"),)
_BACKWARD = (("loss", "grad", "dy", "input0"), ("input", "x", "input1"))
_SELECT = (("input0", "a"), ("input1", "b"), ("mask", "input2"))
# FE keyword -> our attribute, per mode family
_PW_ATTRS = {
    "RELU": {"negative_slope": "relu_lower_clip_slope", "lower_clip": "relu_lower_clip",
             "upper_clip": "relu_upper_clip"},
    "ELU": {"alpha": "elu_alpha", "elu_alpha": "elu_alpha"},
    "SOFTPLUS": {"beta": "softplus_beta", "softplus_beta": "softplus_beta"},
    "SWISH": {"beta": "swish_beta", "swish_beta": "swish_beta"},
    "GEN_INDEX": {"axis": "axis"},
}
# cuDNN Frontend's positional parameters after the tensors, per mode family (the rest of a family's
# attributes are keyword-only); swish_backward takes compute_data_type before swish_beta.
_PW_POSITIONAL = {
    "RELU": ("negative_slope", "lower_clip", "upper_clip", "compute_data_type", "name"),
    "SWISH_FWD": ("swish_beta", "compute_data_type", "name"),
    "SWISH_BWD": ("compute_data_type", "swish_beta", "name"),
}
_PW_DEFAULT_POSITIONAL = ("compute_data_type", "name")


def _make_pointwise(mode, method, arity):
    if mode == "BINARY_SELECT":
        slots = _SELECT
    elif mode.endswith("_BWD"):
        slots = _BACKWARD
    elif arity == 2:
        slots = _BINARY
    else:
        slots = _UNARY
    family = mode[:-4] if mode.endswith(("_FWD", "_BWD")) else mode
    attr_map = _PW_ATTRS.get(family, {})
    tail = _PW_POSITIONAL.get(mode, _PW_POSITIONAL.get(family, _PW_DEFAULT_POSITIONAL))
    params = [s[0] for s in slots] + list(tail)
    keyword_only = [k for k in attr_map if k not in params]

    def op(self, *args, **kwargs):
        if len(args) > len(params):
            raise TypeError(f"{method}() takes at most {len(params)} positional arguments ({len(args)} given)")
        values = dict(zip(params, args))
        for k, v in kwargs.items():
            canon = next((s[0] for s in slots if k in s), k)
            if canon not in params and canon not in keyword_only:
                raise TypeError(f"{method}() got an unexpected keyword argument '{k}'")
            if canon in values:
                raise TypeError(f"{method}() got multiple values for argument '{canon}'")
            values[canon] = v
        inputs = []
        for s in slots:
            if s[0] not in values:
                raise TypeError(f"{method}() missing required argument '{s[0]}'")
            inputs.append(values[s[0]])
        attrs = {attr_map[p]: values[p] for p in attr_map if p in values and values[p] is not None}
        return self._pointwise(mode, inputs, attrs, values.get("name", ""), values.get("compute_data_type"))

    op.__name__ = method
    op.__qualname__ = f"pygraph.{method}"
    extra = f", *, {', '.join(keyword_only)}" if keyword_only else ""
    op.__doc__ = f"Pointwise {mode}({', '.join(params)}{extra})."
    return op


for _method in _SPECS:
    if _method not in pygraph.__dict__:
        setattr(pygraph, _method, _make_generic(_method))
for _mode, _method, _arity in _PW_MODES:
    if _method not in pygraph.__dict__:
        setattr(pygraph, _method, _make_pointwise(_mode, _method, _arity))
