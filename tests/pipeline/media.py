"""Test media made on the spot with PyAV and pillow: short videos (optionally with a corrupt packet), audio-only
files, image folders. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def frame_picture(i: int, width: int = 64, height: int = 48) -> np.ndarray:
    """Frame ``i`` of the test videos: a gray level that changes with the index, and a white bar down the left side
    ``2 * i`` pixels wide (modulo the width), so order and count can be read back from pixels."""
    image = np.full((height, width, 3), (i * 8) % 200, np.uint8)
    image[:, : (i * 2) % width] = 255
    return image


def write_pattern_video(path, frames: int = 60, size: tuple = (64, 48), fps: int = 30, codec: str = "mpeg4",
                        gop: int | None = None) -> Path:
    """A short video of :func:`frame_picture` frames made with PyAV (for tests, scripts and benchmarks). ``size`` is
    ``(width, height)``; ``codec`` e.g. ``mpeg4``, ``libx264`` or ``mjpeg``; ``gop``: a keyframe every that many
    frames and at no scene cut (default: the encoder's choice)."""
    import av

    path = Path(path)
    width, height = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        if gop is not None:
            stream.codec_context.gop_size = gop
            # x264 takes 0 as "no scene cuts"; FFmpeg's own encoders cut less the higher the threshold
            no_cuts = "0" if codec in ("libx264", "libx265") else "1000000000"
            stream.codec_context.options = {"sc_threshold": no_cuts}
        for i in range(frames):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame_picture(i, width, height), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def make_video(path, frames: int = 30, width: int = 64, height: int = 48, codec: str = "mpeg4",
               fps: int = 25) -> Path:
    return write_pattern_video(path, frames, (width, height), fps, codec)


def corrupt_packet(path, packet_index: int) -> None:
    """Scramble the payload of one video packet in place (its header bytes kept), so that packet fails to decode."""
    import av

    with av.open(str(path)) as container:
        packets = [(p.pos, p.size) for p in container.demux(container.streams.video[0]) if p.size]
    pos, size = packets[packet_index]
    data = bytearray(Path(path).read_bytes())
    for k in range(pos + 2, pos + size):
        data[k] = (data[k] * 7 + 13) % 256
    Path(path).write_bytes(bytes(data))


def make_audio_only(path, seconds: float = 0.2) -> Path:
    import av

    path = Path(path)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=8000)
        samples = int(8000 * seconds)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, samples), np.int16), format="s16", layout="mono")
        frame.rate = 8000
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def decode_all(path) -> list:
    import av

    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def make_image_folder(folder, count: int = 10, sizes=((40, 30), (64, 48))) -> list:
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        width, height = sizes[i % len(sizes)]
        name = f"img_{i:03d}.png"
        Image.fromarray(frame_picture(i, width, height)).save(folder / name)
        names.append(name)
    return names


class FakeNvc:
    """What trtkit uses of PyNvVideoCodec: ``SimpleDecoder(...).get_stream_metadata()`` / ``get_batch_frames(n)``.

    With ``cuda`` (a :class:`~tests.fakes.fake_cuda.FakeCudart`) and ``use_device_memory=True``, frames are
    ``DecodedFrame`` s as PyNvVideoCodec gives them: no ``__cuda_array_interface__`` of their own, one plane from
    ``cuda()`` (``(H, W, 3)``, or ``(H, 3 W)`` bytes with ``flat_planes``), in ``n`` output surfaces the decoder
    overwrites on every call, as a hardware decoder may reuse its own. The pixels are written asynchronously, as
    NVDEC's conversion kernels write them: on the ``cuda_stream`` the decoder was given, else on a stream of the
    decoder's own that nothing outside it waits for (the worst a decoder may do: PyNvVideoCodec 2.2's frames say
    stream 0, and on the H200 they were right when read at once). ``refuse_stream`` makes the decoder refuse a
    ``cuda_stream``, as one that does not take the caller's stream would.
    """

    class OutputColorType:
        RGB = "RGB"

    def __init__(self, frames, fail=None, cuda=None, flat_planes=False, refuse_stream=False):
        self._frames, self._fail, self._cuda = frames, fail, cuda
        self._flat, self._refuse_stream = flat_planes, refuse_stream
        self.decoders: list = []

    def SimpleDecoder(self, path, **kwargs):  # noqa: N802 - the library's name
        if self._fail:
            raise RuntimeError(self._fail)
        if self._refuse_stream and kwargs.get("cuda_stream"):
            raise RuntimeError("cudastream input argument does not correspond to cudacontext argument")
        nvc = self

        class Decoder:
            def __init__(self):
                self.left = list(nvc._frames)
                self.kwargs = kwargs
                self.surfaces: list = []
                self.stream = kwargs.get("cuda_stream") or None
                if self.stream is None and nvc._cuda is not None and kwargs.get("use_device_memory"):
                    self.stream = int(nvc._cuda.cudaStreamCreateWithFlags(1)[1])  # the decoder's own

            def get_stream_metadata(self):
                return type("Meta", (), {"width": 64, "height": 48, "average_fps": 25.0, "num_frames": 3})()

            def seek_to_index(self, index):
                self.left = list(nvc._frames)[index:]

            def get_batch_frames(self, n):
                batch, self.left = self.left[:n], self.left[n:]
                if not (kwargs.get("use_device_memory") and nvc._cuda is not None):
                    return batch
                while len(self.surfaces) < len(batch):
                    self.surfaces.append(nvc._cuda.device_array(batch[0].shape, np.uint8))
                for surface, picture in zip(self.surfaces, batch):
                    nvc._cuda.enqueue(self.stream, lambda s=surface, p=picture: s.host_view().__setitem__(..., p))
                return [DecodedFrame(s, nvc._flat) for s in self.surfaces[: len(batch)]]

        decoder = Decoder()
        self.decoders.append(decoder)
        return decoder


class DecodedFrame:
    """PyNvVideoCodec's frame in device memory: ``shape`` and ``cuda()`` (its planes' CAI views), nothing more."""

    planes_asked = 0  # every DecodedFrame's cuda() calls, for the tests

    def __init__(self, surface, flat: bool):
        self.shape = list(surface.shape)
        self._surface, self._flat = surface, flat

    def cuda(self):
        DecodedFrame.planes_asked += 1
        if not self._flat:
            return [self._surface]
        height, width, _ = self._surface.shape
        surface = self._surface

        class Plane:
            __cuda_array_interface__ = {**surface.__cuda_array_interface__, "shape": (height, width * 3)}

        return [Plane()]

