"""What PyNvVideoCodec's device-memory frames hold, step by step (GPU host): host decoding as the reference, then
device decoding read back several ways (views held or dropped, after a device-wide synchronize or not, trtkit's
NvdecReader). Prints one JSON document; nothing is asserted.

    python scripts/nvdec_probe.py [--frames 8] [--size 96x64]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.pipeline.media


def summary(image: np.ndarray) -> list:
    """``[mean, white-bar width]`` of a pattern frame (the bar: columns of row 0 above 240)."""
    row = image[0, :, 0]
    return [round(float(image.mean()), 2), int((row > 240).sum())]


def host_array(frame) -> np.ndarray:
    """A host-memory frame of PyNvVideoCodec as a numpy array (through DLPack, else the buffer protocol)."""
    try:
        return np.from_dlpack(frame)
    except (TypeError, AttributeError, BufferError, RuntimeError):
        return np.asarray(frame)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--size", default="96x64")
    p.add_argument("--batch", type=int, default=16)
    args = p.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))

    import PyNvVideoCodec as nvc

    from tests.pipeline.media import write_pattern_video
    from trtkit.pipeline.video import NvdecReader
    from trtkit.runtime.cuda import Cuda

    cuda = Cuda()
    cuda.mem_get_info()  # the runtime's context, before the decoders
    out: dict = {"pynvvideocodec": getattr(nvc, "__version__", "?")}
    video = write_pattern_video(
        Path(tempfile.mkdtemp()) / "in.mp4", frames=args.frames, size=(width, height), codec="libx264"
    )
    rgb = nvc.OutputColorType.RGB
    host = [
        np.array(host_array(f))
        for f in nvc.SimpleDecoder(str(video), use_device_memory=False, output_color_type=rgb).get_batch_frames(64)
    ]
    out["host"] = [summary(h) for h in host]

    def read(ptr, shape, pitch=None) -> np.ndarray:
        buf = np.empty(shape, np.uint8)
        cuda.memcpy_dtoh_async(buf.ctypes.data, ptr, buf.nbytes, 0)
        cuda.stream_synchronize(0)
        return buf

    def same(images) -> list:
        return [bool(np.array_equal(a, b)) for a, b in zip(images, host)]

    # 1. device frames: what they say about themselves
    decoder = nvc.SimpleDecoder(str(video), use_device_memory=True, output_color_type=rgb)
    batch = decoder.get_batch_frames(args.batch)
    first = batch[0]
    planes = list(first.cuda())
    iface = dict(planes[0].__cuda_array_interface__)
    out["frame_type"] = type(first).__name__
    out["frame_attrs"] = [a for a in dir(first) if not a.startswith("__")]
    out["frame_shape"] = list(getattr(first, "shape", []) or [])
    out["plane_type"] = type(planes[0]).__name__
    out["cai"] = {k: (hex(v[0]) if k == "data" else v) for k, v in iface.items()}
    views = [list(f.cuda())[0] for f in batch]
    ptrs = [int(v.__cuda_array_interface__["data"][0]) for v in views]
    again = [int(list(f.cuda())[0].__cuda_array_interface__["data"][0]) for f in batch]
    out["plane_ptrs_distinct"] = len(set(ptrs))
    out["plane_ptr_same_on_second_call"] = ptrs == again
    out["ptr_steps"] = [ptrs[i + 1] - ptrs[i] for i in range(len(ptrs) - 1)]
    shape = (height, width, 3)
    # 2. read at once, views held (no device-wide synchronize)
    out["held_now"] = same([read(p, shape) for p in ptrs])
    # 3. after a device-wide synchronize, views held
    cuda.device_synchronize()
    out["held_after_device_sync"] = same([read(p, shape) for p in ptrs])
    out["held_after_device_sync_summary"] = [summary(read(p, shape)) for p in ptrs]
    del views, planes
    import gc

    gc.collect()
    cuda.device_synchronize()
    out["after_views_dropped"] = same([read(p, shape) for p in ptrs])
    # 4. after the next batch was asked for (the frames of the first one still referenced)
    decoder.get_batch_frames(args.batch)
    cuda.device_synchronize()
    out["after_next_batch"] = same([read(p, shape) for p in ptrs])
    del batch, first
    # 5. a fresh decoder, frame by frame (batch of 1), each read at once after a device synchronize
    decoder = nvc.SimpleDecoder(str(video), use_device_memory=True, output_color_type=rgb)
    one = []
    for _ in range(len(host)):
        got = decoder.get_batch_frames(1)
        if not got:
            break
        cuda.device_synchronize()
        plane = list(got[0].cuda())[0]
        one.append(read(int(plane.__cuda_array_interface__["data"][0]), shape))
    out["batch_of_one_device_sync"] = same(one)
    # 6. trtkit's reader, with and without the decoder on its stream
    for name, kwargs in (("reader", {}),):
        reader = NvdecReader(video, device_memory=True, **kwargs)
        owned = list(reader)
        out[f"{name}_ready_by"] = reader.frames_ready_by
        out[name] = same([o.to_host() for o in owned])
        out[f"{name}_summary"] = [summary(o.to_host()) for o in owned]
        reader.close()
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
