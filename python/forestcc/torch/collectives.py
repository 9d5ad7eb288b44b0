"""The collective methods of :class:`~forestcc.torch.process_group.ProcessGroupForestcc`.

Each method takes torch's arguments (tensor lists and an options object), makes the flat
buffers forestcc works on and returns ``self._run(call, start, finish, async_op)``. Reductions go
through :mod:`forestcc.torch.reductions`; everything else moves bytes. List forms (``allgather``
into a list, ``alltoall`` of lists, the ``*_coalesced`` calls) are packed into one buffer and
run as a single forestcc call, then unpacked when it completes. Every method passes ``_run`` the
device of its tensors (:func:`~forestcc.torch.tensors.call_device`); staging buffers live there.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from forestcc.torch import reductions
from forestcc.torch.errors import ArgumentError, ArgumentTypeError
from forestcc.torch.tensors import (
    byte_buffer,
    call_device,
    check_same,
    check_tensor,
    copy_bytes_into,
    host,
    named_list,
    new_bytes,
    one_tensor,
    pack_bytes,
)

__all__ = ["CollectivesMixin"]


class CollectivesMixin:
    """allreduce, broadcast, reduce, the gathers, scatters and all-to-alls (torch 2.13 names and
    their older aliases). Needs ``self._comm`` (a forestcc Communicator) and ``self._run``."""

    _comm: Any

    # -- reductions --------------------------------------------------------------------------

    def allreduce(self, tensors: Sequence[torch.Tensor], opts: Any = None):
        """All-reduce the (single) tensor in place with ``opts.reduceOp``; the Work's future
        completes with ``tensors``, as DDP's communication hooks expect."""
        t = one_tensor(tensors, "allreduce")
        red = reductions.resolve(_op(opts), t.dtype, "allreduce")
        buf = red.buffer(t)

        def finish():
            red.finish(buf)
            red.write_back(buf, t)
            return list(tensors)

        arr = host(buf)
        return self._run("allreduce",
                         lambda a: self._comm.all_reduce(arr, op=red.op, async_op=a),
                         finish, _async(opts), device=t.device)

    def allreduce_coalesced(self, tensors: Sequence[torch.Tensor], opts: Any = None):
        """All-reduce several tensors as one call (packed by dtype, one forestcc call each)."""
        call = "allreduce_coalesced"
        for i, t in enumerate(tensors):
            check_tensor(t, call, f"tensors[{i}]")
        device = call_device(call, named_list("tensors", tensors))
        groups: dict[torch.dtype, list[int]] = {}
        for i, t in enumerate(tensors):
            groups.setdefault(t.dtype, []).append(i)
        plans = []
        for dtype, idx in groups.items():
            red = reductions.resolve(_op(opts), dtype, call)
            parts = [red.buffer(tensors[i]) for i in idx]
            flat = torch.cat(parts) if len(parts) > 1 else parts[0]
            plans.append((red, idx, parts, flat))

        def start(a):
            return [self._comm.all_reduce(host(flat), op=red.op, async_op=a)
                    for red, _, _, flat in plans]

        def finish():
            for red, idx, parts, flat in plans:
                red.finish(flat)
                off = 0
                for i, part in zip(idx, parts):
                    n = part.numel()
                    red.write_back(flat[off:off + n], tensors[i])
                    off += n
            return list(tensors)

        return self._run(call, start, finish, _async(opts), device=device)

    def reduce(self, tensors: Sequence[torch.Tensor], opts: Any = None):
        """Reduce the tensor onto ``opts.rootRank``; the other ranks' tensors are left as
        they were."""
        t = one_tensor(tensors, "reduce")
        root = _root(opts, self.size(), "reduce")
        red = reductions.resolve(_op(opts), t.dtype, "reduce")
        buf = red.buffer(t)
        out = torch.empty_like(buf)

        def finish():
            if self.rank() == root:
                red.finish(out)
                red.write_back(out, t)
            return list(tensors)

        return self._run("reduce",
                         lambda a: self._comm.reduce(host(buf), root, op=red.op, out=host(out),
                                                     async_op=a),
                         finish, _async(opts), device=t.device)

    def reduce_scatter(self, outputs: Sequence[torch.Tensor],
                       input_lists: Sequence[Sequence[torch.Tensor]], opts: Any = None):
        """Reduce ``input_lists[0]`` (one tensor per rank) over the ranks; rank r gets the
        reduction of every rank's tensor r in its output."""
        call = "reduce_scatter"
        t = one_tensor(outputs, call, "output")
        inputs = _one_list(input_lists, call, "input_list")
        self._check_count(inputs, call, "input_list")
        check_same(inputs, t, call, "input_list")
        device = call_device(call, [("output", t)] + named_list("input_list", inputs))
        red = reductions.resolve(_op(opts), t.dtype, call)
        packed = torch.cat([red.buffer(x) for x in inputs])
        out = red.buffer(t)
        return self._reduce_scatter_run(call, red, out, packed, [(t, 0)], opts, device)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None):
        """Reduce ``input`` (size × output's elements) over the ranks; rank r gets block r in
        ``output`` (``reduce_scatter_tensor``)."""
        call = "reduce_scatter_tensor"
        self._check_whole(call, output, input, "input")
        red = reductions.resolve(_op(opts), output.dtype, call)
        out = red.buffer(output)  # output's own memory when it is contiguous
        return self._reduce_scatter_run(call, red, out, red.buffer(input), [(output, 0)], opts,
                                        output.device)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: Sequence[torch.Tensor],
                                        inputs: Sequence[torch.Tensor], opts: Any = None):
        """Several ``reduce_scatter_tensor`` calls of one dtype as one forestcc call."""
        call = "reduce_scatter_tensor_coalesced"
        n = self.size()
        if len(outputs) != len(inputs) or not outputs:
            raise ArgumentError(f"forestcc {call}: {len(outputs)} outputs for {len(inputs)} inputs")
        for i, (o, x) in enumerate(zip(outputs, inputs)):
            check_tensor(o, call, f"outputs[{i}]")
            check_tensor(x, call, f"inputs[{i}]")
            _same_dtype(o, x, call)
            if o.dtype != outputs[0].dtype:
                raise ArgumentTypeError(f"forestcc {call}: outputs[{i}] is {o.dtype}, outputs[0] "
                                        f"{outputs[0].dtype}; coalesced calls take one dtype")
            if x.numel() != o.numel() * n:
                raise ArgumentError(f"forestcc {call}: inputs[{i}] has {x.numel()} elements, "
                                    f"expected {n} × {o.numel()}")
        device = call_device(call, named_list("outputs", outputs) + named_list("inputs", inputs))
        red = reductions.resolve(_op(opts), outputs[0].dtype, call)
        # Block r of the packed input is every input's block r, one after another.
        packed = torch.cat([red.buffer(x).view(n, _buffer_numel(red, x) // n) for x in inputs],
                           dim=1).reshape(-1)
        total = sum(o.numel() for o in outputs)
        out = red.new_buffer(total, device)
        places, off = [], 0
        for o in outputs:
            places.append((o, off))
            off += _buffer_numel(red, o)
        return self._reduce_scatter_run(call, red, out, packed, places, opts, device)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def _reduce_scatter_run(self, call, red, out, packed, places, opts, device):
        def finish():
            red.finish(out)
            for dst, off in places:
                n = _buffer_numel(red, dst)
                red.write_back(out[off:off + n], dst)
            return [dst for dst, _ in places]

        return self._run(call, lambda a: self._comm.reduce_scatter(host(out), host(packed),
                                                                   op=red.op, async_op=a),
                         finish, _async(opts), device=device)

    # -- data movement -------------------------------------------------------------------------

    def broadcast(self, tensors: Sequence[torch.Tensor], opts: Any = None):
        """Every rank's tensor becomes ``opts.rootRank``'s."""
        t = one_tensor(tensors, "broadcast")
        root = _root(opts, self.size(), "broadcast")
        if opts is not None and getattr(opts, "rootTensor", 0) != 0:
            raise ArgumentError(f"forestcc broadcast: rootTensor must be 0, got {opts.rootTensor}")
        buf, copied = byte_buffer(t)

        def finish():
            if copied:
                copy_bytes_into(t, buf)
            return list(tensors)

        return self._run("broadcast", lambda a: self._comm.broadcast(host(buf), root, async_op=a),
                         finish, _async(opts), device=t.device)

    def allgather(self, output_lists: Sequence[Sequence[torch.Tensor]],
                  inputs: Sequence[torch.Tensor], opts: Any = None):
        """``output_lists[0][r]`` receives rank r's (single) input tensor."""
        call = "allgather"
        t = one_tensor(inputs, call, "input")
        outs = _one_list(output_lists, call, "output_list")
        self._check_count(outs, call, "output_list")
        check_same(outs, t, call, "output_list")
        device = call_device(call, [("input", t)] + named_list("output_list", outs))
        src, _ = byte_buffer(t)
        flat = new_bytes(src.numel() * self.size(), device)
        return self._gathered(call, flat, src, [outs], [t], opts)

    def allgather_coalesced(self, output_lists: Sequence[Sequence[torch.Tensor]],
                            inputs: Sequence[torch.Tensor], opts: Any = None):
        """``output_lists[r][j]`` receives rank r's ``inputs[j]``: one forestcc call for all."""
        call = "allgather_coalesced"
        for j, x in enumerate(inputs):
            check_tensor(x, call, f"inputs[{j}]")
        if len(output_lists) != self.size():
            raise ArgumentError(f"forestcc {call}: output_lists has {len(output_lists)} lists, "
                                f"expected one per rank ({self.size()})")
        for r, outs in enumerate(output_lists):
            if len(outs) != len(inputs):
                raise ArgumentError(f"forestcc {call}: output_lists[{r}] has {len(outs)} tensors "
                                    f"for {len(inputs)} inputs")
            for j, (o, x) in enumerate(zip(outs, inputs)):
                check_same([o], x, call, f"output_lists[{r}][{j}] vs inputs")
        call_device(call, named_list("inputs", inputs) +
                    [(f"output_lists[{r}][{j}]", o) for r, outs in enumerate(output_lists)
                     for j, o in enumerate(outs)])
        src, _ = pack_bytes(inputs)
        flat = new_bytes(src.numel() * self.size(), src.device)
        return self._gathered(call, flat, src, [list(col) for col in zip(*output_lists)],
                              list(inputs), opts)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None):
        """``output`` (size × input's elements) receives every rank's ``input`` in rank order
        (``all_gather_into_tensor``); in place when ``input`` is ``output``'s block ``rank``."""
        call = "all_gather_into_tensor"
        self._check_whole(call, output, input, "output")
        out, copied = byte_buffer(output)
        src, _ = byte_buffer(input)

        def finish():
            if copied:
                copy_bytes_into(output, out)
            return [output]

        return self._run(call, lambda a: self._comm.all_gather(host(out), host(src), async_op=a),
                         finish, _async(opts), device=output.device)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs: Sequence[torch.Tensor],
                                    inputs: Sequence[torch.Tensor], opts: Any = None):
        """Several ``all_gather_into_tensor`` calls as one forestcc call."""
        call = "all_gather_into_tensor_coalesced"
        if len(outputs) != len(inputs) or not outputs:
            raise ArgumentError(f"forestcc {call}: {len(outputs)} outputs for {len(inputs)} inputs")
        n = self.size()
        for i, (o, x) in enumerate(zip(outputs, inputs)):
            check_tensor(o, call, f"outputs[{i}]")
            check_tensor(x, call, f"inputs[{i}]")
            _same_dtype(o, x, call)
            if o.numel() != x.numel() * n:
                raise ArgumentError(f"forestcc {call}: outputs[{i}] has {o.numel()} elements, "
                                    f"expected {n} × {x.numel()}")
        device = call_device(call, named_list("outputs", outputs) + named_list("inputs", inputs))
        src, _ = pack_bytes(inputs)
        flat = new_bytes(src.numel() * n, device)
        offsets = _offsets(inputs)

        def finish():
            # outputs[j] is rank-major: its block r is rank r's inputs[j].
            rows = flat.view(n, src.numel())
            for j, o in enumerate(outputs):
                nb = inputs[j].numel() * inputs[j].element_size()
                if nb:
                    copy_bytes_into(o, rows[:, offsets[j]:offsets[j] + nb].reshape(-1))
            return list(outputs)

        return self._run(call, lambda a: self._comm.all_gather(host(flat), host(src), async_op=a),
                         finish, _async(opts), device=device)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _gathered(self, call, flat, src, columns, inputs, opts):
        """Run an all_gather of ``src`` into ``flat`` and unpack: ``columns[j][r]`` gets rank r's
        ``inputs[j]``."""
        offsets = _offsets(inputs)
        total = src.numel()

        def finish():
            rows = flat.view(self.size(), total) if total else None
            for j, col in enumerate(columns):
                nb = inputs[j].numel() * inputs[j].element_size()
                for r, dst in enumerate(col):
                    if nb:
                        copy_bytes_into(dst, rows[r, offsets[j]:offsets[j] + nb])
            return [dst for col in columns for dst in col]

        return self._run(call, lambda a: self._comm.all_gather(host(flat), host(src), async_op=a),
                         finish, _async(opts), device=flat.device)

    def gather(self, output_lists: Sequence[Sequence[torch.Tensor]],
               inputs: Sequence[torch.Tensor], opts: Any = None):
        """Root's ``output_lists[0][r]`` receives rank r's input; other ranks pass ``[]``."""
        call = "gather"
        t = one_tensor(inputs, call, "input")
        root = _root(opts, self.size(), call)
        src, _ = byte_buffer(t)
        outs: list[torch.Tensor] = []
        flat = None
        if self.rank() == root:
            outs = _one_list(output_lists, call, "output_list")
            self._check_count(outs, call, "output_list")
            check_same(outs, t, call, "output_list")
            call_device(call, [("input", t)] + named_list("output_list", outs))
            flat = new_bytes(src.numel() * self.size(), t.device)
        elif output_lists and any(len(lst) for lst in output_lists):
            raise ArgumentError(f"forestcc {call}: only the root (rank {root}) passes output "
                                f"tensors")

        def finish():
            if flat is not None and src.numel():
                rows = flat.view(self.size(), -1)
                for r, dst in enumerate(outs):
                    copy_bytes_into(dst, rows[r])
            return list(outs)

        return self._run(call,
                         lambda a: self._comm.gather(host(flat), host(src), root, async_op=a),
                         finish, _async(opts), device=t.device)

    def scatter(self, outputs: Sequence[torch.Tensor],
                input_lists: Sequence[Sequence[torch.Tensor]], opts: Any = None):
        """Rank r's (single) output receives root's ``input_lists[0][r]``; other ranks pass
        ``[]`` as ``input_lists``."""
        call = "scatter"
        t = one_tensor(outputs, call, "output")
        root = _root(opts, self.size(), call)
        out, copied = byte_buffer(t)
        packed = None
        if self.rank() == root:
            ins = _one_list(input_lists, call, "input_list")
            self._check_count(ins, call, "input_list")
            check_same(ins, t, call, "input_list")
            call_device(call, [("output", t)] + named_list("input_list", ins))
            packed, _ = pack_bytes(ins)
        elif input_lists and any(len(lst) for lst in input_lists):
            raise ArgumentError(f"forestcc {call}: only the root (rank {root}) passes input "
                                f"tensors")

        def finish():
            if copied:
                copy_bytes_into(t, out)
            return [t]

        return self._run(call,
                         lambda a: self._comm.scatter(host(out), host(packed), root, async_op=a),
                         finish, _async(opts), device=t.device)

    def alltoall(self, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor],
                 opts: Any = None):
        """``inputs[p]`` goes to rank p, which receives it in its ``outputs[rank]``; tensors may
        differ in size between peers (one dtype)."""
        call = "alltoall"
        self._check_count(outputs, call, "output_tensor_list")
        self._check_count(inputs, call, "input_tensor_list")
        for i, (o, x) in enumerate(zip(outputs, inputs)):
            check_tensor(o, call, f"output_tensor_list[{i}]")
            check_tensor(x, call, f"input_tensor_list[{i}]")
            _same_dtype(o, x, call)
        device = call_device(call, named_list("output_tensor_list", outputs) +
                             named_list("input_tensor_list", inputs))
        src, _ = pack_bytes(inputs)
        in_splits = [x.numel() * x.element_size() for x in inputs]
        out_splits = [o.numel() * o.element_size() for o in outputs]
        flat = new_bytes(sum(out_splits), device)

        def finish():
            off = 0
            for o, nb in zip(outputs, out_splits):
                if nb:
                    copy_bytes_into(o, flat[off:off + nb])
                off += nb
            return list(outputs)

        return self._run(call, lambda a: self._all_to_all(flat, src, out_splits, in_splits, False, a),
                         finish, _async(opts), device=device)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_split_sizes: Sequence[int] | None = None,
                          input_split_sizes: Sequence[int] | None = None, opts: Any = None):
        """Rows of ``input`` go to the ranks (``input_split_sizes[p]`` rows to rank p, or equal
        blocks when empty) and arrive in ``output`` in rank order (``output_split_sizes``)."""
        call = "all_to_all_single"
        check_tensor(output, call, "output")
        check_tensor(input, call, "input")
        _same_dtype(output, input, call)
        device = call_device(call, [("output", output), ("input", input)])
        n = self.size()
        in_bytes = _split_bytes(input, input_split_sizes, n, call, "input")
        out_bytes = _split_bytes(output, output_split_sizes, n, call, "output")
        out, copied = byte_buffer(output)
        src, _ = byte_buffer(input)

        def finish():
            if copied:
                copy_bytes_into(output, out)
            return [output]

        even = not output_split_sizes and not input_split_sizes  # torch passes [] for none
        return self._run(call, lambda a: self._all_to_all(out, src, out_bytes, in_bytes, even, a),
                         finish, _async(opts), device=device)

    alltoall_base = all_to_all_single

    def _all_to_all(self, out, src, out_splits, in_splits, even, async_op):
        # The choice must be the same on every rank (the call is part of what ranks compare):
        # by whether split sizes were given, never by their values, which differ between ranks.
        if even:
            return self._comm.all_to_all(host(out), host(src), async_op=async_op)
        return self._comm.all_to_all_v(host(out), host(src), list(out_splits), list(in_splits),
                                       async_op=async_op)

    def _check_whole(self, call: str, output: torch.Tensor, input: torch.Tensor,
                     whole: str) -> None:
        """Both are usable tensors of one dtype, and ``whole`` ("output" or "input") holds size ×
        the other's elements (all_gather_into_tensor, reduce_scatter_tensor)."""
        check_tensor(output, call, "output")
        check_tensor(input, call, "input")
        call_device(call, [("output", output), ("input", input)])
        _same_dtype(output, input, call)
        big, small, part = (output, input, "input") if whole == "output" else (input, output, "output")
        if big.numel() != small.numel() * self.size():
            raise ArgumentError(f"forestcc {call}: {whole} has {big.numel()} elements, expected "
                                f"{self.size()} × {small.numel()} ({part}'s) = "
                                f"{self.size() * small.numel()}")

    def _check_count(self, tensors: Sequence[torch.Tensor], call: str, arg: str) -> None:
        if len(tensors) != self.size():
            raise ArgumentError(f"forestcc {call}: {arg} has {len(tensors)} tensors, expected one "
                                f"per rank ({self.size()})")


def _op(opts: Any):
    return None if opts is None else opts.reduceOp


def _async(opts: Any) -> bool:
    return True if opts is None else bool(getattr(opts, "asyncOp", True))


def _root(opts: Any, size: int, call: str) -> int:
    root = 0 if opts is None else opts.rootRank
    if not 0 <= root < size:
        raise ArgumentError(f"forestcc {call}: root must be a rank of the group in [0, {size}), "
                            f"got {root}")
    return root


def _one_list(lists: Sequence[Sequence[torch.Tensor]], call: str, arg: str) -> list[torch.Tensor]:
    if len(lists) != 1:
        raise ArgumentError(f"forestcc {call}: expects one {arg} (one per process), got "
                            f"{len(lists)}")
    return list(lists[0])


def _same_dtype(a: torch.Tensor, b: torch.Tensor, call: str) -> None:
    if a.dtype != b.dtype:
        raise ArgumentTypeError(f"forestcc {call}: output is {a.dtype} but input is {b.dtype}")


def _offsets(tensors: Sequence[torch.Tensor]) -> list[int]:
    out, off = [], 0
    for t in tensors:
        out.append(off)
        off += t.numel() * t.element_size()
    return out


def _buffer_numel(red: reductions.Reduction, t: torch.Tensor) -> int:
    return t.numel() * 2 if red.kind == "pairs" else t.numel()


def _split_bytes(t: torch.Tensor, splits: Sequence[int] | None, n: int, call: str,
                 arg: str) -> list[int]:
    """Per-rank byte counts of ``t`` cut into rows by ``splits`` (equal blocks when empty)."""
    rows = t.shape[0] if t.dim() else 1
    row_bytes = (t.numel() // rows if rows else 0) * t.element_size()
    if not splits:
        if rows % n:
            raise ArgumentError(f"forestcc {call}: {arg} has {rows} rows, which do not divide into "
                                f"{n} equal blocks; pass split sizes")
        return [rows // n * row_bytes] * n
    if len(splits) != n:
        raise ArgumentError(f"forestcc {call}: {arg}_split_sizes has {len(splits)} entries, "
                            f"expected one per rank ({n})")
    if any(s < 0 for s in splits) or sum(splits) != rows:
        raise ArgumentError(f"forestcc {call}: {arg}_split_sizes {list(splits)} must be "
                            f"non-negative and sum to {arg}'s {rows} rows")
    return [int(s) * row_bytes for s in splits]
